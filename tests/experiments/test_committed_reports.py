"""The committed results stay tied to the code: each committed report.md is what today's
`onmt-posenc report --results` renders from its own results.json, and every figure of a results
folder's README.md, of the results index, of docs/results.md and of README.md's main results is
bound to the one record it comes from, and reads its value there (or is marked unrecorded, with
why): figure_bindings.

A change of the report's code that changes a committed report fails here: render it again
(`onmt-posenc report --results FOLDER/results.json`) and commit the new report.md, results.json
and results.csv with it."""
import json
import re
import statistics

import pytest
from conftest import REPO
from figure_bindings import BINDING, Records, candidates, problems

from onmt_posenc import experiments
from onmt_posenc.experiments.report import claims_side_by_side, command as report
from onmt_posenc.experiments.running.store import run_fields

RESULTS = REPO / "recipes" / "experiments" / "results"
# Every results folder, listed: one gone, or one added without being listed here, fails
FOLDERS = ["demo", "demo-scaled", "embedding-scale", "kftt", "multi30k", "multi30k-extrapolate", "multi30k-questions",
           "multi30k-scaled", "multi30k-scaled-swapped",
           "positions", "positions-scaled", "small_enja", "small_enja-scaled"]
# kftt's batch was stopped: its runs' records, no report; embedding-scale sets other folders' claims side by side
RENDERED = [name for name in FOLDERS if name not in ("kftt", "embedding-scale")]
# embedding-scale's files of `onmt-posenc claims`: the folders whose results.json each judges, its columns' labels
SIDE_BY_SIDE = {"claims-small_enja.md": ["small_enja", "small_enja-scaled"],
                "claims-multi30k.md": ["multi30k", "multi30k-scaled"]}
CONDITIONS = ["OpenNMT-py default", "controlled scale"]
WRITTEN = re.compile(r"report written \d{4}-\d{2}-\d{2} \d{2}:\d{2}")  # the one line that differs each time


def without_date(text):
    return WRITTEN.sub("report written (date)", text)


def test_the_results_folders_are_those_listed():
    assert sorted(p.name for p in RESULTS.iterdir() if p.is_dir()) == FOLDERS
    assert [(RESULTS / name / "results.json").is_file() for name in FOLDERS] == [n in RENDERED for n in FOLDERS]


@pytest.mark.parametrize("folder", RENDERED)
def test_committed_report_is_what_its_results_render(folder, tmp_path):
    """report.md, and results.json and results.csv beside it where they are written again:
    the claims in results.json say what report.md says. A results.json written before runs
    held their analyses' results is not written again (its across_runs keeps what was
    computed from the run folders' files)."""
    rendered = report.render(RESULTS / folder / "results.json", tmp_path)
    committed = (RESULTS / folder / "report.md").read_text(encoding="utf-8")
    assert without_date(rendered.read_text(encoding="utf-8")) == without_date(committed)
    runs = json.loads((RESULTS / folder / "results.json").read_text(encoding="utf-8"))["runs"]
    held_all = all(name in r.get("analysis_results", {}) for r in runs for name in r.get("analyses", {}))
    assert [(tmp_path / name).is_file() for name in ("results.json", "results.csv")] == [held_all] * 2
    for name in ("results.json", "results.csv") if held_all else ():
        assert (tmp_path / name).read_text(encoding="utf-8") == (RESULTS / folder / name).read_text(encoding="utf-8")


@pytest.mark.parametrize("name", SIDE_BY_SIDE)
def test_committed_claims_side_by_side_are_what_todays_code_judges(name):
    """embedding-scale's tables of two batches' claims are `onmt-posenc claims` of their
    results.json today: a batch's new run, or a change of the claims' code, fails here until
    the file is written again (the command is in that folder's README)."""
    paths = [RESULTS / folder / "results.json" for folder in SIDE_BY_SIDE[name]]
    committed = (RESULTS / "embedding-scale" / name).read_text(encoding="utf-8")
    assert committed == claims_side_by_side.document(zip(CONDITIONS, paths))


def test_a_report_renders_the_same_from_its_results_json_alone(tmp_path):
    """results.json holds what the report read: the experiment as loaded, each run's
    analyses' results, and the token-NLL comparisons in place of every token's NLL. Rendered
    from it alone, with the experiment file and run folders gone, report.md is the same."""
    loaded = experiments.load(REPO / "recipes" / "experiments" / "demo.yaml", output=tmp_path / "runs")
    shift = {"offsets": [0, 5], "matrix": [[1.0, 0.8], [0.8, 1.0]], "mean_off_diagonal": 0.8,
             "absolute_positions": True}

    def tokens(run):  # the baseline's NLL is 1.0 on every token; SHAPE's lower on the first 3 of 4
        nll = [0.5, 0.5, 0.5, 2.0] if run.method == "shape" else [1.0] * 4
        return {"nll": [nll, nll], "frequency": [[40, 30, 2, 1], [40, 30, 2, 1]]}

    records = [{**run_fields(run), "status": "finished", "bleu": {"valid": 20.0 + run.seed, "test": 18.0},
                "length_ratio": {"valid": 1.0, "test": 0.9}, "bleu_signature": "tok:13a", "config": run.config,
                "convergence": {"converged": True, "why": "test"}, "dir": str(tmp_path / "gone" / run.id),
                "analyses": {"shift_invariance": "analyses/shift_invariance.json",
                             "token_nll": "analyses/token_nll.json"},
                "analysis_results": {"shift_invariance": shift, "token_nll": tokens(run)}} for run in loaded.runs]
    written = report.write(loaded, records).read_text(encoding="utf-8")
    assert "## Shift invariance of the encoder" in written and "| 0.800 |" in written
    assert "| synthetic/shape-vs-ape | 8 | 0.750 |" in written
    stored = json.loads((tmp_path / "runs" / "results.json").read_text(encoding="utf-8"))
    assert all("token_nll" not in r["analysis_results"] and "token_nll" not in r["analyses"] for r in stored["runs"])
    assert stored["across_runs"]["token_nll"]["synthetic/shape-vs-ape"]["share"] == 0.75
    rendered = report.render(tmp_path / "runs" / "results.json", tmp_path / "again")
    assert without_date(rendered.read_text(encoding="utf-8")) == without_date(written)
    for name in ("results.json", "results.csv"):  # written again: the same runs, the same results across them
        assert (tmp_path / "again" / name).read_text(encoding="utf-8") == (tmp_path / "runs" / name).read_text(
            encoding="utf-8")
    for plot in ("shift_synthetic_ape_seed1.png", "tokens_synthetic_shape_vs_ape.png"):
        assert (tmp_path / "again" / "plots" / plot).is_file()


@pytest.mark.parametrize("stored, error", [
    ({"runs": []}, "is not a results.json that `onmt-posenc report` wrote"),
    ({"experiment": "x.yaml", "experiment_as_loaded": {"name": "x"}, "runs": []},
     "experiment_as_loaded.baseline: missing"),
])
def test_a_file_that_is_not_a_results_json_is_named_in_one_line(tmp_path, stored, error):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(stored))
    with pytest.raises(experiments.ExperimentError, match=re.escape(error)):
        report.render(path)


# ---------------------------------------------------------------- figures in words
# Every figure of a hand-written page is bound to the record it comes from (figure_bindings:
# the syntax; docs/analyses.md, "Figures in hand-written pages"): a results folder's README.md,
# the results index, each section of docs/results.md and README.md's main results. A figure
# that another folder's records hold names that folder, and the page (the section) links it.
READMES = [name for name in FOLDERS if (RESULTS / name / "README.md").is_file()]
RECORDS = Records(RESULTS)


def sections(path, level="## "):
    """{heading: text} of a Markdown page's sections."""
    parts = re.split(rf"\n(?={level})", path.read_text(encoding="utf-8"))
    return {part.splitlines()[0]: part for part in parts}


def unlinked(text, named, page_folder):
    """The folders of `named` that `text` does not link (`](../NAME/`, `](recipes/experiments/results/NAME/`...)."""
    return sorted(name for name in named if name != page_folder
                  and not re.search(rf"\]\((?:[^)]*/)?{re.escape(name)}/", text))


def binding_problems(text, folder):
    wrong, named = problems(text, RECORDS, folder)
    return wrong + [f"{name}: named by a binding, not linked" for name in unlinked(text, named, folder)]


@pytest.mark.parametrize("folder", READMES)
def test_a_results_readmes_figures_are_bound_to_their_records(folder):
    assert binding_problems((RESULTS / folder / "README.md").read_text(encoding="utf-8"), folder) == []


QUOTING = [(REPO / "docs" / "results.md", heading) for heading in sections(REPO / "docs" / "results.md")] + [
    (REPO / "README.md", "## Main results"), (RESULTS / "README.md", "# Committed results")]


@pytest.mark.parametrize("page, heading", QUOTING, ids=lambda x: getattr(x, "name", x))
def test_quoted_figures_are_bound_to_the_results_cited(page, heading):
    """A page outside the results folders names the folder of every record it binds, and its
    section links that folder."""
    assert binding_problems(sections(page)[heading], None) == []


# Wrong figures that the test before issue 58 accepted, each a number that some record of its
# folder or of a folder it links holds (35.96 is SHAPE's seed 3, ...), planted where the right
# one stands with the binding kept: (page, the text around the figure, the right figure, the
# wrong one)
PLANTED = [("multi30k-scaled", "**SHAPE 35.91 ± 0.31 over three seeds", "35.91", "35.96"),
           ("multi30k-scaled", "shift-invariant than APE's, but not shown to be near-invariant**: 0.907", "0.907", "0.917"),
           ("multi30k-scaled", "-0.61 ± 0.68 against APE's 36.51 ± 0.29**", "0.68", "0.94"),
           ("multi30k-scaled", "-0.61 ± 0.68 against APE's 36.51 ± 0.29**", "-0.61", "-0.66"),
           ("small_enja-scaled", "against APE's 27.07 ± 0.46, +1.09 ± 1.41", "1.41", "1.20")]


@pytest.mark.parametrize("folder, around, right, wrong", PLANTED)
def test_a_wrong_figure_fails_though_its_folder_holds_it(folder, around, right, wrong):
    text = (RESULTS / folder / "README.md").read_text(encoding="utf-8")
    assert around in text and binding_problems(text, folder) == []
    at = text.index(around)
    comment = BINDING.search(text, at)  # the binding of the text around the figure
    entry = re.compile(rf"(?<![\d.+-]){re.escape(right)} = ")
    assert entry.search(comment.group(0)), comment.group(0)
    planted = (text[:at] + around.replace(right, wrong, 1) + text[at + len(around):comment.start()]
               + entry.sub(f"{wrong} = ", comment.group(0), count=1) + text[comment.end():])
    # a value of the records of the folder or of a folder it links: what "any number there" passed
    linked = [name for name in FOLDERS if name == folder or f"](../{name}/" in text]
    assert any(candidates(RECORDS, name, wrong, folder) for name in linked)
    assert any(line.startswith("line ") and f"{wrong} = " in line for line in binding_problems(planted, folder))


def test_a_figure_from_an_unlinked_folder_fails():
    """embedding-scale's 14.22 is multi30k-questions' APE drop: without a link to that folder
    the page fails, as it failed to say where the figure came from before issue 58."""
    text = (RESULTS / "embedding-scale" / "README.md").read_text(encoding="utf-8")
    assert "14.22" in text and binding_problems(text, "embedding-scale") == []
    unlinked_page = re.sub(r"\[([^]]*)\]\(\.\./multi30k-questions/[^)]*\)", r"\1", text)
    assert binding_problems(unlinked_page, "embedding-scale") == [
        "multi30k-questions: named by a binding, not linked"]


def test_a_bindings_figures_and_values_are_checked_one_by_one():
    """On multi30k-scaled's records: a figure bound to its field passes; bound to another run's,
    rounded otherwise, with the wrong sign, out of order, or bound to nothing, it fails; a
    figure no record holds passes only marked unrecorded, with why."""
    ape1, ape3 = 'run("vanilla/ape/seed1").bleu.test', 'run("vanilla/ape/seed3").bleu.test'

    def check(text):
        return problems(text, RECORDS, "multi30k-scaled")[0]

    assert check(f"APE scored 36.68 and 36.18.\n<!-- figures: 36.68 = {ape1}; 36.18 = {ape3} -->") == []
    assert check(f"APE 36.68 (36.675).\n<!-- figures:\nwith run(\"vanilla/ape/seed1\"): 36.68 = .bleu.test; "
                 "36.675 = .bleu.test\n-->") == []
    assert len(check(f"APE scored 36.68.\n<!-- figures: 36.68 = {ape3} -->")) == 1
    assert len(check(f"APE scored 36.7.\n<!-- figures: 36.7 = {ape3} -->")) == 1  # 36.18 is not 36.7
    assert len(check(f"SHAPE - APE -1.10.\n<!-- figures: -1.10 = {ape1} - run(\"vanilla/shape-K10/seed1\")"
                     ".bleu.test -->")) == 1  # +1.10
    assert len(check(f"36.18 and 36.68.\n<!-- figures: 36.68 = {ape1}; 36.18 = {ape3} -->")) == 1
    unbound = check("APE scored 36.68.\n\nNo binding after it.")
    assert len(unbound) == 1 and unbound[0].startswith("line 1+: 36.68 is bound by no binding comment after it "
                                                       '(it could be: run("vanilla/ape/seed1").bleu.test'), unbound
    assert check("Words: 11.66 per line.\n<!-- figures: 11.66 = unrecorded: a corpus statistic -->") == []
    assert check("Words: 11.66 and 12.04.\n<!-- figures unrecorded: corpus statistics -->") == []
    assert len(check("Words: 11.66 per line.\n<!-- figures: 11.66 = unrecorded: -->")) == 1  # without why
    assert check("`wu:0.6` and version 3.5.1, x1.01: no figure here.") == []


def test_the_gap_trend_of_multi30k_questions_is_computed_from_its_results():
    """Its README's and docs/results.md's trend of SHAPE's gap over the data sizes: the
    least-squares slope of the three gaps of the test BLEU means (BLEU per doubling of 7,250
    pairs) and the size where the fitted line reaches zero."""
    runs = json.loads((RESULTS / "multi30k-questions" / "results.json").read_text(encoding="utf-8"))["runs"]

    def mean(data, method):
        return statistics.mean(r["bleu"]["test"] for r in runs if r["data"] == data and r["method"] == method)

    gaps = [mean(data, "shape") - mean(data, "ape") for data in ("vanilla-7k", "vanilla-14k", "vanilla")]
    slope = (gaps[2] - gaps[0]) / 2
    doublings = -(statistics.mean(gaps) - slope) / slope
    readme = (RESULTS / "multi30k-questions" / "README.md").read_text(encoding="utf-8")
    assert f"rises by {slope:.2f} BLEU per doubling" in readme
    assert f"zero after {doublings:.1f} doublings of 7,250 pairs, about {7250 * 2 ** doublings / 1e6:.1f} million" in (
        " ".join(readme.split()))
    assert f"+{slope:.2f} ± 0.69 BLEU per doubling" in (REPO / "docs" / "results.md").read_text(encoding="utf-8")
