"""The experiment runner on the demo (scaled down): the main command end to end, resuming
after an interruption, warm starts, evaluating again, a failing run kept apart, shards merged
into one report, and stale or unreadable results."""
import csv
import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import REPO, command, run, write_yaml
from runner_helpers import DEMO, LONG, PNG_MAGIC, SCALED_DOWN, experiment_file, overrides

from onmt_posenc import experiments
from onmt_posenc.experiments.running import checkpoints as run_checkpoints, progress as progress_module, runner
from onmt_posenc.core import scoring
from onmt_posenc.experiments.running import records
from onmt_posenc.experiments.running.store import file_digest


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """`onmt-posenc run recipes/experiments/demo.yaml`, scaled down, run once for the module."""
    output = tmp_path_factory.mktemp("demo") / "out"
    result = run([command("onmt-posenc"), "run", DEMO, "--output", output, *overrides(SCALED_DOWN)],
                 cwd=REPO, timeout=LONG)
    return output, result


def seeds_cell(run_folder):
    """The BLEU table's count of a method's one run: 1, marked where it did not converge."""
    convergence = json.loads((run_folder / "result.json").read_text()).get("convergence") or {}
    return "1" if convergence.get("converged") is True else "1 (none converged)"


def test_demo_end_to_end(demo):
    output, result = demo
    assert "[1/3 synthetic/ape/seed1] train step 16/16" in result.stderr  # progress
    assert "[1/3 synthetic/ape/seed1] train step 4/16" in result.stderr  # from OpenNMT-py's padded "Step  4/   16"
    assert "ETA" in result.stderr
    report = (output / "report.md").read_text(encoding="utf-8")
    headings = ["## The SHAPE paper's claims in this batch", "## BLEU and relative training speed",
                "## Hypothesis / reference length", "## Joined sets", "## BLEU and length by source length",
                "## Swapped evaluation", "## Shift invariance of the encoder", "## Token-level NLL",
                "## Position ablation", "## Training speed", "## Runs"]
    assert [report.index(h) for h in headings] == sorted(report.index(h) for h in headings)
    assert f"| synthetic | EXTRAPOLATE | rpe | {seeds_cell(output / 'synthetic' / 'rpe' / 'seed1')} |" in report
    for image in report.split("](")[1:]:
        png = output / image.split(")")[0]
        assert png.read_bytes()[:8] == PNG_MAGIC
    rows = list(csv.DictReader(open(output / "results.csv", encoding="utf-8")))
    assert [r["method"] for r in rows] == ["ape", "shape", "rpe"]
    assert all(r["status"] == "finished" for r in rows)
    results = json.loads((output / "results.json").read_text())
    rpe = next(r for r in results["runs"] if r["method"] == "rpe")
    ablation = json.loads((output / rpe["id"] / "analyses" / "position_ablation.json").read_text())
    assert ablation["removed_from"] == [] and ablation["encoder_cosine"] == pytest.approx(1.0)
    # RPE's encoder has no absolute positions: its shift invariance is no measurement
    assert "| synthetic/rpe/seed1 | 1.000 (by construction) |" in report
    shape = yaml.safe_load((output / "synthetic/shape/seed1/config.yaml").read_text())
    demo_k = yaml.safe_load(DEMO.read_text())["methods"]["shape"]["shape_max_shift"]
    assert shape["shape_max_shift"] == demo_k and shape["train_steps"] == 16  # the file's K, the --set steps


def test_each_run_keeps_its_translations_and_they_rebuild_its_scores(demo, tmp_path):
    """Every evaluated set's translations, copied beside results.json with the references, give
    the record's BLEU and chrF again (to 0.01, the records' figures' resolution) with the run
    folders gone: what a resample of the sentences needs is committed."""
    output, _ = demo
    copy = tmp_path / "out"
    shutil.copytree(output, copy)
    shutil.rmtree(copy / "synthetic")
    results = json.loads((copy / "results.json").read_text(encoding="utf-8"))
    checked = 0
    for record in results["runs"]:
        assert set(record["translations"]) == set(record["bleu"])
        for eval_set, name in record["translations"].items():
            assert name == f"translations/{record['id']}/{eval_set}.json.gz"
            (hyps, refs, lengths), why = records.read_translations({**record, "translations_root": copy}, eval_set)
            assert why is None and len(hyps) == len(refs) == len(lengths)
            bleu = scoring.corpus_bleu(hyps, refs)
            assert bleu.score == pytest.approx(record["bleu"][eval_set], abs=0.01)
            assert bleu.chrf == pytest.approx(record["chrf"][eval_set], abs=0.01)
            checked += 1
    assert checked == 3 * len(results["runs"][0]["bleu"])
    (refs_kept,) = {p.parent for p in (copy / "translations" / "references").iterdir()}
    assert refs_kept == copy / "translations" / "references"
    # with them, a one-seed comparison is sacreBLEU's paired bootstrap, rendered from results.json alone
    run([command("onmt-posenc"), "report", "--results", copy / "results.json"], cwd=tmp_path)
    text = (copy / "report.md").read_text(encoding="utf-8")
    row = claims_row(text, "On EXTRAPOLATE, RPE's test BLEU is above APE's")
    assert "sacreBLEU's paired bootstrap, 1000 resamples of the 12 sentences, one seed a side" in row, row
    assert "test-set variance not measured" not in row


def claims_row(report, claim):
    return next(line for line in report.splitlines() if line.startswith(f"| {claim}"))


def test_claims_table_follows_the_results(demo, tmp_path):
    """The claims are computed from the stored results: change one, and its row changes."""
    output, _ = demo
    copy = tmp_path / "out"
    shutil.copytree(output, copy)
    run([command("onmt-posenc"), "report", DEMO, "--output", copy, *overrides(SCALED_DOWN)], cwd=REPO)
    text = (copy / "report.md").read_text(encoding="utf-8")
    assert text.index("## The SHAPE paper's claims") < text.index("## BLEU and relative training speed")
    claim = "SHAPE's swapped drop is far below APE's"
    row = claims_row(text, claim)  # 16 updates: the models write no separators and have not converged
    assert row.endswith("| not measured |") and "X1 found by alignment (separators wrong on" in row
    assert "the rule needs two" in row

    def store(label, name, **values):
        path = copy / "synthetic" / label / "seed1" / name
        path.write_text(json.dumps({**json.loads(path.read_text()), **values}))

    def claim_after_report():
        run([command("onmt-posenc"), "report", DEMO, "--output", copy, *overrides(SCALED_DOWN)], cwd=REPO)
        return claims_row((copy / "report.md").read_text(encoding="utf-8"), claim)

    def store_curve(label, ppls):
        """The report judges convergence from the stored validation curve."""
        result = json.loads((copy / "synthetic" / label / "seed1" / "result.json").read_text())
        valid = [{"step": 4 * (i + 1), "ppl": ppl} for i, ppl in enumerate(ppls)]
        store(label, "result.json", curve={**result["curve"], "valid": valid})

    flat, falling = [9.0, 6.0, 5.0, 5.0], [9.0, 8.0, 7.0, 5.0]
    for label, drop in (("ape", 9.0), ("shape", 1.0)):
        store_curve(label, flat)
        store(label, "analyses/swapped.json", train={"applicable": True, "original": 30.0, "swapped": 30.0 - drop,
                                                     "drop": drop, "examples": 10})
    row = claim_after_report()  # one seed each: the figures, not judged by spread
    assert ("training examples: APE 30.00 -> 21.00, drop 9.00 (1 seed), SHAPE 30.00 -> 29.00, drop 1.00 (1 seed); "
            "SHAPE - 0.5 x APE -3.50; one seed: not judged by spread | not measured |") in row
    store("shape", "analyses/swapped.json", train={"applicable": True, "original": 30.0, "swapped": 22.0,
                                                   "drop": 8.0, "examples": 10})
    assert "SHAPE 30.00 -> 22.00, drop 8.00 (1 seed); SHAPE - 0.5 x APE +3.50" in claim_after_report()
    store_curve("shape", falling)
    row = claim_after_report()
    assert row.endswith("| not measured |") and "synthetic/shape/seed1 (valid ppl 7.00 at step 12 -> 5.00" in row
    store_curve("shape", flat)
    store("ape", "analyses/swapped.json", train={"applicable": False, "examples": 10, "why": "not applicable: no sep"})
    row = claim_after_report()
    assert row.endswith("| not measured |") and "APE synthetic/ape/seed1: not applicable: no sep" in row
    # The demo has no VANILLA data setting: that claim is not measured, not guessed.
    row = claims_row((copy / "report.md").read_text(encoding="utf-8"), "SHAPE's BLEU on VANILLA")
    assert row.endswith("| not measured |")


def test_report_from_results_json_alone_writes_its_claims_again(demo, tmp_path):
    """`onmt-posenc report --results`, as after a change of the claims' code: a results.json
    whose across_runs is out of date gets the claims that today's code computes, the ones
    report.md shows, with the same runs."""
    output, _ = demo
    copy = tmp_path / "out"
    shutil.copytree(output, copy)
    run([command("onmt-posenc"), "report", DEMO, "--output", copy, *overrides(SCALED_DOWN)], cwd=REPO)
    written = json.loads((copy / "results.json").read_text(encoding="utf-8"))
    outdated = {**written, "across_runs": {**written["across_runs"],
                                           "claims": [{**row, "held": "yes", "measured": "written by older code"}
                                                      for row in written["across_runs"]["claims"]]}}
    (copy / "results.json").write_text(json.dumps(outdated), encoding="utf-8")
    shutil.rmtree(copy / "synthetic")  # the run folders gone: results.json alone
    result = run([command("onmt-posenc"), "report", "--results", copy / "results.json"], cwd=tmp_path)
    assert result.stderr.strip() == f"report: {copy / 'report.md'}"
    assert json.loads((copy / "results.json").read_text(encoding="utf-8")) == written
    row = claims_row((copy / "report.md").read_text(encoding="utf-8"), written["across_runs"]["claims"][0]["claim"])
    assert written["across_runs"]["claims"][0]["measured"] in row and "older code" not in row


def test_claims_of_two_batches_side_by_side(demo, tmp_path):
    """`onmt-posenc claims A/results.json B/results.json`: each batch's claims judged from its
    results.json alone, a column each; a claim that no batch has the runs for leaves the table."""
    output, _ = demo
    written = json.loads((output / "results.json").read_text(encoding="utf-8"))
    default, controlled = tmp_path / "default", tmp_path / "controlled"
    default.mkdir()
    controlled.mkdir()
    (default / "results.json").write_text(json.dumps(written), encoding="utf-8")
    # the second batch: converged APE and SHAPE at three seeds, SHAPE's swapped drop far below APE's
    drops = {"ape": (9.0, 8.5, 9.5), "shape": (1.0, 1.5, 0.5)}
    seeded = []
    for record in written["runs"]:
        for seed, drop in enumerate(drops.get(record["method"], ()), 1):  # the demo's seed 1, made three
            copy = json.loads(json.dumps(record))
            copy.update(id=record["id"].replace("seed1", f"seed{seed}"), seed=seed)
            copy["curve"]["valid"] = [{"step": 4 * (i + 1), "ppl": ppl} for i, ppl in enumerate([9.0, 6.0, 5.0, 5.0])]
            copy["analysis_results"]["swapped"] = {
                **copy["analysis_results"]["swapped"],
                "train": {"applicable": True, "original": 30.0, "swapped": 30.0 - drop, "drop": drop, "examples": 10}}
            seeded.append(copy)
    runs = [r for r in written["runs"] if r["method"] not in drops] + seeded
    (controlled / "results.json").write_text(json.dumps({**written, "runs": runs}), encoding="utf-8")
    result = run([command("onmt-posenc"), "claims", default / "results.json", controlled / "results.json"],
                 cwd=tmp_path)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("A difference of two methods' seed means gets an interval from both its components")
    # each batch's family (Holm's correction over its judged claims), then the table
    assert lines[2].startswith("default: ") and lines[4].startswith("controlled: The table's comparisons are one "
                                                                     "family of ")
    assert lines[6] == "| claim | paper | default | controlled |"
    cells = claims_row(result.stdout, "SHAPE's swapped drop is far below APE's").split(" | ")
    assert cells[2].startswith("**not measured**: ")
    assert cells[3].startswith("**yes**: ") and "APE 30.00 -> 21.00, drop 9.00 ± 0.50 (3 seeds)" in cells[3]
    absent = next(line for line in result.stdout.splitlines() if line.startswith("Not in any of these batches: "))
    assert "SHAPE's BLEU on VANILLA is about APE's" in absent  # the demo has no VANILLA setting
    assert not any(line.startswith("| SHAPE's BLEU on VANILLA") for line in result.stdout.splitlines())
    named = run([command("onmt-posenc"), "claims", default / "results.json", controlled / "results.json",
                 "--label", "OpenNMT-py default", "--label", "controlled scale"], cwd=tmp_path)
    assert "| claim | paper | OpenNMT-py default | controlled scale |" in named.stdout.splitlines()
    one_label = run([command("onmt-posenc"), "claims", default / "results.json", controlled / "results.json",
                     "--label", "default"], cwd=tmp_path, expect_ok=False)
    assert one_label.returncode == 2
    assert one_label.stderr == ("onmt-posenc claims: error: 1 --label for 2 RESULTS_JSON: give one per file, "
                                "or none\n")
    missing = run([command("onmt-posenc"), "claims", tmp_path / "nowhere.json"], cwd=tmp_path, expect_ok=False)
    assert missing.returncode == 2 and f"{tmp_path / 'nowhere.json'} cannot be read" in missing.stderr


def test_an_interrupted_run_goes_on_from_its_checkpoint_and_finished_runs_are_skipped(demo):
    """SIGTERM after the run's first checkpoint (saved at update 8, before the report at
    12); the same command again resumes it from its newest checkpoint, which it keeps as
    it was, and skips the finished runs."""
    output, _ = demo
    interrupted = output / "synthetic" / "shape" / "seed1"
    shutil.rmtree(interrupted)  # run it again, and stop it while it trains
    before = (output / "synthetic" / "ape" / "seed1" / "result.json").stat().st_mtime
    args = [command("onmt-posenc"), "run", DEMO, "--output", output, *overrides(SCALED_DOWN)]
    process = subprocess.Popen([str(a) for a in args], cwd=REPO, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
    for line in process.stderr:
        if "[2/3 synthetic/shape/seed1] train step 12/16" in line:
            process.send_signal(signal.SIGTERM)  # what a cluster scheduler sends
            break
    rest = process.stderr.read()
    assert process.wait(timeout=60) == 130
    going_on = f"onmt-posenc run {DEMO} --output {output} " + " ".join(f"--set {pair}" for pair in SCALED_DOWN)
    assert f"interrupted: finished runs are kept; `{going_on}` goes on" in rest
    assert not (interrupted / "result.json").exists() and not (interrupted / "failure.json").exists()
    first = interrupted / "model_step_8.pt"
    saved = first.stat()
    newest = max(int(p.stem.rsplit("_", 1)[1]) for p in interrupted.glob("model_step_*.pt"))
    # stored as interrupted, with the update it had reached and the command that goes on
    stored = json.loads((interrupted / "interrupted.json").read_text())
    assert stored["status"] == "interrupted" and stored["step"] == newest and stored["command"] == going_on

    result = run(args, cwd=REPO, timeout=LONG)
    assert result.stderr.count("finished before; skipped") == 2
    assert "[2/3 synthetic/shape/seed1] interrupted before\n" in result.stderr
    assert f"[2/3 synthetic/shape/seed1] resume from model_step_{newest}.pt" in result.stderr
    assert (interrupted / "result.json").is_file() and not (interrupted / "interrupted.json").exists()
    assert first.stat().st_mtime_ns == saved.st_mtime_ns and first.stat().st_ino == saved.st_ino
    stored = json.loads((interrupted / "result.json").read_text())
    assert stored["resumed_from"] == newest
    # the training time of both invocations (each report gives the seconds since its start)
    log = (interrupted / "logs" / "train.log").read_text()
    attempts = [re.findall(r"(\d+) sec;", part) for part in log.split("$ ")[1:] if "onmt_train" in part.split()[0]]
    assert stored["train_seconds"] == sum(int(seconds[-1]) for seconds in attempts if seconds)
    assert stored["seconds"] >= stored["train_seconds"]
    # a run stopped after its last update goes on to its evaluation without training
    assert stored["curve"]["started_from"] == ([0, newest] if newest < 16 else [0])
    assert [p["step"] for p in stored["curve"]["valid"]] == [16]
    assert (output / "synthetic" / "ape" / "seed1" / "result.json").stat().st_mtime == before


def test_a_job_stopped_while_it_translates_is_interrupted_not_failed(demo):
    """A scheduler's SIGTERM reaches the whole job (the runner and onmt_translate) after
    training has finished: the run is stored and reported as interrupted, with the command
    that goes on, and that command evaluates it without training again."""
    output, _ = demo
    stopped = output / "synthetic" / "rpe" / "seed1"
    (stopped / "result.json").unlink()  # its checkpoints stay: evaluated again, not trained
    args = [command("onmt-posenc"), "run", DEMO, "--output", output, *overrides(SCALED_DOWN)]
    process = subprocess.Popen([str(a) for a in args], cwd=REPO, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1"}, start_new_session=True)
    for line in process.stderr:
        if "[3/3 synthetic/rpe/seed1] translate" in line:
            os.killpg(process.pid, signal.SIGTERM)  # the runner and its onmt_translate alike
            break
    rest = process.stderr.read()
    assert process.wait(timeout=60) == 130 and "FAILED" not in rest
    assert not (stopped / "failure.json").exists()
    stored = json.loads((stopped / "interrupted.json").read_text())
    assert stored["status"] == "interrupted" and stored["step"] == 16
    report = run([command("onmt-posenc"), "report", DEMO, "--output", output, *overrides(SCALED_DOWN)], cwd=REPO)
    row = next(line for line in (output / "report.md").read_text().splitlines()
               if line.startswith("| synthetic/rpe/seed1 |"))
    assert "| interrupted |" in row and f"interrupted at update 16; `{stored['command']}` goes on" in row
    assert "failed" not in row and report.returncode == 0

    result = run(args, cwd=REPO, timeout=LONG)
    assert "[3/3 synthetic/rpe/seed1] interrupted before\n" in result.stderr
    assert "[3/3 synthetic/rpe/seed1] train" not in result.stderr
    assert json.loads((stopped / "result.json").read_text())["status"] == "finished"


def test_an_unfinished_attempt_on_training_files_changed_since_starts_again(tmp_path):
    """The files' SHA-256 are kept as the attempt starts training (training_data.json): a
    cut made again of another size does not go on from checkpoints trained on the old one."""
    from onmt_posenc.experiments.running import state
    from onmt_posenc.experiments.running.data_preparation import corpus_files
    from onmt_posenc.experiments.running.opennmt_config import run_config
    from onmt_posenc.experiments.running.store import TRAINING_DATA, data_dir, run_dir

    loaded = experiments.load(experiment_file(tmp_path, grid={"method": ["ape"]}), output=tmp_path / "out")
    made = loaded.runs[0]
    files = corpus_files(loaded.data[made.data], data_dir(loaded, made.data))
    config = run_config(loaded, made, files)
    for path in (*files["train"], *files["valid"]):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text("a b\n", encoding="utf-8")
    directory = run_dir(loaded, made)
    directory.mkdir(parents=True)
    write_yaml(directory / "config.yaml", config)
    (directory / TRAINING_DATA).write_text(json.dumps(state.training_data_of(config)))
    assert state.start_again_why(directory, config) is None
    Path(files["train"][0]).write_text("a b\nc d\n", encoding="utf-8")
    assert state.start_again_why(directory, config) == "on training files that have changed since (train.path_src)"
    said = []
    (directory / "model_step_8.pt").write_bytes(b"")
    assert run_checkpoints.resume_point(directory, config, said.append) is None
    assert said == ["an unfinished attempt on training files that have changed since (train.path_src); starting again"]


def test_resume_skips_checkpoints_cut_short(tmp_path):
    """A checkpoint whose save was killed does not load: it is removed and the one before is used."""
    import argparse

    import torch

    from onmt_posenc.experiments.running.checkpoints import newest_complete_checkpoint

    for step in (100, 200):
        torch.save({"model": {"w": torch.ones(2)}, "opt": argparse.Namespace(seed=1), "vocab": {}},
                   tmp_path / f"model_step_{step}.pt")
    whole = (tmp_path / "model_step_200.pt").read_bytes()
    (tmp_path / "model_step_200.pt").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "model_step_300.pt").write_bytes(b"")
    said = []
    assert newest_complete_checkpoint(tmp_path, said.append) == tmp_path / "model_step_100.pt"
    assert said == ["model_step_300.pt is not a complete checkpoint; removed",
                    "model_step_200.pt is not a complete checkpoint; removed"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model_step_100.pt"]


def test_progress_of_a_resumed_run_counts_only_the_steps_trained_since(monkeypatch):
    import io


    clock = iter([0.0, 0.0, 100.0])  # run start, training start, first report
    monkeypatch.setattr(progress_module.time, "time", lambda: next(clock))
    stream = io.StringIO()
    progress = progress_module.Progress(total=1, stream=stream)
    progress.start_run(1, "vanilla/ape/seed1")
    progress.start_training(from_step=1000)
    progress.train_step(1050, 2500)
    assert "train step 1050/2500 (42%), 0.5 steps/s, run ETA 0:48:20" in stream.getvalue()


def test_a_resumed_run_keeps_as_many_checkpoints_as_one_that_was_not(tmp_path):
    from onmt_posenc.experiments.running.checkpoints import keep_newest
    from onmt_posenc.experiments.running.store import saved_checkpoints

    for step in (250, 500, 750, 1000, 1250):  # 250-750 from the interrupted attempt
        (tmp_path / f"model_step_{step}.pt").write_bytes(b"x")
    kept = keep_newest(saved_checkpoints(tmp_path), 2)
    assert [p.name for p in kept] == ["model_step_1000.pt", "model_step_1250.pt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [p.name for p in kept]
    assert len(keep_newest(saved_checkpoints(tmp_path), -1)) == 2  # OpenNMT-py's -1: keep all


def test_the_report_says_how_an_unfinished_run_goes_on(tmp_path):
    """A run with checkpoints but no record (training now, or killed without one) and one
    interrupted before the file changed: the Runs table says what `run` will do with each,
    in the runner's words, and the header counts them."""
    from onmt_posenc.experiments.report import command as report
    from onmt_posenc.experiments.running import grid_records as report_runs, state
    from onmt_posenc.experiments.running.data_preparation import corpus_files
    from onmt_posenc.experiments.running.opennmt_config import run_config
    from onmt_posenc.experiments.running.store import data_dir, run_dir

    path = experiment_file(tmp_path, data={"small": {"synthetic": {"train_examples": 50}}},
                           grid={"method": ["ape", "shape", "rpe"], "K": [10], "seed": [1]})
    loaded = experiments.load(path, output=tmp_path / "out")
    ape, shape, _ = loaded.runs
    configs = {}
    for made, changes in ((ape, {}), (shape, {"dropout": [0.3]})):  # shape: made before the file changed
        directory = run_dir(loaded, made)
        directory.mkdir(parents=True)
        configs[made.id] = run_config(loaded, made, corpus_files(loaded.data[made.data], data_dir(loaded, made.data)))
        write_yaml(directory / "config.yaml", {**configs[made.id], **changes})
        for step in (4, 8):
            (directory / f"model_step_{step}.pt").write_bytes(b"")
    (run_dir(loaded, shape) / "interrupted.json").write_text(json.dumps(
        {**runner.run_fields(shape), "status": "interrupted", "step": 8, "command": "onmt-posenc run x.yaml"}))

    records = report_runs.collect(loaded)
    assert [r["status"] for r in records] == ["missing", "interrupted", "missing"]
    assert records[0]["error"] == ("started, no result yet: checkpoints up to update 8 (running now, or stopped "
                                   "without a record); `onmt-posenc run` goes on from its newest complete "
                                   "checkpoint, or starts again if none is")
    assert records[1]["error"] == ("interrupted at update 8, an attempt with another config: `onmt-posenc run` "
                                   "starts it again")
    assert records[2]["error"] == "not run yet"
    text = report.write(loaded, records).read_text(encoding="utf-8")
    assert "0 of 3 runs finished, 1 interrupted, 2 without a result yet." in text
    assert f"| {ape.id} | missing | – | – | started, no result yet: checkpoints up to update 8 " in text
    # what the runner does with them: these checkpoints are empty files, none complete
    said = []
    assert run_checkpoints.resume_point(run_dir(loaded, ape), configs[ape.id], said.append) is None
    assert said == ["model_step_8.pt is not a complete checkpoint; removed",
                    "model_step_4.pt is not a complete checkpoint; removed"]
    said = []
    assert run_checkpoints.resume_point(run_dir(loaded, shape), configs[shape.id], said.append) is None
    assert said == ["an unfinished attempt with another config; starting again"]
    (run_dir(loaded, shape) / "config.yaml").write_text("")
    assert state.start_again_why(run_dir(loaded, shape), configs[shape.id]) == "without a readable config.yaml"
    # a new run's folder, which holds only the lock the runner took: nothing to say, nothing to go on from
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "runner.lock").write_text("pid 1 on host\n")
    said = []
    assert run_checkpoints.resume_point(fresh, configs[ape.id], said.append) is None and said == []


def test_a_finished_run_trains_on_when_the_file_asks_for_more_updates(demo, tmp_path):
    """train_steps raised in the experiment file: the finished runs go on from their last
    checkpoint (kept as it was) instead of starting over; the curve spans both."""
    output, _ = demo
    copy = tmp_path / "longer"
    shutil.copytree(output, copy)
    last = copy / "synthetic" / "ape" / "seed1" / "model_step_16.pt"
    saved = last.stat().st_mtime_ns
    longer = [pair for pair in SCALED_DOWN if not pair.startswith("settings.train_steps=")] + ["settings.train_steps=24"]
    result = run([command("onmt-posenc"), "run", DEMO, "--output", copy, *overrides(longer),
                  "--set", "grid.method=[ape]"], cwd=REPO, timeout=LONG)
    assert "[1/1 synthetic/ape/seed1] finished at 16 updates; `onmt-posenc run` trains it on to 24" in result.stderr
    assert "[1/1 synthetic/ape/seed1] resume from model_step_16.pt" in result.stderr
    assert last.stat().st_mtime_ns == saved
    stored = json.loads((copy / "synthetic" / "ape" / "seed1" / "result.json").read_text())
    assert stored["config"]["train_steps"] == 24 and stored["curve"]["started_from"] == [0, 16]
    assert [p["step"] for p in stored["curve"]["valid"]] == [16]  # valid_steps 16: nothing new at 24
    assert stored["checkpoints_averaged"] == ["model_step_16.pt", "model_step_24.pt"]


def test_a_finished_run_is_evaluated_again_when_the_evaluation_changes(demo, tmp_path):
    """Another beam (or evaluation set, average_last, analysis option): the report marks
    the run stale, and `run` translates and scores it again from its last checkpoint
    without training; with no checkpoint left it says so and keeps the folder."""
    output = tmp_path / "out"
    shutil.copytree(demo[0] / "synthetic" / "ape", output / "synthetic" / "ape")
    finished = output / "synthetic" / "ape" / "seed1"
    args = [DEMO, "--output", output, *overrides(SCALED_DOWN), "--set", "grid=[{data: [synthetic], method: [ape]}]"]
    train_log = (finished / "logs" / "train.log").read_text()
    beam = ["--set", "evaluation.translate.beam_size=2"]
    run([command("onmt-posenc"), "report", *args, *beam], cwd=REPO)
    # the report and the runner say it in the same words (state.run_state)
    why = (f"{finished} holds a run evaluated with other evaluation settings (sets, translate, average_last or "
           f"analyses) than {DEMO} makes now; `onmt-posenc run` evaluates it again from its last checkpoint, "
           "without training")
    assert f"| synthetic/ape/seed1 | stale | – | – | stale: {why} |" in (output / "report.md").read_text()

    again = run([command("onmt-posenc"), "run", *args, *beam], cwd=REPO, timeout=LONG)
    assert f"[1/1 synthetic/ape/seed1] {why}" in again.stderr
    assert "train step" not in again.stderr and (finished / "logs" / "train.log").read_text() == train_log
    result = json.loads((finished / "result.json").read_text())
    assert result["status"] == "finished" and result["evaluation"]["translate"]["beam_size"] == 2
    assert "beam_size: 2" in (finished / "translate.yaml").read_text()
    assert "| synthetic/ape/seed1 | finished |" in (output / "report.md").read_text()

    for checkpoint in finished.glob("model_step_*.pt"):
        checkpoint.unlink()
    failed = run([command("onmt-posenc"), "run", *args], cwd=REPO, expect_ok=False)
    assert f"FAILED synthetic/ape/seed1: {why}; but its last checkpoint is gone" in failed.stderr
    assert (finished / "result.json").is_file()


def test_a_set_added_to_the_evaluation_is_translated_for_the_finished_runs(tmp_path):
    """evaluation.sets widened from [test] to [valid, test]: the evaluation's files and
    options are the same, but the finished run has no valid BLEU; it is evaluated again,
    not skipped. A set taken off the list leaves the run as it is."""
    from onmt_posenc.experiments.running import state

    def loaded(folder, sets):
        (tmp_path / folder).mkdir()
        return experiments.load(experiment_file(tmp_path / folder, evaluation={"sets": sets}))

    narrow, wide = loaded("narrow", ["test"]), loaded("wide", ["valid", "test"])
    small = next(r for r in narrow.runs if r.data == "small")
    record = {"bleu": {"test": 20.0}, "evaluation": state.evaluation_of(narrow, small)}
    assert not state.evaluated_otherwise(record, narrow, small)
    assert state.evaluated_otherwise(record, wide, small)
    both = {**record, "bleu": {"valid": 21.0, "test": 20.0}}
    assert not state.evaluated_otherwise(both, narrow, small)


def test_a_warm_started_run_starts_from_its_sources_model_and_resumes_as_any_run(demo, tmp_path):
    """warm_start: the INTERPOLATE run starts from the demo's finished APE model with a new
    optimizer (step 0) and its own corpus's vocabulary; interrupted, it goes on from
    its own checkpoint; without warm_start in the file, its result is stale."""
    output = tmp_path / "out"
    shutil.copytree(demo[0] / "synthetic" / "ape", output / "synthetic" / "ape")
    single = "{seed: 1, train_examples: 600, eval_examples: 12, max_sentences: 1, test_sentences: 1, concat_sentences: 1}"
    # half the source's learning rate: the warm run's own schedule, also after resuming
    warm = ["--set", f"data.warm.synthetic={single}", "--set", "data.warm.interpolate=2",
            "--set", "data.warm.settings={learning_rate: 1.0}",
            "--set", "data.warm.warm_start=synthetic", "--set", "grid=[{data: [synthetic, warm], method: [ape]}]"]
    args = [command("onmt-posenc"), "run", DEMO, "--output", output, *overrides(SCALED_DOWN), *warm]
    result = run(args, cwd=REPO, timeout=LONG)
    source = output / "synthetic" / "ape" / "seed1"
    started = output / "warm" / "ape" / "seed1"
    assert "[1/2 synthetic/ape/seed1] finished before; skipped" in result.stderr
    assert f"[2/2 warm/ape/seed1] start from {source / 'averaged.pt'}" in result.stderr
    assert yaml.safe_load((started / "config.yaml").read_text())["train_from"] == str(source / "averaged.pt")
    log = (started / "logs" / "train.log").read_text()
    assert f"Loading checkpoint from {source / 'averaged.pt'}" in log
    assert "Updating checkpoint vocabulary with new vocabulary" in log
    assert re.search(r"Step\s+4/\s*16;", log)  # counted from 0 again, a new optimizer
    assert json.loads((started / "result.json").read_text())["status"] == "finished"
    assert "warm: INTERPOLATE (interpolate: 2, warm_start: synthetic)" in (output / "report.md").read_text()
    # provenance in the records alone: the source's record names its model by digest, the warm run's that model
    source_model = json.loads((source / "result.json").read_text())["model_sha256"]
    assert source_model == file_digest(source / "averaged.pt")
    assert json.loads((started / "result.json").read_text())["warm_start"] == {
        "source": "synthetic/ape/seed1", "from": str(source / "averaged.pt"), "sha256": source_model}

    for name in ("result.json", "averaged.pt", "model_step_16.pt"):  # as if killed after update 8's save
        (started / name).unlink()
    resumed = run(args, cwd=REPO, timeout=LONG)
    assert "[2/2 warm/ape/seed1] resume from model_step_8.pt" in resumed.stderr
    assert "start from" not in resumed.stderr
    assert json.loads((started / "result.json").read_text())["resumed_from"] == 8
    first, again = (part for part in (started / "logs" / "train.log").read_text().split("$ ")[1:]
                    if "onmt_train" in part.split()[0])
    rate = [re.search(r"Step\s+12/\s*16;.*? lr: ([\d.e-]+);", part).group(1) for part in (first, again)]
    assert rate[0] == rate[1]  # not the source's (learning_rate 2.0) from the checkpoint's options
    assert float(yaml.safe_load((source / "config.yaml").read_text())["learning_rate"]) == 2.0

    cold = run([command("onmt-posenc"), "report", DEMO, "--output", output, *overrides(SCALED_DOWN),
                *warm[:-4], *warm[-2:]], cwd=REPO)  # warm_start's --set left out
    assert "| warm/ape/seed1 | stale" in (output / "report.md").read_text(), cold.stderr

    # the source model changes (as when its run trains further): the warm run no longer is what it says
    assert json.loads((started / "warm_start.json").read_text())["sha256"] == file_digest(source / "averaged.pt")
    shutil.copy(sorted(source.glob("model_step_*.pt"))[0], source / "averaged.pt")
    again = run(args, cwd=REPO, expect_ok=False)
    assert (f"FAILED warm/ape/seed1: {started} holds a finished run that started from {source / 'averaged.pt'} "
            "before that model changed") in again.stderr
    run([command("onmt-posenc"), "report", DEMO, "--output", output, *overrides(SCALED_DOWN), *warm], cwd=REPO)
    assert re.search(r"\| warm/ape/seed1 \| stale \|.* before that model changed; remove that folder",
                     (output / "report.md").read_text())
    said = []  # unfinished, it starts again instead of going on from the old model's checkpoints
    assert run_checkpoints.resume_point(started, yaml.safe_load((started / "config.yaml").read_text()), said.append) is None
    assert said == [f"an unfinished attempt from {source / 'averaged.pt'} as it was before it changed; starting again"]


def test_a_warm_started_run_waits_for_its_source_to_finish(tmp_path):
    """With shards, a warm-started run can come before its source has finished: it fails
    in one line naming the source, and trains nothing."""
    single = "{seed: 1, train_examples: 60, eval_examples: 6, max_sentences: 1, test_sentences: 1, concat_sentences: 1}"
    args = [command("onmt-posenc"), "run", DEMO, "--output", tmp_path / "out", "--shard", "2/2",
            *overrides(SCALED_DOWN), "--set", f"data.warm.synthetic={single}", "--set", "data.warm.interpolate=2",
            "--set", "data.warm.warm_start=synthetic", "--set", "grid=[{data: [synthetic, warm], method: [ape]}]"]
    result = run(args, cwd=REPO, expect_ok=False)
    assert result.returncode == 1
    assert ("FAILED warm/ape/seed1: data.warm.warm_start: this run starts from the model of synthetic/ape/seed1, "
            "which has not finished with the file's settings yet") in result.stderr
    assert not list((tmp_path / "out" / "warm" / "ape" / "seed1").glob("model_step_*.pt"))


def test_a_run_folder_that_cannot_be_made_is_named_not_blamed_on_the_data(tmp_path):
    """A file where the run's folder goes: the run fails in one line naming its folder (the
    data was prepared), and the batch goes on to its summary."""
    output = tmp_path / "out"
    (output / "synthetic").mkdir(parents=True)
    (output / "synthetic" / "ape").write_text("not a folder")
    args = [command("onmt-posenc"), "run", DEMO, "--output", output, *overrides(SCALED_DOWN),
            "--set", "grid=[{data: [synthetic], method: [ape]}]"]
    result = run(args, cwd=REPO, expect_ok=False)
    assert result.returncode == 1
    folder = output / "synthetic" / "ape" / "seed1"
    assert re.search(rf"FAILED synthetic/ape/seed1: run folder {re.escape(str(folder))}: \[Errno \d+\] ", result.stderr)
    assert "data:" not in result.stderr and (output / "data" / "synthetic").is_dir()


def test_failing_run_is_reported_and_shards_merge(demo, tmp_path):
    """Shard 1/2 holds the demo's finished APE run, shard 2/2 a run whose training fails."""
    output, _ = demo
    mapping = yaml.safe_load(DEMO.read_text())
    mapping["recipe"] = str(DEMO.parent / mapping["recipe"])
    # passes the option checks; its first training batch needs more than 2 positions
    mapping["methods"]["broken"] = {"src_position_encoding": "randomized", "tgt_position_encoding": "randomized",
                                    "randomized_max_position": 2, "randomized_eval_length": 2}
    mapping["grid"]["method"] = ["ape", "broken"]
    path = write_yaml(tmp_path / "demo_broken.yaml", mapping)
    args = [command("onmt-posenc"), "run", path, "--output", output, *overrides(SCALED_DOWN)]
    first = run([*args, "--shard", "1/2"], cwd=REPO)
    assert "finished before; skipped" in first.stderr
    second = run([*args, "--shard", "2/2"], cwd=REPO, expect_ok=False, timeout=LONG)
    assert second.returncode == 1
    log = output / "synthetic" / "broken" / "seed1" / "logs" / "train.log"
    failed = re.search(rf"FAILED synthetic/broken/seed1: onmt_train exited with status 1: (.*); see {re.escape(str(log))}\n",
                       second.stderr)
    why = failed.group(1)  # the log's last error line
    assert why.startswith("onmt_train: error: A training sequence of")  # one line, no traceback
    assert why.endswith("but randomized_max_position is 2: raise it, or filter long sentences (transform filtertoolong).")
    assert second.stderr.count(str(log)) == 2  # the run's FAILED line and the summary's, once each
    assert why in log.read_text()
    shard_results = json.loads((output / "shard-2-of-2.json").read_text())
    assert shard_results[0]["status"] == "failed" and shard_results[0]["log"] == str(log)

    merged = run([command("onmt-posenc"), "report", path, "--output", output, *overrides(SCALED_DOWN)], cwd=REPO)
    assert "report:" in merged.stderr
    report = (output / "report.md").read_text(encoding="utf-8")
    assert "1 of 2 runs finished, 1 failed" in report
    assert "| synthetic/broken/seed1 | failed |" in report and str(log) in report
    assert f"| synthetic | EXTRAPOLATE | ape | {seeds_cell(output / 'synthetic' / 'ape' / 'seed1')} |" in report


def test_report_marks_results_made_with_other_settings_as_stale(demo, tmp_path):
    """A copied output folder holds the same runs; after the file changes, a run is stale."""
    output, _ = demo
    copy = tmp_path / "moved"
    shutil.copytree(output, copy)
    run([command("onmt-posenc"), "report", DEMO, "--output", copy, *overrides(SCALED_DOWN)], cwd=REPO)
    assert "stale" not in (copy / "report.md").read_text(encoding="utf-8")
    # the same runs made on a GPU: where a run trains is not what it studies
    on_gpu = [*overrides(SCALED_DOWN), "--set", "settings.gpu_ranks=[0]", "--set", "evaluation.translate.gpu=0"]
    run([command("onmt-posenc"), "report", DEMO, "--output", copy, *on_gpu], cwd=REPO)
    assert "stale" not in (copy / "report.md").read_text(encoding="utf-8")
    changed = [*overrides(SCALED_DOWN), "--set", "methods.shape.shape_max_shift=7"]
    run([command("onmt-posenc"), "report", DEMO, "--output", copy, *changed], cwd=REPO)
    report = (copy / "report.md").read_text(encoding="utf-8")
    assert "2 of 3 runs finished, 1 stale (made with other settings than the file's; left out)" in report
    assert "| synthetic/shape/seed1 | stale |" in report
    assert "| synthetic | EXTRAPOLATE | shape | 0 | – |" in report  # no seed of it in the BLEU table
    assert "| synthetic/shape/seed1 | concat |" not in report  # nor in the joined sets' table
    rows = list(csv.DictReader(open(copy / "results.csv", encoding="utf-8")))
    assert [r["status"] for r in rows] == ["finished", "stale", "finished"]
    every_run = [*overrides(SCALED_DOWN), "--set", "settings.label_smoothing=0.3"]
    result = run([command("onmt-posenc"), "report", DEMO, "--output", copy, *every_run], cwd=REPO)
    assert ("onmt-posenc report: warning: 3 of 3 runs are stale (made with other settings than the file's); "
            "the report has no results, only what happened to each run") in result.stderr


def test_runs_trained_on_files_changed_since_are_stale(demo, tmp_path):
    """A run's data is named by path: a cut of another size, or a corpus prepared again, is
    written at the same path. Its files' SHA-256 in result.json say the runs are stale, and
    `run` leaves them as they are, saying why, rather than skip or evaluate them again."""
    output, _ = demo
    copy = tmp_path / "copy"
    shutil.copytree(output, copy)
    args = [DEMO, "--output", copy, *overrides(SCALED_DOWN)]
    with open(copy / "data" / "synthetic" / "train.src", "a", encoding="utf-8") as train:
        train.write("a b c\n")
    run([command("onmt-posenc"), "report", *args], cwd=REPO)
    why = (f"{copy / 'synthetic' / 'ape' / 'seed1'} holds a finished run trained on files that have changed since "
           "(train.path_src: the same paths, other contents); remove that folder to run it again on them")
    assert f"| synthetic/ape/seed1 | stale | – | – | stale: {why} |" in (copy / "report.md").read_text()
    again = run([command("onmt-posenc"), "run", *args], cwd=REPO, expect_ok=False)
    assert f"FAILED synthetic/ape/seed1: {why}" in again.stderr and "train step" not in again.stderr
    assert json.loads((copy / "synthetic" / "ape" / "seed1" / "result.json").read_text())["status"] == "finished"


def test_unreadable_results_are_named_and_the_run_done_again(demo, tmp_path):
    """A result.json cut short is reported by file and run again (from its checkpoints,
    without training); an analysis file that cannot be read is left out with a note."""
    output, _ = demo
    copy = tmp_path / "copy"
    shutil.copytree(output, copy)
    result = copy / "synthetic" / "rpe" / "seed1" / "result.json"
    result.write_text(result.read_text()[:100])
    broken_analysis = copy / "synthetic" / "ape" / "seed1" / "analyses" / "token_nll.json"
    broken_analysis.write_text("{")
    args = [command("onmt-posenc"), "report", DEMO, "--output", copy, *overrides(SCALED_DOWN)]
    assert "Traceback" not in run(args, cwd=REPO).stderr
    report = (copy / "report.md").read_text(encoding="utf-8")
    assert "| synthetic/rpe/seed1 | failed |" in report and f"{result} cannot be read (JSONDecodeError" in report
    assert f"token_nll: {broken_analysis} cannot be read (JSONDecodeError" in report

    again = run([command("onmt-posenc"), "run", DEMO, "--output", copy, *overrides(SCALED_DOWN)], cwd=REPO,
                timeout=LONG)
    assert f"{result} cannot be read (JSONDecodeError" in again.stderr
    assert "[3/3 synthetic/rpe/seed1] train" not in again.stderr  # its last checkpoint is complete
    assert json.loads(result.read_text())["status"] == "finished"
