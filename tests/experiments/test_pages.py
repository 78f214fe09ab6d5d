"""The committed results pages are their templates rendered from the records (pages.render):
each page exactly, no template typing a figure or a verdict word by hand (pages.typed), every
results folder a page's expressions name linked from it, and no line of a page over 200
characters outside its tables. `onmt-posenc pages` writes them again, `--check` compares."""
import re
import shutil

import pytest
from conftest import REPO, command, run

from onmt_posenc.experiments.pages import plots, render
from onmt_posenc.experiments.pages.records import RecordError, Records
from onmt_posenc.experiments.pages.typed import typed_by_hand

TEMPLATES = render.templates(REPO)
READING = Records(REPO / render.RESULTS)  # read once for all the pages
LONGEST_LINE = 200


def name(template):
    return str(template.relative_to(REPO))


def test_the_pages_that_quote_results_have_templates():
    """Every results folder's README, the results index, docs/results.md and the README's main
    results; and no binding comment of the pages before templates is left anywhere."""
    pages = {name(render.target(t)[0]) for t in TEMPLATES}
    results = REPO / render.RESULTS
    readmes = {str(p.relative_to(REPO)) for p in results.glob("*/README.md")}
    assert readmes | {"README.md", "docs/results.md", str(render.RESULTS / "README.md")} <= pages
    tracked = [p for p in REPO.rglob("*.md") if ".venv" not in p.parts and "node_modules" not in p.parts]
    assert [p for p in tracked if "<!-- figures" in p.read_text(encoding="utf-8")] == []


@pytest.mark.parametrize("template", TEMPLATES, ids=name)
def test_a_committed_page_is_its_template_rendered(template):
    page, text = render.page_text(template, REPO, READING)
    assert page.read_text(encoding="utf-8") == text, f"run `onmt-posenc pages` and commit {page}"


@pytest.mark.parametrize("template", TEMPLATES, ids=name)
def test_a_template_types_no_figure_and_no_verdict_by_hand(template):
    assert typed_by_hand(template.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("template", TEMPLATES, ids=name)
def test_a_page_links_every_results_folder_its_expressions_name(template):
    source = template.read_text(encoding="utf-8")
    named = set(re.findall(r"\b(?:runs?|claim|record|cell|section)\(\"([\w.-]+):", source))
    named = {folder for folder in named if (REPO / render.RESULTS / folder).is_dir()}
    here = render.folder_of(template.resolve(), REPO)
    page = render.target(template)[0].read_text(encoding="utf-8")
    unlinked = sorted(folder for folder in named - {here}
                      if not re.search(rf"\]\((?:[^)]*/)?{re.escape(folder)}/", page))
    assert unlinked == []


@pytest.mark.parametrize("template", TEMPLATES, ids=name)
def test_a_page_and_its_template_read_as_source(template):
    """No line over LONGEST_LINE characters outside a table, in the page or in its template."""
    page = render.target(template)[0]
    for path in (template, page):
        text = path.read_text(encoding="utf-8")
        if path == page and render.target(template)[1]:  # a section of a page: that section only
            text = render.render(template, REPO, READING)
        long = [n for n, line in enumerate(text.splitlines(), 1)
                if len(line) > LONGEST_LINE and not line.lstrip().startswith("|")]
        assert long == [], f"{path}: lines over {LONGEST_LINE} characters: {long[:20]}"


# The audit's plants (issue 71), each a statement a page could be changed to: (what, the statement)
PLANTS = [("an integer count", "240 of the 250"), ("degrees of freedom", "8 degrees of freedom"),
          ("a ratio glued to x", "x2.16"), ("a decimal rebound", "+1.61 ± 0.33"), ("a verdict word", "is worse")]


@pytest.mark.parametrize("what, wrong", PLANTS, ids=[p[0] for p in PLANTS])
def test_a_planted_statement_fails(what, wrong, tmp_path):
    """Planted in a copy of a rendered page, the statement makes the page differ from its
    template's render; typed into the template, it is a figure or verdict typed by hand."""
    template = next(t for t in TEMPLATES if name(t) == "recipes/experiments/results/demo-scaled/README.md.jinja")
    with_plant = template.read_text(encoding="utf-8") + f"\nA planted sentence: {wrong}.\n"
    assert typed_by_hand(with_plant), f"{what} typed in a template is not found"
    # in a copy of the project: `onmt-posenc pages --check` fails on the page, and on the template
    root = _copy_of_demo_scaled(tmp_path)
    copied = root / render.RESULTS / "demo-scaled" / "README.md"
    copied.write_text(copied.read_text(encoding="utf-8").replace("SHAPE", f"SHAPE ({wrong})", 1), encoding="utf-8")
    result = run([command("onmt-posenc"), "pages", "--check", "--root", str(root)], expect_ok=False)
    assert result.returncode == 1 and f"differs: {copied}" in result.stdout, result.stdout + result.stderr
    (root / render.RESULTS / "demo-scaled" / "README.md.jinja").write_text(with_plant, encoding="utf-8")
    result = run([command("onmt-posenc"), "pages", "--check", "--root", str(root)], expect_ok=False)
    assert result.returncode == 2 and "is typed by hand" in result.stderr, result.stdout + result.stderr


def _copy_of_demo_scaled(tmp_path):
    """A project folder holding demo-scaled's template and records, and the demo folder it names."""
    root = tmp_path / "project"
    for folder in ("demo-scaled", "demo"):
        shutil.copytree(REPO / render.RESULTS / folder, root / render.RESULTS / folder)
    (root / "docs").mkdir()
    return root


def test_the_pages_command_writes_a_page_again_and_checks_it(tmp_path):
    root = _copy_of_demo_scaled(tmp_path)
    page = root / render.RESULTS / "demo-scaled" / "README.md"
    committed = page.read_text(encoding="utf-8")
    result = run([command("onmt-posenc"), "pages", "--check", "--root", str(root)])
    assert "1 templates, 0 pages differ" in result.stdout
    page.write_text("stale\n", encoding="utf-8")
    result = run([command("onmt-posenc"), "pages", "--root", str(root)])
    assert f"rendered: {page}" in result.stdout and page.read_text(encoding="utf-8") == committed
    template = root / render.RESULTS / "demo-scaled" / "README.md.jinja"
    template.write_text(template.read_text(encoding="utf-8") + '\n{{ run("synthetic/ape/seed9").bleu.test | fixed(2) }}\n',
                        encoding="utf-8")
    result = run([command("onmt-posenc"), "pages", "--root", str(root)], expect_ok=False)
    assert result.returncode == 2 and "README.md.jinja" in result.stderr and (
        "has 0 runs 'synthetic/ape/seed9'" in result.stderr), result.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run([command("onmt-posenc"), "pages", "--root", str(empty)], expect_ok=False)
    assert result.returncode == 2 and "no *.md.jinja template" in result.stderr


def test_the_pages_command_draws_the_main_results_plot_and_a_check_draws_none(tmp_path):
    """The README's main results show a plot of the comparisons its table quotes: `onmt-posenc
    pages` writes it as a PNG (its bytes depend on the machine's fonts: not compared); a check
    writes none; the page is its template's render either way."""
    template = REPO / "docs" / "main-results.md.jinja"
    root = tmp_path / "project"
    for folder in ("multi30k-scaled", "small_enja-scaled", "multi30k-extrapolate", "demo-scaled",
                   "multi30k-scaled-swapped"):
        shutil.copytree(REPO / render.RESULTS / folder, root / render.RESULTS / folder)
    (root / "docs").mkdir()
    shutil.copy(template, root / "docs")
    shutil.copy(REPO / "README.md", root)
    plot = root / "docs" / "images" / "main-results.png"
    pages = [command("onmt-posenc"), "pages", "--root", str(root), str(root / "docs" / template.name)]
    result = run([*pages, "--check"])
    assert "1 templates, 0 pages differ" in result.stdout and not plot.exists()
    run(pages)
    assert plot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") and plot.stat().st_size > 10_000
    assert "![" in (root / "README.md").read_text(encoding="utf-8").split("## Main results", 1)[1]
    assert (root / "README.md").read_text(encoding="utf-8") == (REPO / "README.md").read_text(encoding="utf-8")


def test_a_plot_is_drawn_again_only_when_what_it_shows_changes(tmp_path):
    rows = [("rpe", {"estimate": 1.5, "margin": 0.5}), ("rotary", {"estimate": -0.25})]  # judged, not judged
    line = plots.differences(tmp_path, False, "images/x.png", "a title", [("a panel", "BLEU", rows)])
    assert line == "![a title](images/x.png)" and not (tmp_path / "images").exists()  # not drawing: nothing written
    plots.differences(tmp_path, True, "images/x.png", "a title", [("a panel", "BLEU", rows)])
    plot = tmp_path / "images" / "x.png"
    drawn = plot.read_bytes()
    assert drawn.startswith(b"\x89PNG\r\n\x1a\n")
    stamp = plot.stat().st_mtime_ns
    plots.differences(tmp_path, True, "images/x.png", "a title", [("a panel", "BLEU", rows)])
    assert plot.stat().st_mtime_ns == stamp  # the same figures, so not drawn again
    rows[0] = ("rpe", {"estimate": 1.25, "margin": 0.5})
    plots.differences(tmp_path, True, "images/x.png", "a title", [("a panel", "BLEU", rows)])
    assert plot.read_bytes() != drawn
    with pytest.raises(RecordError, match="not a number"):
        plots.differences(tmp_path, True, "images/x.png", "a title", [("a panel", "BLEU", [("t5", {"estimate": None})])])
