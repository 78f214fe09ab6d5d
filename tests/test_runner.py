"""The experiment runner: grid expansion, the main command end to end (scaled down),
resuming, a failing run kept apart, and shards merged into one report."""
import csv
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import REPO, TOY_ENDE, command, head, run, write_yaml

from onmt_posenc import experiment as experiments

DEMO = REPO / "recipes" / "experiments" / "demo.yaml"
# The demo, scaled down: a few updates on a small synthetic corpus, short outputs.
SCALED_DOWN = [
    "settings.train_steps=16", "settings.save_checkpoint_steps=8", "settings.valid_steps=16",
    "settings.report_every=4", "settings.warmup_steps=8",
    "data.synthetic.synthetic.train_examples=600", "data.synthetic.synthetic.eval_examples=12",
    "evaluation.translate.max_length=30", "analyses.speed.batches=2", "analyses.speed.rounds=1",
]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LONG = 1800  # seconds: three small trainings and their evaluation, on a slow machine


def overrides(pairs):
    return [arg for pair in pairs for arg in ("--set", pair)]


def experiment_file(tmp_path, **changes):
    """A tiny experiment file (no training needed to load it)."""
    mapping = {
        "recipe": str(REPO / "recipes" / "base.yaml"),
        "settings": {"train_steps": 10, "hidden_size": 64},
        "methods": {"ape": {}, "shape": {"shape_max_shift": 100},
                    "rpe": {"position_encoding": False, "max_relative_positions": 16}},
        "data": {"small": {"synthetic": {"train_examples": 50}},
                 "long": {"synthetic": {"seed": 2}, "settings": {"hidden_size": 128}}},
        "grid": {"method": ["ape", "shape", "rpe"], "K": [10, 40], "seed": [1, 2]},
    }
    mapping.update(changes)
    return write_yaml(tmp_path / "experiment.yaml", mapping)


def test_grid_expansion(tmp_path):
    loaded = experiments.load(experiment_file(tmp_path))
    ids = [r.id for r in loaded.runs]
    # K applies to SHAPE only: per data setting ape x 2 seeds + shape x 2 K x 2 seeds + rpe x 2 seeds
    assert len(ids) == len(set(ids)) == 2 * (2 + 4 + 2)
    assert "small/shape-K40/seed2" in ids and "long/ape/seed1" in ids
    by_id = {r.id: r for r in loaded.runs}
    assert by_id["small/shape-K10/seed1"].config["shape_max_shift"] == 10
    assert "shape_max_shift" not in by_id["small/ape/seed1"].config
    assert by_id["small/rpe/seed2"].config["max_relative_positions"] == 16
    assert by_id["small/rpe/seed2"].config["seed"] == 2
    # recipe < settings < data settings < method
    assert by_id["small/ape/seed1"].config["hidden_size"] == 64
    assert by_id["long/ape/seed1"].config["hidden_size"] == 128
    assert by_id["long/ape/seed1"].config["heads"] == 8  # from the recipe
    assert loaded.output == Path("runs/experiment")


def test_overrides_and_clear_errors(tmp_path):
    path = experiment_file(tmp_path)
    loaded = experiments.load(path, ["settings.train_steps=3", "grid.K=[5]"])
    assert {r.config["train_steps"] for r in loaded.runs} == {3}
    assert {r.shift for r in loaded.runs if r.method == "shape"} == {5}
    for change, message in [
        ({"grid": {"method": ["ape", "spe"]}}, "grid.method names 'spe'"),
        ({"settings": {"save_model": "x"}}, "runner sets"),
        ({"grid": {"methd": ["ape"]}}, "unknown axes"),
        ({"analyses": {"swaped": {}}}, "unknown analysis 'swaped'"),
        ({"baseline": "none"}, "baseline 'none'"),
    ]:
        with pytest.raises(experiments.ExperimentError, match=message) as error:
            experiments.load(experiment_file(tmp_path, **change))
        assert str(path) in str(error.value)


def test_shards_split_the_runs_without_overlap(tmp_path):
    runs = experiments.load(experiment_file(tmp_path)).runs
    parts = [experiments.shard(runs, i, 3) for i in (1, 2, 3)]
    assert sorted(r.id for part in parts for r in part) == sorted(r.id for r in runs)
    assert experiments.parse_shard("2/3") == (2, 3)
    for bad in ("0/3", "4/3", "x"):
        with pytest.raises(experiments.ExperimentError):
            experiments.parse_shard(bad)


@pytest.mark.parametrize("name", ["demo.yaml", "toy_ende.yaml"])
def test_shipped_experiments_name_known_options_and_existing_files(name):
    from onmt_posenc.strict_config import known_option_names

    loaded = experiments.load(REPO / "recipes" / "experiments" / name)
    for each in loaded.runs:
        assert set(each.config) <= known_option_names(), each.id
    assert set(loaded.translate) <= known_option_names()
    for setting in loaded.data.values():
        for pair in [setting.train, setting.valid, *setting.eval_sets.values()]:
            if pair is not None:  # synthetic data has no files before it is generated
                assert named_file_exists(pair.src) and named_file_exists(pair.tgt)


def named_file_exists(path):
    """toy_ende.yaml names the whole corpus beside the repository, which a clone lacks: outside
    the repository, a file of that name in the excerpt of the same corpus (tests/data) will do."""
    return path.is_file() if path.is_relative_to(REPO) else (TOY_ENDE / path.name).is_file()


def test_data_folder_replaces_the_files_data(tmp_path):
    loaded = experiments.load(DEMO, data_folder=TOY_ENDE)
    assert list(loaded.data) == ["toy-ende"] and loaded.output == Path("runs/demo-toy-ende")
    assert [r.id for r in loaded.runs] == ["toy-ende/ape/seed1", "toy-ende/shape/seed1", "toy-ende/rpe/seed1"]
    setting = loaded.data["toy-ende"]
    assert setting.train.src == TOY_ENDE.resolve() / "src-train.txt" and setting.train.lines is None
    assert set(setting.eval_sets) == {"valid", "test", "concat"} and setting.eval_sets["concat"].join == 2
    (tmp_path / "src-train.txt").write_text("a\n")
    with pytest.raises(experiments.ExperimentError, match="missing tgt-train.txt, src-val.txt"):
        experiments.load(DEMO, data_folder=tmp_path)


def test_demo_on_a_folder_of_real_files(tmp_path):
    """The main command with `--data` on toy-ende files (cut short), APE only."""
    folder = tmp_path / "toy"
    folder.mkdir()
    for name, lines in [("train", 300), ("val", 20), ("test", 20)]:
        for side in ("src", "tgt"):
            head(TOY_ENDE / f"{side}-{name}.txt", folder / f"{side}-{name}.txt", lines)
    output = tmp_path / "out"
    result = run([command("onmt-posenc"), "run", DEMO, "--data", folder, "--output", output,
                  *overrides([*SCALED_DOWN, "grid.method=[ape]"])], cwd=REPO, timeout=LONG)
    assert "[1/1 toy/ape/seed1] train step 16/16" in result.stderr
    rows = list(csv.DictReader(open(output / "results.csv", encoding="utf-8")))
    assert [(r["data"], r["method"], r["status"]) for r in rows] == [("toy", "ape", "finished")]
    # the test set's 20 lines joined in pairs for the swapped evaluation
    assert len((output / "data" / "toy" / "eval" / "concat.src").read_text().splitlines()) == 10
    assert "| toy | ape | 1 |" in (output / "report.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """`onmt-posenc run recipes/experiments/demo.yaml`, scaled down, run once for the module."""
    output = tmp_path_factory.mktemp("demo") / "out"
    result = run([command("onmt-posenc"), "run", DEMO, "--output", output, *overrides(SCALED_DOWN)],
                 cwd=REPO, timeout=LONG)
    return output, result


def test_demo_end_to_end(demo):
    output, result = demo
    assert "[1/3 synthetic/ape/seed1] train step 16/16" in result.stderr  # progress
    assert "ETA" in result.stderr
    report = (output / "report.md").read_text(encoding="utf-8")
    for heading in ("## BLEU and relative training speed", "## BLEU by source length", "## Swapped evaluation",
                    "## Shift invariance of the encoder", "## Token-level NLL", "## Position ablation",
                    "## Speed", "## Runs"):
        assert heading in report
    assert "| synthetic | rpe | 1 |" in report
    for image in report.split("](")[1:]:
        png = output / image.split(")")[0]
        assert png.read_bytes()[:8] == PNG_MAGIC
    rows = list(csv.DictReader(open(output / "results.csv", encoding="utf-8")))
    assert [r["method"] for r in rows] == ["ape", "shape", "rpe"]
    assert all(r["status"] == "finished" for r in rows)
    assert all(0 <= float(r[f"bleu_{s}"]) <= 100 for r in rows for s in ("valid", "test", "concat"))
    assert [float(r["speed"]) for r in rows][0] == 1.0
    results = json.loads((output / "results.json").read_text())
    rpe = next(r for r in results["runs"] if r["method"] == "rpe")
    ablation = json.loads((output / rpe["id"] / "analyses" / "position_ablation.json").read_text())
    assert ablation["removed_from"] == [] and ablation["encoder_cosine"] == pytest.approx(1.0)
    shape = yaml.safe_load((output / "synthetic/shape/seed1/config.yaml").read_text())
    demo_k = yaml.safe_load(DEMO.read_text())["methods"]["shape"]["shape_max_shift"]
    assert shape["shape_max_shift"] == demo_k and shape["train_steps"] == 16  # the file's K, the --set steps


def test_interrupt_then_rerun_skips_finished_runs_and_redoes_the_interrupted_one(demo):
    output, _ = demo
    interrupted = output / "synthetic" / "shape" / "seed1"
    (interrupted / "result.json").unlink()  # run it again, and stop it while it trains
    before = (output / "synthetic" / "ape" / "seed1" / "result.json").stat().st_mtime
    args = [command("onmt-posenc"), "run", DEMO, "--output", output, *overrides(SCALED_DOWN)]
    process = subprocess.Popen([str(a) for a in args], cwd=REPO, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
    for line in process.stderr:
        if "[2/3 synthetic/shape/seed1] train" in line:
            process.send_signal(signal.SIGTERM)  # what a cluster scheduler sends
            break
    rest = process.stderr.read()
    assert process.wait(timeout=60) == 130
    assert "interrupted: finished runs are kept" in rest
    assert not (interrupted / "result.json").exists()
    assert (output / "synthetic" / "rpe" / "seed1" / "result.json").is_file()

    result = run(args, cwd=REPO, timeout=LONG)
    assert result.stderr.count("finished before; skipped") == 2
    assert "[2/3 synthetic/shape/seed1] train step 16/16" in result.stderr
    assert (interrupted / "result.json").is_file()
    assert (output / "synthetic" / "ape" / "seed1" / "result.json").stat().st_mtime == before


def test_failing_run_is_reported_and_shards_merge(demo, tmp_path):
    """Shard 1/2 holds the demo's finished APE run, shard 2/2 a run whose training fails."""
    output, _ = demo
    mapping = yaml.safe_load(DEMO.read_text())
    mapping["recipe"] = str(DEMO.parent / mapping["recipe"])
    mapping["methods"]["broken"] = {"max_relative_positions": 16}  # with APE on: onmt_train refuses it
    mapping["grid"]["method"] = ["ape", "broken"]
    path = write_yaml(tmp_path / "demo_broken.yaml", mapping)
    args = [command("onmt-posenc"), "run", path, "--output", output, *overrides(SCALED_DOWN)]
    first = run([*args, "--shard", "1/2"], cwd=REPO)
    assert "finished before; skipped" in first.stderr
    second = run([*args, "--shard", "2/2"], cwd=REPO, expect_ok=False, timeout=LONG)
    assert second.returncode == 1
    log = output / "synthetic" / "broken" / "seed1" / "logs" / "train.log"
    assert f"FAILED synthetic/broken/seed1: onmt_train exited with status 1; see {log}" in second.stderr
    assert "Cannot use absolute and relative position encoding" in log.read_text()
    shard_results = json.loads((output / "shard-2-of-2.json").read_text())
    assert shard_results[0]["status"] == "failed" and shard_results[0]["log"] == str(log)

    merged = run([command("onmt-posenc"), "report", path, "--output", output, *overrides(SCALED_DOWN)], cwd=REPO)
    assert "report:" in merged.stderr
    report = (output / "report.md").read_text(encoding="utf-8")
    assert "1 of 2 runs finished, 1 failed" in report
    assert "| synthetic/broken/seed1 | failed |" in report and str(log) in report
    assert "| synthetic | ape | 1 |" in report
