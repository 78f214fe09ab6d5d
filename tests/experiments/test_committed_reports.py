"""The committed results stay tied to the code: each committed report.md is what today's
`onmt-posenc report --results` renders from its own results.json, and the figures that
README.md and docs/results.md quote are in the committed files they cite.

A change of the report's code that changes a committed report fails here: render it again
(`onmt-posenc report --results FOLDER/results.json`) and commit the new report.md, results.json
and results.csv with it."""
import json
import re

import pytest
from conftest import REPO

from onmt_posenc import experiments
from onmt_posenc.experiments.report import command as report
from onmt_posenc.experiments.running.store import run_fields

RESULTS = REPO / "recipes" / "experiments" / "results"
WRITTEN = re.compile(r"report written \d{4}-\d{2}-\d{2} \d{2}:\d{2}")  # the one line that differs each time
# A figure as the reports print BLEU, ratios and similarities: two or three decimals
FIGURE = re.compile(r"(?<![\d.])\d+\.\d{2,3}(?![\d.])")
CITED_FOLDER = re.compile(r"results/([\w-]+)/")


def without_date(text):
    return WRITTEN.sub("report written (date)", text)


@pytest.mark.parametrize("folder", sorted(p.parent.name for p in RESULTS.glob("*/results.json")))
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


def folder_text(name):
    """What a results folder records in words and tables: its reports, notes and results.csv."""
    files = sorted(p for p in (RESULTS / name).rglob("*") if p.suffix in (".md", ".csv"))
    return "\n".join(p.read_text(encoding="utf-8") for p in files)


def sections(path, level="## "):
    """{heading: text} of a Markdown page's sections."""
    parts = re.split(rf"\n(?={level})", path.read_text(encoding="utf-8"))
    return {part.splitlines()[0]: part for part in parts}


QUOTING = [(REPO / "docs" / "results.md", heading) for heading in sections(REPO / "docs" / "results.md")] + [
    (REPO / "README.md", "## Main results")]


@pytest.mark.parametrize("page, heading", QUOTING, ids=lambda x: getattr(x, "name", x))
def test_quoted_figures_are_in_the_results_cited(page, heading):
    """Every figure of two or three decimals in a section is in the results folders that the
    section links to: a figure that drifted from its report, or was never recorded, fails."""
    text = sections(page)[heading]
    cited = sorted({name for name in CITED_FOLDER.findall(text) if (RESULTS / name).is_dir()})
    figures = FIGURE.findall(text)
    if not figures:
        return
    assert cited, f"{page.name} {heading}: quotes figures but links no results folder"
    recorded = "\n".join(folder_text(name) for name in cited)
    missing = [f for f in figures if not re.search(rf"(?<![\d.]){re.escape(f)}(?!\d)", recorded)]
    assert missing == [], f"not in results/{{{','.join(cited)}}}"
