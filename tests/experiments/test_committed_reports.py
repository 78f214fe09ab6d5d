"""The committed results stay tied to the code: each committed report.md is what today's
`onmt-posenc report --results` renders from its own results.json, and every figure of a results
folder's README.md, of docs/results.md and of README.md's main results is a value of the records
of the folder it is about (or computed from its results.json, or listed as unrecorded, with why).

A change of the report's code that changes a committed report fails here: render it again
(`onmt-posenc report --results FOLDER/results.json`) and commit the new report.md, results.json
and results.csv with it."""
import itertools
import json
import re
import statistics

import pytest
from conftest import REPO

from onmt_posenc import experiments
from onmt_posenc.experiments.report import claims_side_by_side, command as report
from onmt_posenc.experiments.running.store import run_fields

RESULTS = REPO / "recipes" / "experiments" / "results"
# Every results folder, listed: one gone, or one added without being listed here, fails
FOLDERS = ["demo", "demo-scaled", "embedding-scale", "kftt", "multi30k", "multi30k-questions", "multi30k-scaled",
           "multi30k-scaled-swapped",
           "positions", "positions-scaled", "small_enja", "small_enja-scaled"]
# kftt's batch was stopped: its runs' records, no report; embedding-scale sets other folders' claims side by side
RENDERED = [name for name in FOLDERS if name not in ("kftt", "embedding-scale")]
# embedding-scale's files of `onmt-posenc claims`: the folders whose results.json each judges, its columns' labels
SIDE_BY_SIDE = {"claims-small_enja.md": ["small_enja", "small_enja-scaled"],
                "claims-multi30k.md": ["multi30k", "multi30k-scaled"]}
CONDITIONS = ["OpenNMT-py default", "controlled scale"]
WRITTEN = re.compile(r"report written \d{4}-\d{2}-\d{2} \d{2}:\d{2}")  # the one line that differs each time
CITED_FOLDER = re.compile(r"results/([\w-]+)/")
SIBLING_FOLDER = re.compile(r"\.\./([\w-]+)/")  # a results README's link to another results folder


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
# A figure: a number with a decimal point (one decimal and more), signed or not, outside code
# blocks (commands) and not part of a version (3.5.1). Integers (counts, updates, years, minutes)
# are not checked. A figure must be the value of a record of the folder it is about, rounded as
# shown: a number in one of its committed JSON files (results.json, runs' result.json and
# analyses), in results.csv, or in its Markdown records, not READMEs nor COMMANDS.md (report.md,
# rendered from results.json above; report-as-written.md, as the runner wrote it), or one computed here from
# results.json's BLEU (below). A signed figure (+0.72, -2.27) is a difference: it must be a
# computed difference, or a number written with that sign in a record.
FIGURE = re.compile(r"(?<![\w.])([-+\u2212]?)(\d+\.\d+)(?![\d.]|\.\d)")
NUMBER = re.compile(r"(?<![\w.])([-+\u2212]?)(\d+\.\d+)")
CODE = re.compile(r"```.*?```", re.S)
# Figures that no committed record holds, each with why the page may state it
UNRECORDED = {
    "multi30k-questions/README.md": ({"11.66", "11.35", "12.04", "12.54", "11.88", "4.97", "4.64", "4.32",
                                      "36.25", "28.27"},
                                     "statistics of Multi30k's text, computed from the corpus, not a run's; 36.25 "
                                     "and 28.27: the warm runs' sources trained again on the CPU, outside the "
                                     "report's runs (their record: COMMANDS.md's words)"),
    "small_enja-scaled/README.md": ({"0.011", "0.13", "0.71"},
                                    "the RMS of a Glorot-drawn 16,000 x 128 table, times sqrt(128), and of the "
                                    "sinusoid: computed from their formulas (docs/methods.md), not a run's"),
    # figures of a README of a run outside results.json, quoted from that README
    "docs/results.md": ({"28.4", "-1.42", "2.18", "2.53", "+0.24", "28.23", "28.21", "87.4", "25.85"},
                        "28.4: a superseded report's reading, said to be one; -1.42: extrapolate-randomized-M16's "
                        "README's length-bucket gain; 2.18, 2.53: KFTT's calibrations, not runs of the runner; "
                        "+0.24: the gaps' slope, computed in test_the_gap_trend_...; 28.23, 28.21, 87.4, "
                        "25.85: Multi30k measurements by hand outside the runner (their record: "
                        "multi30k/COMMANDS.md's words)"),
}
# Sections that report measurements made outside the runner, with no record committed (as they say)
UNRECORDED_SECTIONS = {"kftt/README.md": ["## Calibration: 2,000 updates without the anneal",
                                          "## Calibration: short pairs only (2026-11-26)"]}


def _numbers(node):
    if isinstance(node, dict):
        node = list(node.values())
    if isinstance(node, list):
        return [n for value in node for n in _numbers(value)]
    if isinstance(node, str):
        return [("", node)]
    return [] if isinstance(node, bool) or not isinstance(node, (int, float)) else [(float(node), None)]


def _computed(runs, unsigned, signed):
    """From results.json's BLEU, per data setting and split: each method's mean and standard
    deviation over its seeds, and the differences of two runs of one seed, of two methods'
    means, of a run and a mean, and the mean and standard error of seed-by-seed differences."""
    for split in ("valid", "test"):
        scored = [r for r in runs if (r.get("bleu") or {}).get(split) is not None]
        for data in {r["data"] for r in scored}:
            here = [r for r in scored if r["data"] == data]
            by_method = {}
            for r in here:
                by_method.setdefault(r["method"], {})[r["seed"]] = r["bleu"][split]
            means = [statistics.mean(seeds.values()) for seeds in by_method.values()]
            unsigned |= set(means) | {statistics.stdev(s.values()) for s in by_method.values() if len(s) > 1}
            pairs = [(a["bleu"][split], b["bleu"][split]) for a in here for b in here if a["seed"] == b["seed"]]
            pairs += list(itertools.product(means, means)) + [(r["bleu"][split], m) for r in here for m in means]
            for a, b in itertools.permutations(by_method.values(), 2):
                paired = [a[seed] - b[seed] for seed in a if seed in b]
                if len(paired) > 1:
                    signed.add(statistics.mean(paired))
                    unsigned.add(statistics.stdev(paired) / len(paired) ** 0.5)
            for a, b in pairs:
                signed.add(a - b)
                unsigned.add(abs(a - b))


def recorded(folder):
    """(unsigned values, signed values) of a results folder's records."""
    unsigned, signed = set(), set()
    texts = [p.read_text(encoding="utf-8") for p in sorted((RESULTS / folder).rglob("*"))
             if p.suffix in (".md", ".csv") and p.name not in ("README.md", "COMMANDS.md")]
    for path in sorted((RESULTS / folder).rglob("*.json")):
        for value, text in _numbers(json.loads(path.read_text(encoding="utf-8"))):
            if text is None:
                unsigned.add(value)
                signed.add(value) if value < 0 else None
            else:
                texts.append(value + text)
    for text in texts:
        for sign, number in NUMBER.findall(text):
            unsigned.add(float(number))
            if sign:
                signed.add(-float(number) if sign != "+" else float(number))
    if (RESULTS / folder / "results.json").is_file():
        _computed(json.loads((RESULTS / folder / "results.json").read_text(encoding="utf-8"))["runs"], unsigned, signed)
    return unsigned, signed


def unrecorded_figures(text, folders, where):
    unsigned, signed = set(), set()
    for folder in folders:
        u, s = recorded(folder)
        unsigned |= u
        signed |= s
    allowed = UNRECORDED.get(where, (set(), ""))[0]
    missing = []
    for sign, number in FIGURE.findall(CODE.sub("", text)):
        shown, tolerance = sign.replace("\u2212", "-") + number, 0.5 * 10 ** -len(number.split(".")[1]) + 1e-9
        value = -float(number) if sign in ("-", "\u2212") else float(number)
        if shown in allowed or any(abs(v - value) <= tolerance for v in (signed if sign else unsigned)):
            continue
        missing.append(shown)
    return missing


@pytest.mark.parametrize("folder", [name for name in FOLDERS if (RESULTS / name / "README.md").is_file()])
def test_a_results_readmes_figures_are_its_records(folder):
    """Every figure of a results folder's README is a value of the records (not of a README) of
    that folder or of a results folder it links to (`../NAME/`), or computed from one's
    results.json; UNRECORDED and UNRECORDED_SECTIONS list, with their reasons, the ones that no
    record holds."""
    text = (RESULTS / folder / "README.md").read_text(encoding="utf-8")
    for heading in UNRECORDED_SECTIONS.get(f"{folder}/README.md", []):
        assert heading in sections(RESULTS / folder / "README.md"), heading
        text = text.replace(sections(RESULTS / folder / "README.md")[heading], "")
    linked = [name for name in dict.fromkeys(SIBLING_FOLDER.findall(text)) if name in FOLDERS and name != folder]
    assert unrecorded_figures(text, [folder, *linked], f"{folder}/README.md") == []


def sections(path, level="## "):
    """{heading: text} of a Markdown page's sections."""
    parts = re.split(rf"\n(?={level})", path.read_text(encoding="utf-8"))
    return {part.splitlines()[0]: part for part in parts}


QUOTING = [(REPO / "docs" / "results.md", heading) for heading in sections(REPO / "docs" / "results.md")] + [
    (REPO / "README.md", "## Main results")]


@pytest.mark.parametrize("page, heading", QUOTING, ids=lambda x: getattr(x, "name", x))
def test_quoted_figures_are_in_the_results_cited(page, heading):
    """Every figure of a section is a value of the records of the results folders that the
    section links to, as a README's: a figure that drifted from its record, or was never
    recorded, fails."""
    text = sections(page)[heading]
    cited = sorted({name for name in CITED_FOLDER.findall(text) if name in FOLDERS})
    if not FIGURE.search(CODE.sub("", text)):
        return
    assert cited, f"{page.name} {heading}: quotes figures but links no results folder"
    assert unrecorded_figures(text, cited, page.relative_to(REPO).as_posix()) == [], f"not in results/{cited}"


def test_an_unrecorded_figure_fails():
    """The check above on figures that no record of small_enja holds: a rounding off by one in
    the last digit (+0.72 is +0.7237) and a figure from nowhere."""
    assert unrecorded_figures("perSPE - APE, seed 3: +1.37; seed 2: +0.72; 16.60 ± 1.74", ["small_enja"], "x") == [
        "+1.37"]
    assert unrecorded_figures("APE scored 21.37", ["small_enja"], "x") == ["21.37"]


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
