"""The committed results stay tied to the code: each committed report.md is what today's
`onmt-posenc report --results` renders from its own results.json (the pages that quote the
records are rendered from templates: test_pages).

A change of the report's code that changes a committed report fails here: render it again
(`onmt-posenc report --results FOLDER/results.json`) and commit the new report.md, results.json
and results.csv with it."""
import json
import re
import statistics

import pytest
from conftest import REPO

from onmt_posenc import experiments
from onmt_posenc.experiments.pages import render
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


def test_the_gap_trend_of_multi30k_questions_is_computed_from_its_results():
    """Its README's trend of SHAPE's gap over the data sizes, as its template renders it: the
    least-squares slope of the three gaps of the test BLEU means (BLEU per doubling of 7,250
    pairs), its standard error from the gaps' (across_runs.data_size), and the size where the
    fitted line reaches zero."""
    folder = RESULTS / "multi30k-questions"
    results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    runs = results["runs"]

    def mean(data, method):
        return statistics.mean(r["bleu"]["test"] for r in runs if r["data"] == data and r["method"] == method)

    gaps = [mean(data, "shape") - mean(data, "ape") for data in ("vanilla-7k", "vanilla-14k", "vanilla")]
    slope = (gaps[2] - gaps[0]) / 2
    spreads = [size["spread"] for size in results["across_runs"]["data_size"]]
    slope_error = (spreads[0] ** 2 + spreads[2] ** 2) ** 0.5 / 2
    doublings = -(statistics.mean(gaps) - slope) / slope
    readme = " ".join(render.render(folder / "README.md.jinja", REPO).split())
    assert slope > 0 and f"rises by {slope:.2f} BLEU per doubling, with a standard error of {slope_error:.2f}" in readme
    assert f"zero after {doublings:.1f} doublings of 7,250 pairs, about {7250 * 2 ** doublings / 1e6:.1f} million" in readme
