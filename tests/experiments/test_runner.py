"""The experiment runner: grid expansion, the main command end to end (scaled down),
resuming, a failing run kept apart, and shards merged into one report."""
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import MULTI30K, REPO, TEST_DATA, TOY_ENDE, command, head, run, write_yaml

from onmt_posenc import experiments
from onmt_posenc.experiments import progress as progress_module, run_checkpoints, runner
from onmt_posenc.core.joining import join_lines
from onmt_posenc.core.text import read_lines, write_lines
from onmt_posenc.experiments.store import file_digest

DEMO = REPO / "recipes" / "experiments" / "demo.yaml"
# The demo, scaled down: a few updates on a small synthetic corpus, short outputs.
SCALED_DOWN = [
    "settings.train_steps=16", "settings.save_checkpoint_steps=8", "settings.valid_steps=16",
    "settings.report_every=4", "settings.warmup_steps=8",
    "data.synthetic.synthetic.train_examples=600", "data.synthetic.synthetic.eval_examples=12",
    "evaluation.translate.max_length=30", "analyses.swapped.train_examples=12",
]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LONG = 1800  # seconds: three small trainings and their evaluation, on a slow machine


def overrides(pairs):
    return [arg for pair in pairs for arg in ("--set", pair)]


def tokens(lines):
    return [line.split() for line in lines]


def experiment_file(tmp_path, **changes):
    """A tiny experiment file (no training needed to load it)."""
    mapping = {
        "recipe": str(REPO / "recipes" / "base.yaml"),
        "settings": {"train_steps": 10, "hidden_size": 64, "word_vec_size": 64},
        "methods": {"ape": {}, "shape": {"src_position_encoding": "shape", "tgt_position_encoding": "shape"},
                    "rpe": {"position_encoding": False, "max_relative_positions": 16}},
        "data": {"small": {"synthetic": {"train_examples": 50}},
                 "long": {"synthetic": {"seed": 2}, "settings": {"hidden_size": 128, "word_vec_size": 128}}},
        "grid": {"method": ["ape", "shape", "rpe"], "K": [10, 40], "seed": [1, 2]},
    }
    mapping.update(changes)
    return write_yaml(tmp_path / "experiment.yaml", mapping)


@pytest.fixture(scope="module")
def kftt_folder(tmp_path_factory):
    """The committed KFTT excerpt as `prepare kftt` writes it: kftt.yaml's folder (its data
    settings keep their sizes and designs with --data)."""
    folder = tmp_path_factory.mktemp("kftt") / "kftt"
    run([command("onmt-posenc"), "prepare", "kftt", folder, "--from", TEST_DATA / "kftt", "--vocab-size", "3000"])
    return folder


def test_data_folder_names_the_generated_tasks_setting(tmp_path):
    """`--data DIR` on the demo: its setting of the generated task reads DIR, and is named after it."""
    folder = tmp_path / "my-corpus"
    folder.mkdir()
    for name in experiments.FOLDER_FILES:
        head(TOY_ENDE / name, folder / name, 20)
    loaded = experiments.load(DEMO, data_folder=folder)
    assert list(loaded.data) == ["my-corpus"] and loaded.runs[0].id == "my-corpus/ape/seed1"
    assert loaded.name == "demo-my-corpus" and loaded.data["my-corpus"].kind == "EXTRAPOLATE"


def test_target_phrases_are_made_once_and_used_without_the_chunker(tmp_path, monkeypatch):
    """perSPE's phrase file is made by MeCab once per training target; a run given the made
    file (a GPU machine the data was carried to) does not import the chunker."""
    from onmt_posenc.experiments.data_preparation import prepare_phrases

    target = head(TEST_DATA / "small_parallel_enja" / "train.ja", tmp_path / "train.tgt", 5)
    said = []
    phrases = prepare_phrases({"train": (None, target)}, tmp_path, said.append)
    assert len(read_lines(phrases)) == 5 and len(said) == 1
    monkeypatch.setitem(sys.modules, "onmt_posenc.data.chunk_japanese", None)  # importing it fails
    assert prepare_phrases({"train": (None, target)}, tmp_path, said.append) == phrases and len(said) == 1
    write_lines(target, ["別の文です"])  # another target: the file is made again, with the chunker
    with pytest.raises(ImportError):
        prepare_phrases({"train": (None, target)}, tmp_path, said.append)


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
        ({"analyses": {"speed": {}}}, "measured in every run while it trains"),
        ({"baseline": "none"}, "baseline 'none'"),
        # the runner places filtertoolong and concat_pairs on the right corpora itself
        ({"settings": {"transforms": ["filtertoolong"]}}, "settings lists the transform 'filtertoolong'"),
        ({"data": {"d": {"synthetic": {}, "extrapolate": 20}}, "settings": {"src_seq_length": 30}},
         r"settings sets \['src_seq_length'\], which data.d.extrapolate sets"),
        # filtertoolong's and concat_pairs' options where neither transform runs: no effect
        ({"data": {"d": {"synthetic": {}, "settings": {"src_seq_length": 30}}}},
         r"data.d.settings sets \['src_seq_length'\], which no transform of data.d \(VANILLA\) reads"),
        ({"data": {"d": {"synthetic": {}, "extrapolate": 20, "settings": {"concat_n": 3}}}},
         r"data.d.settings sets \['concat_n'\], which no transform of data.d \(EXTRAPOLATE\) reads"),
        ({"data": {"d": {"synthetic": {}, "interpolate": 0}}}, "interpolate must be a positive integer"),
        ({"data": {"d": {"synthetic": {}, "interpolate": 3, "extrapolate": 9}}}, "not both"),
        ({"methods": {"ape": {}, "shape": {"shape_max_shift": 9}}}, "which grid.K overrides"),
        ({"data": {"d": {"synthetic": {}, "interpolate": 4}}}, "synthetic task already joins several"),
        ({"data": {"d": {"synthetic": {}}, "f": {"train": {"src": "a", "tgt": "b"}, "eval": {"t": {"src": "a", "tgt": "b"}}}}},
         r"share no evaluation set"),
        ({"analyses": {"swapped": {"set": "concat"}},
          "data": {"d": {"synthetic": {}}, "f": {"train": {"src": "a", "tgt": "b"},
                                                 "eval": {"valid": {"src": "a", "tgt": "b"}}}},
          "evaluation": {"sets": ["valid"]}}, r"analyses.swapped names \['concat'\], which data.f has no eval set"),
        ({"settings": {"keep_checkpoint": 2}, "evaluation": {"average_last": 3}},
         r"evaluation.average_last: 3 checkpoints, but settings.keep_checkpoint keeps only 2"),
    ]:
        with pytest.raises(experiments.ExperimentError, match=message) as error:
            experiments.load(experiment_file(tmp_path, **change))
        assert str(path) in str(error.value)


def test_a_data_settings_keys_concern_only_its_own_runs(tmp_path):
    loaded = experiments.load(experiment_file(tmp_path, data={
        "short": {"synthetic": {}, "extrapolate": 20},
        "plain": {"synthetic": {}, "settings": {"label_smoothing": 0.2}}}))
    configs = {run.data: run.config for run in loaded.runs if run.method == "ape" and run.seed == 1}
    assert configs["plain"]["label_smoothing"] == 0.2 and configs["short"]["label_smoothing"] != 0.2


def test_speed_claims_only_from_runs_that_trained_alone(tmp_path):
    """Several shards on one GPU, or a loaded CPU: the ratio depends on what ran beside. Only
    the runs the ratio compares count: not a baseline seed on another machine."""
    from onmt_posenc.experiments import claims

    loaded = experiments.load(experiment_file(tmp_path, grid={"method": ["ape", "shape"], "K": [10]},
                                              data={"small": {"synthetic": {}}}))

    def record(method, sharing, seed=1, machine="A"):
        return {"id": f"small/{method}/seed{seed}", "data": "small", "method": method, "seed": seed,
                "status": "finished", "label": "shape-K10" if method == "shape" else method, "bleu": {},
                "device_sharing": sharing, "config": {"shape_max_shift": 10} if method == "shape" else {},
                "machine": {"cpu": machine, "cores": 2, "torch": "2.13"}, "training_speed": {"tokens_per_second": 1.0}}

    alone = {"other_trainings": 0, "load_average": 1.1, "cores": 2}
    speeds = {"small": {"ape": 1.0, "shape-K10": 1.02}}
    for ape, shape, held, said in [
        (alone, alone, "yes", None),
        (alone, {**alone, "other_trainings": 15}, "not measured", "small/shape/seed1 trained beside 15 other"),
        ({**alone, "load_average": 3.9}, alone, "not measured", "loaded machine (load average 3.9 on 2 cores)"),
        (None, alone, "not measured", "small/ape/seed1: whether it shared its machine was not recorded"),
    ]:
        row = claims.speed(claims.Batch(loaded, [record("ape", ape), record("shape", shape)]), speeds, "SHAPE",
                           "paper", lambda ratio: abs(ratio - 1) <= claims.SAME_SPEED)
        assert row["held"] == held and (said is None or said in row["measured"]), row
    elsewhere = [record("ape", {**alone, "other_trainings": 3}, machine="B"),
                 record("ape", alone, seed=2), record("shape", alone)]
    row = claims.speed(claims.Batch(loaded, elsewhere), speeds, "SHAPE", "paper", lambda ratio: True)
    assert row["held"] == "yes", row


def test_speed_ratios_only_between_runs_on_one_machine(tmp_path):
    """The baseline trained on both machines; the ratios are those of the machine that trained
    most runs, never a ratio between machines."""
    from onmt_posenc.experiments.report_runs import relative_speeds

    loaded = experiments.load(experiment_file(tmp_path))
    cpu, gpu = {"cpu": "A", "cores": 2, "torch": "2.13"}, {"cpu": "B", "cores": 16, "gpus": ["H100"], "torch": "2.11"}
    records = [{"data": "small", "method": method, "label": method, "status": "finished", "machine": machine,
                "training_speed": {"tokens_per_second": speed}}
               for method, machine, speed in (("ape", cpu, 1000.0), ("rpe", cpu, 900.0), ("ape", gpu, 50000.0),
                                              ("shape", gpu, 45000.0), ("rpe", gpu, 40000.0))]
    assert relative_speeds(loaded, records) == {"small": {"ape": 1.0, "shape": 0.9, "rpe": 0.8}}
    assert relative_speeds(loaded, records[:2] + records[3:]) == {"small": {"ape": 1.0, "rpe": 0.9}}


@pytest.mark.parametrize("recipe", ["shape_interpolate.yaml", "ape_extrapolate.yaml"])
def test_a_recipe_whose_corpora_have_transforms_is_refused(tmp_path, recipe):
    """The runner replaces the recipe's corpora; their transforms would be lost without a word."""
    path = experiment_file(tmp_path, recipe=str(REPO / "recipes" / recipe))
    with pytest.raises(experiments.ExperimentError, match=r"corpus 'wmt16' sets \['transforms'\]") as error:
        experiments.load(path)
    assert str(path) in str(error.value) and recipe in str(error.value)


def test_interpolate_on_the_synthetic_task_joins_its_single_sentences(tmp_path):
    from onmt_posenc.experiments.data_preparation import prepare_data
    from onmt_posenc.experiments.opennmt_config import run_config

    single = {"max_sentences": 1, "test_sentences": 1, "concat_sentences": 1, "train_examples": 30,
              "eval_examples": 7}
    loaded = experiments.load(experiment_file(tmp_path, data={"joined": {"synthetic": single, "interpolate": 3}}))
    setting = loaded.data["joined"]
    files = prepare_data(setting, tmp_path / "data")
    for name in ("valid", "test", "concat"):
        lines = read_lines(files["eval"][name].src)
        assert [line.split().count("<sep>") for line in lines] == [2, 2, 0]  # 7 sentences: 3 + 3 + 1
    config = run_config(loaded, loaded.runs[0], files)
    assert config["data"]["train"]["transforms"] == config["data"]["valid"]["transforms"] == ["concat_pairs"]
    assert config["concat_n"] == 3


def test_single_pairs_mixes_the_training_files_as_a_second_corpus(tmp_path):
    """INTERPOLATE with single_pairs: W trains on the joined corpus and on its single
    pairs, W of those per joined example; validation stays joined. onmt_build_vocab
    reads both, and the swapped evaluation takes its examples from the joined one."""
    from onmt_posenc.experiments.data_preparation import prepare_data
    from onmt_posenc.experiments.opennmt_config import SINGLE_PAIRS_CORPUS, run_config
    from onmt_posenc.experiments.store import run_dir

    single = {"max_sentences": 1, "test_sentences": 1, "concat_sentences": 1, "train_examples": 30,
              "eval_examples": 7}
    loaded = experiments.load(experiment_file(tmp_path, data={
        "joined": {"synthetic": single, "interpolate": 3, "single_pairs": 3}}), output=tmp_path / "out")
    setting = loaded.data["joined"]
    directory = run_dir(loaded, loaded.runs[0])
    directory.mkdir(parents=True)
    config = run_config(loaded, loaded.runs[0], prepare_data(setting, tmp_path / "data"))
    corpora = config["data"]
    assert corpora["train"]["transforms"] == corpora["valid"]["transforms"] == ["concat_pairs"]
    assert corpora[SINGLE_PAIRS_CORPUS]["transforms"] == [] and corpora[SINGLE_PAIRS_CORPUS]["weight"] == 3
    assert corpora["train"]["weight"] == 1
    assert corpora[SINGLE_PAIRS_CORPUS]["path_src"] == corpora["train"]["path_src"]
    (directory / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    run([command("onmt_build_vocab"), "-config", directory / "config.yaml", "-n_sample", "-1", "-dump_samples"])
    joined = read_lines(directory / "sample" / "train.sample.src")
    singles = read_lines(directory / "sample" / f"{SINGLE_PAIRS_CORPUS}.sample.src")
    assert [line.split().count("<sep>") for line in joined] == [2] * 10  # 30 pairs, 3 per example
    assert len(singles) == 30 and not any("<sep>" in line.split() for line in singles)
    assert [s for line in joined for s in " ".join(line.split()).split(" <sep> ")] == singles


def test_single_pairs_needs_interpolate(tmp_path):
    path = experiment_file(tmp_path, data={"plain": {"synthetic": {}, "single_pairs": 3}})
    with pytest.raises(experiments.ExperimentError, match="data.plain.single_pairs mixes single pairs into joined "
                                                          "ones: it needs interpolate"):
        experiments.load(path)


def test_warm_start_names_a_setting_and_a_run_made_before(tmp_path):
    single = {"max_sentences": 1, "test_sentences": 1, "concat_sentences": 1}
    grid = [{"data": ["plain"], "method": ["ape"]}, {"data": ["warm"], "method": ["ape", "shape"], "K": [10]}]
    path = experiment_file(tmp_path, data={"plain": {"synthetic": single},
                                           "warm": {"synthetic": single, "interpolate": 2, "warm_start": "plain"}},
                           grid=grid)
    for change, message in [
        ("data.warm.warm_start=plane", "data.warm.warm_start: 'plane' is not under data: ['plain', 'warm']"),
        ("data.warm.warm_start=warm", "data.warm.warm_start: a data setting cannot start from its own runs"),
        ("data.plain.warm_start=warm", "data.plain.warm_start: data.warm starts from another setting itself"),
        (None, "data.warm.warm_start: the run warm/shape-K10/seed1 starts from plain/shape-K10/seed1, which no "
               "grid line makes before it; add that run to an earlier grid line"),
        ("grid=[{data: [warm], method: [ape]}, {data: [plain], method: [ape]}]",
         "the run warm/ape/seed1 starts from plain/ape/seed1, which no grid line makes before it"),
    ]:
        with pytest.raises(experiments.ExperimentError, match=re.escape(message)):
            experiments.load(path, [change] if change else [])
    loaded = experiments.load(path, ["grid=[{data: [plain, warm], method: [ape]}]"])
    assert experiments.warm_start_source(loaded.data, loaded.runs[:1], loaded.runs[1], path).id == "plain/ape/seed1"
    # onmt_train builds a warm-started model from its source's options: a difference is refused
    with pytest.raises(experiments.ExperimentError, match=re.escape(
            "data.warm.settings.heads: the run warm/ape/seed1 starts from the weights of plain/ape/seed1 "
            "(data.warm.warm_start), but sets heads to 2, the source 8; model options must be the same")):
        experiments.check_options(experiments.load(path, ["grid=[{data: [plain, warm], method: [ape]}]",
                                                           "data.warm.settings.heads=2"]))
    # a model option set to its default on one side only, and how to load, are no difference
    experiments.check_options(experiments.load(path, ["grid=[{data: [plain, warm], method: [ape]}]",
                                                      "data.warm.settings.freeze_encoder=true",
                                                      "data.warm.settings.max_relative_positions=0"]))


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
                *warm[:-4], "--set", "data.warm.warm_start=null", *warm[-2:]], cwd=REPO)
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


def test_the_report_says_how_an_unfinished_run_goes_on(tmp_path):
    """A run with checkpoints but no record (training now, or killed without one) and one
    interrupted before the file changed: the Runs table says what `run` will do with each,
    in the runner's words, and the header counts them."""
    from onmt_posenc.experiments import report, report_runs, state
    from onmt_posenc.experiments.data_preparation import corpus_files
    from onmt_posenc.experiments.opennmt_config import run_config
    from onmt_posenc.experiments.store import data_dir, run_dir

    path = experiment_file(tmp_path, data={"small": {"synthetic": {"train_examples": 50}}},
                           grid={"method": ["ape", "shape", "rpe"], "K": [10], "seed": [1]})
    loaded = experiments.load(path, output=tmp_path / "out")
    ape, shape, _ = loaded.runs
    configs = {}
    for run, changes in ((ape, {}), (shape, {"dropout": [0.3]})):  # shape: made before the file changed
        directory = run_dir(loaded, run)
        directory.mkdir(parents=True)
        configs[run.id] = run_config(loaded, run, corpus_files(loaded.data[run.data], data_dir(loaded, run.data)))
        write_yaml(directory / "config.yaml", {**configs[run.id], **changes})
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


def test_shards_split_the_runs_without_overlap(tmp_path):
    runs = experiments.load(experiment_file(tmp_path)).runs
    parts = [experiments.shard(runs, i, 3) for i in (1, 2, 3)]
    assert sorted(r.id for part in parts for r in part) == sorted(r.id for r in runs)
    assert experiments.parse_shard("2/3") == (2, 3)
    for bad in ("0/3", "4/3", "x"):
        with pytest.raises(experiments.ExperimentError):
            experiments.parse_shard(bad)


@pytest.mark.parametrize("name, corpus, local_copy", [("demo.yaml", None, None), ("toy_ende.yaml", "toy-ende", TOY_ENDE),
                                                    ("multi30k.yaml", "multi30k", MULTI30K),
                                                    ("positions.yaml", None, None)])
def test_shipped_experiments_name_known_options_and_existing_files(tmp_path, name, corpus, local_copy):
    """Each shipped experiment loads on the data its own `prepare` command makes (from a local copy here),
    and every run's options pass the checks the runner makes before training (onmt_train's)."""
    from onmt_posenc.config.strict import known_option_names

    folder = None
    if corpus:
        folder = tmp_path / corpus
        run([command("onmt-posenc"), "prepare", corpus, folder, "--from", local_copy])
    loaded = experiments.load(REPO / "recipes" / "experiments" / name, data_folder=folder)
    for each in loaded.runs:
        assert set(each.config) <= known_option_names(), each.id
    experiments.check_options(loaded)
    assert set(loaded.translate) <= known_option_names()
    for setting in loaded.data.values():
        for pair in [setting.train, setting.valid, *setting.eval_sets.values()]:
            if pair is not None:  # synthetic data has no files before it is generated
                assert pair.src.is_file() and pair.tgt.is_file()


def test_data_folder_gives_every_data_setting_its_files(tmp_path):
    multi30k = REPO / "recipes" / "experiments" / "multi30k.yaml"
    folder = tmp_path / "m30k"
    with pytest.raises(experiments.ExperimentError, match=f"data folder {folder} does not exist") as error:
        experiments.load(multi30k, data_folder=folder)
    assert "onmt-posenc prepare" in str(error.value)
    folder.mkdir()
    with pytest.raises(experiments.ExperimentError, match="missing src-train.txt") as error:
        experiments.load(multi30k, data_folder=folder)
    assert "onmt-posenc prepare" in str(error.value)
    run([command("onmt-posenc"), "prepare", "multi30k", folder, "--from", MULTI30K])
    loaded = experiments.load(multi30k, data_folder=folder)
    assert loaded.output == Path("runs/multi30k-m30k")
    assert {label: s.kind for label, s in loaded.data.items()} == {
        "vanilla": "VANILLA", "extrapolate": "EXTRAPOLATE", "interpolate": "INTERPOLATE",
        "interpolate-warm": "INTERPOLATE", "vanilla-7k": "VANILLA", "vanilla-14k": "VANILLA"}
    assert loaded.data["interpolate-warm"].warm_start == "vanilla" and loaded.data["interpolate"].warm_start is None
    for setting in loaded.data.values():
        assert setting.train.src == folder.resolve() / "src-train.txt"
        assert setting.eval_sets["test"].ref == folder.resolve() / "ref-test.txt"  # raw text for BLEU
    assert loaded.data["vanilla"].eval_sets["concat"].join == 2
    assert loaded.data["interpolate"].eval_sets["concat"].join == 10
    (folder / "src-val.txt").write_text("")  # was: data.synthetic.eval.valid.lines must be a positive integer
    with pytest.raises(experiments.ExperimentError, match=f"data folder {folder.resolve()}: src-val.txt is empty"):
        experiments.load(multi30k, data_folder=folder)


def test_data_settings_put_their_transforms_on_the_right_corpora(tmp_path):
    """EXTRAPOLATE (filtertoolong on training only) and INTERPOLATE (concat_pairs on training
    and validation, every evaluation set joined) through the stock commands, on real files."""
    folder = tmp_path / "toy"
    folder.mkdir()
    for name, lines in [("train", 400), ("val", 21), ("test", 30)]:
        for side in ("src", "tgt"):
            head(TOY_ENDE / f"{side}-{name}.txt", folder / f"{side}-{name}.txt", lines)
    mapping = yaml.safe_load(DEMO.read_text())
    mapping["recipe"] = str(DEMO.parent / mapping["recipe"])
    mapping["data"] = {"short": {"folder": str(folder), "extrapolate": 12},
                       "joined": {"folder": str(folder), "interpolate": 3}}
    # SHAPE only where the speed column is read: three runs, not four
    mapping["grid"] = [{"data": ["short"], "method": ["ape"]}, {"data": ["joined"], "method": ["ape", "shape"]}]
    mapping["analyses"] = {"length_buckets": {"sets": ["test"], "width": 10}}
    path = write_yaml(tmp_path / "settings.yaml", mapping)
    output = tmp_path / "out"
    run([command("onmt-posenc"), "run", path, "--output", output, *overrides(SCALED_DOWN[:5])], cwd=REPO, timeout=LONG)

    train = {side: read_lines(folder / f"{side}-train.txt") for side in ("src", "tgt")}
    short = output / "short" / "ape" / "seed1"
    config = yaml.safe_load((short / "config.yaml").read_text())
    assert config["data"]["train"]["transforms"] == ["filtertoolong"]
    assert config["data"]["valid"]["transforms"] == []  # dev unchanged
    assert (config["src_seq_length"], config["tgt_seq_length"]) == (12, 14)
    kept = [s for s, t in zip(train["src"], train["tgt"]) if len(s.split()) <= 12 and len(t.split()) <= 12]
    assert 0 < len(kept) < len(train["src"])
    # what onmt_build_vocab saw, as tokens: its dump joins them with single spaces
    assert tokens(read_lines(short / "sample" / "train.sample.src")) == tokens(kept)
    assert json.loads((short / "result.json").read_text())["longest_training_source"] == max(
        len(line.split()) for line in kept)
    assert read_lines(output / "data" / "short" / "eval" / "test.src") == read_lines(folder / "src-test.txt")

    joined = output / "joined" / "ape" / "seed1"
    config = yaml.safe_load((joined / "config.yaml").read_text())
    assert config["data"]["train"]["transforms"] == ["concat_pairs"]
    assert config["data"]["valid"]["transforms"] == ["concat_pairs"]
    assert (config["concat_n"], config["concat_sep"]) == (3, "<sep>")
    assert tokens(read_lines(joined / "sample" / "train.sample.src")) == tokens(join_lines(train["src"], 3, "<sep>"))
    test_src = output / "data" / "joined" / "eval" / "test.src"
    assert read_lines(test_src) == join_lines(read_lines(folder / "src-test.txt"), 3, "<sep>")

    # A joined set's BLEU is sacreBLEU's on the same files with the separators removed (the
    # folder has no raw references: BLEU compares with the joined target file).
    result = json.loads((joined / "result.json").read_text())
    plain = {}
    for name, source in (("hyp", joined / "hyp" / "test.txt"), ("ref", output / "data" / "joined" / "eval" / "test.tgt")):
        plain[name] = tmp_path / f"{name}.plain"
        write_lines(plain[name], [" ".join(t for t in line.split() if t != "<sep>") for line in read_lines(source)])
    direct = float(run([command("sacrebleu"), plain["ref"], "-i", plain["hyp"], "-m", "bleu", "-b", "-w", "4"]).stdout)
    assert result["bleu"]["test"] == pytest.approx(direct, abs=1e-4)
    assert result["joined"]["test"]["lines"] == 10 and result["joined"]["test"]["sentences"] == 30
    assert "test" not in json.loads((short / "result.json").read_text())["joined"]

    # Training speed comes from onmt_train's own reports, in every run.
    speeds = {label: json.loads((output / "joined" / label / "seed1" / "result.json").read_text())["training_speed"]
              for label in ("ape", "shape")}
    assert all(s["tokens_per_second"] > 0 and s["reports"] >= 1 for s in speeds.values())
    # ... and whether it shared the machine, sampled at each report
    sharing = json.loads((output / "joined" / "ape" / "seed1" / "result.json").read_text())["device_sharing"]
    assert sharing["cores"] == os.cpu_count() and sharing["samples"] >= 1 and sharing["other_trainings"] >= 0
    report = (output / "report.md").read_text(encoding="utf-8")
    ratio = speeds["shape"]["tokens_per_second"] / speeds["ape"]["tokens_per_second"]
    row = next(line for line in report.splitlines() if line.startswith("| joined | INTERPOLATE | shape | 1 |"))
    assert row.endswith(f"| x{ratio:.2f} |")  # the BLEU table's speed column
    assert "## Joined sets" in report and "| joined/ape/seed1 | test | 10 |" in report
    assert "| hypothesis/reference length, by source length |" in report  # the length ratio per bucket


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
    assert "[1/3 synthetic/ape/seed1] train step 4/16" in result.stderr  # from OpenNMT-py's padded "Step  4/   16"
    assert "ETA" in result.stderr
    report = (output / "report.md").read_text(encoding="utf-8")
    headings = ["## The SHAPE paper's claims in this batch", "## BLEU and relative training speed",
                "## Hypothesis / reference length", "## Joined sets", "## BLEU and length by source length",
                "## Swapped evaluation", "## Shift invariance of the encoder", "## Token-level NLL",
                "## Position ablation", "## Training speed", "## Runs"]
    assert [report.index(h) for h in headings] == sorted(report.index(h) for h in headings)
    assert "| synthetic | EXTRAPOLATE | rpe | 1 |" in report
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
    row = claim_after_report()
    assert "training examples: APE 30.00 -> 21.00 (drop 9.00), SHAPE 30.00 -> 29.00 (drop 1.00)" in row
    assert row.endswith("| yes |")
    store("shape", "analyses/swapped.json", train={"applicable": True, "original": 30.0, "swapped": 22.0,
                                                   "drop": 8.0, "examples": 10})
    assert claim_after_report().endswith("| no |")
    store_curve("shape", falling)
    row = claim_after_report()
    assert row.endswith("| not measured |") and "synthetic/shape/seed1 (valid ppl 7.00 at step 12 -> 5.00" in row
    store_curve("shape", flat)
    store("ape", "analyses/swapped.json", train={"applicable": False, "examples": 10, "why": "not applicable: no sep"})
    row = claim_after_report()
    assert row.endswith("| not measured |") and "APE: not applicable: no sep" in row
    # The demo has no VANILLA data setting: that claim is not measured, not guessed.
    row = claims_row((copy / "report.md").read_text(encoding="utf-8"), "SHAPE's BLEU on VANILLA")
    assert row.endswith("| not measured |")


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
    assert "[2/3 synthetic/shape/seed1] interrupted before; going on" in result.stderr
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
    assert "[3/3 synthetic/rpe/seed1] interrupted before; going on" in result.stderr
    assert "[3/3 synthetic/rpe/seed1] train" not in result.stderr
    assert json.loads((stopped / "result.json").read_text())["status"] == "finished"


def test_resume_skips_checkpoints_cut_short(tmp_path):
    """A checkpoint whose save was killed does not load: it is removed and the one before is used."""
    import argparse

    import torch

    from onmt_posenc.experiments.run_checkpoints import newest_complete_checkpoint

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
    from onmt_posenc.experiments.run_checkpoints import keep_newest
    from onmt_posenc.experiments.store import saved_checkpoints

    for step in (250, 500, 750, 1000, 1250):  # 250-750 from the interrupted attempt
        (tmp_path / f"model_step_{step}.pt").write_bytes(b"x")
    kept = keep_newest(saved_checkpoints(tmp_path), 2)
    assert [p.name for p in kept] == ["model_step_1000.pt", "model_step_1250.pt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [p.name for p in kept]
    assert len(keep_newest(saved_checkpoints(tmp_path), -1)) == 2  # OpenNMT-py's -1: keep all


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
    assert "| synthetic | EXTRAPOLATE | ape | 1 |" in report


def test_vanilla_bleu_claim_uses_the_seed_spread_and_only_converged_runs(tmp_path):
    from onmt_posenc.experiments import claims

    loaded = experiments.load(experiment_file(tmp_path, grid={"method": ["ape", "shape"], "data": ["small"]}))
    converged = {"converged": True, "why": "test"}

    def record(method, seed, bleu, convergence=converged):
        config = {"shape_max_shift": 40} if method == "shape" else {}
        return {"id": f"small/{method}/seed{seed}", "status": "finished", "data": "small", "method": method,
                "label": method, "seed": seed, "bleu": {"test": bleu, "valid": bleu}, "config": config,
                "convergence": convergence}

    def row(records):
        return claims.vanilla_bleu(claims.Batch(loaded, records), "SHAPE", "paper")

    # three seeds each: 30.0 ± 1.0 vs 31.5 ± 1.0; 2 standard errors = 2 * sqrt(2/3) = 1.63 > 1.5
    ape = [record("ape", s, b) for s, b in ((1, 29.0), (2, 30.0), (3, 31.0))]
    shape = [record("shape", s, b) for s, b in ((1, 30.5), (2, 31.5), (3, 32.5))]
    result = row(ape + shape)
    assert result["held"] == "yes" and "31.50 ± 1.00 (3 seeds) vs 30.00 ± 1.00 (3 seeds) (+1.50" in result["measured"]
    assert "the same if within ±1.63, 2 standard errors of the seeds' spread" in result["measured"]
    # the same difference with seeds that agree closely is a real difference
    tight = [record("ape", s, b) for s, b in ((1, 29.9), (2, 30.0), (3, 30.1))]
    assert row(tight + [record("shape", s, b + 1.5) for s, b in ((1, 29.9), (2, 30.0), (3, 30.1))])["held"] == "no"
    # one seed each: within 1 BLEU
    assert row([ape[1], record("shape", 1, 30.9)])["held"] == "yes"
    assert row([ape[1], record("shape", 1, 31.1)])["held"] == "no"
    # a model that has not converged: no verdict, and the reason
    late = record("shape", 1, 30.2, {"converged": False, "why": "valid ppl 5.00 -> 4.50 (-10.0%)"})
    result = row([ape[1], late])
    assert result["held"] == "not measured" and "small/shape/seed1 (valid ppl 5.00 -> 4.50 (-10.0%))" in result["measured"]
    assert row([ape[1], {**late, "convergence": None}])["held"] == "not measured"  # results without a curve


def test_only_shaw_plays_the_papers_rpe_in_the_claims():
    """The claims compare SHAPE with the paper's baselines; the position lab's other
    relative methods (Music, T5 buckets, rotary, ALiBi) are not Shaw's RPE."""
    from onmt_posenc.experiments import claims_batch

    def role(config):
        return claims_batch.role_of({"method": "m", "config": config}, baseline="ape")

    assert role({"max_relative_positions": 16}) == role({"max_relative_positions": 16, "relative_attention": "shaw"}) == "RPE"
    assert role({"max_relative_positions": 16, "relative_attention": "music"}) is None
    assert role({"max_relative_positions": 128, "relative_positions_buckets": 32}) is None
    assert role({"max_relative_positions": -1}) is role({"max_relative_positions": -2}) is None
    assert role({"shape_max_shift": 20}) == "SHAPE"
    # SHAPE on one side is not the paper's SHAPE
    assert role({"shape_max_shift": 20, "src_position_encoding": "sinusoidal", "position_encoding": True}) is None


def test_the_perspe_papers_tables_name_the_methods_of_kftt_yaml(kftt_folder):
    """Each method of recipes/experiments/kftt.yaml plays the role its name says."""
    from onmt_posenc.experiments import claims_batch

    loaded = experiments.load(REPO / "recipes" / "experiments" / "kftt.yaml", data_folder=kftt_folder)
    roles = {run.label: claims_batch.role_of({"method": run.method, "config": run.config}, loaded.baseline)
             for run in loaded.runs if run.data == "vanilla"}
    assert roles == {"ape": "APE", "perspe": "perSPE", "perspe-token-dec": "SPE/perSPE-token",
                     "perspe-token-enc": "perSPE-token/SPE", "perspe-token-both": "perSPE-token/perSPE-token",
                     "nope-enc": "none/SPE", "nope-dec": "SPE/none", "nope": "none/none", "decay-dec": "SPE/decay",
                     "rpe": "RPE", "rpe-enc": "RPE/none", "rpe-dec": "none/RPE", "shape-K10": "SHAPE",
                     "shape-K40": "SHAPE", "shape-enc-K10": None, "shape-dec-K10": None}


def test_perspe_claims_judged_on_trained_models_with_the_seeds_spread(kftt_folder):
    from onmt_posenc.experiments import claims

    loaded = experiments.load(REPO / "recipes" / "experiments" / "kftt.yaml", data_folder=kftt_folder)
    configs = {run.label: run.config for run in loaded.runs if run.data == "vanilla"}
    converged = {"converged": True, "why": "test"}

    def record(label, seed, test):
        return {"id": f"vanilla/{label}/seed{seed}", "data": "vanilla", "method": label, "label": label,
                "seed": seed, "status": "finished", "bleu": {"valid": test, "test": test}, "convergence": converged,
                "config": configs[label]}

    records = [record("ape", seed, bleu) for seed, bleu in ((1, 10.0), (2, 10.4), (3, 9.6))]
    records += [record("perspe", seed, bleu) for seed, bleu in ((1, 10.5), (2, 10.1), (3, 10.9))]
    records += [record("nope-enc", 1, 4.0), record("nope-dec", 1, 9.9), record("decay-dec", 1, 9.7)]
    rows = {row["claim"]: row for row in claims.evaluate(loaded, records, {})}
    improves = rows["perSPE (target phrases, [-1, 1]) improves BLEU over SPE"]
    # +0.50 with a spread of 0.4 per method: within 2 standard errors (0.65), so not shown
    assert improves["held"] == "no" and "perSPE 10.50 ± 0.40 (3 seeds) vs APE 10.00 ± 0.40 (3 seeds)" in improves[
        "measured"]
    assert rows["No positions in the encoder collapses BLEU"]["held"] == "yes"
    assert rows["No positions in the decoder barely changes BLEU"]["held"] == "yes"
    assert rows["The decaying mask beats no positions in the decoder (trained)"]["held"] == "no"
    assert rows["Perturbing the encoder's positions hurts"]["held"] == "not measured"  # no such run
    records[3:6] = [record("perspe", seed, bleu) for seed, bleu in ((1, 11.5), (2, 11.1), (3, 11.9))]
    rows = {row["claim"]: row for row in claims.evaluate(loaded, records, {})}
    assert rows["perSPE (target phrases, [-1, 1]) improves BLEU over SPE"]["held"] == "yes"
    # a batch without these methods (the demo's) has none of these rows
    demo = experiments.load(DEMO)
    assert not any("perSPE" in row["claim"] for row in claims.evaluate(demo, [], {}))


def test_the_swapped_claim_uses_the_joined_setting_whose_models_write_separators(tmp_path):
    """Of two settings trained on joined sentences, one whose models do not write <sep>
    (the paper's joined-only training on a small corpus) does not hide the other."""
    from onmt_posenc.experiments import claims

    single = {"max_sentences": 1, "test_sentences": 1, "concat_sentences": 1}
    loaded = experiments.load(experiment_file(tmp_path, data={
        "joined": {"synthetic": single, "interpolate": 4},
        "mixed": {"synthetic": single, "interpolate": 4, "single_pairs": 4}}, grid={"method": ["ape", "shape"]}))
    from onmt_posenc.analysis.swapped import separators_why

    no_sep = {"applicable": False, "examples": 10, "wrong_separators": 0.9, "why": separators_why(0.9)}

    def record(data, method, swapped):
        return {"id": f"{data}/{method}/seed1", "data": data, "method": method, "label": method, "seed": 1,
                "status": "finished", "bleu": {}, "dir": str(tmp_path / data / method),
                "analyses": {"swapped": "swapped.json"}, "analysis_results": {"swapped": {"train": swapped}},
                "convergence": {"converged": True, "why": "test"},
                "config": {"shape_max_shift": 10} if method == "shape" else {}}

    def drop(value):
        return {"applicable": True, "original": 30.0, "swapped": 30.0 - value, "drop": value, "examples": 10}

    failing = [record("joined", "ape", no_sep), record("joined", "shape", no_sep)]
    row = claims.swapped(claims.Batch(loaded, failing), "paper")
    assert row["held"] == "not measured" and "joined (INTERPOLATE" in row["measured"]
    assert "APE: not applicable: 90% of the model's Original translations" in row["measured"]
    usable = [record("mixed", "ape", drop(9.0)), record("mixed", "shape", drop(1.0))]
    row = claims.swapped(claims.Batch(loaded, failing + usable), "paper")
    assert row["held"] == "yes" and row["measured"].startswith("mixed (INTERPOLATE")
    # wrong separators, but X1 found by alignment: judged on the aligned drops, and said so
    aligned = [record("joined-aligned", m, {**no_sep, "wrong_separators": share, "aligned": drop(value)})
               for m, share, value in (("ape", 0.9, 6.0), ("shape", 0.4, 5.0))]
    for r in aligned:
        r["data"] = "joined"
    row = claims.swapped(claims.Batch(loaded, aligned), "paper")
    assert row["held"] == "no"  # 5.0 is more than half of 6.0
    assert "X1 found by alignment (separators wrong on 90% of APE's and 40% of SHAPE's lines)" in row["measured"]
    assert "APE 30.00 -> 24.00 (drop 6.00), SHAPE 30.00 -> 25.00 (drop 5.00)" in row["measured"]


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


OPTION_MISTAKES = [
    ("methods.shape.shape_max_shif=3", "methods.shape.shape_max_shif: unknown option; did you mean 'shape_max_shift'?"),
    ("methods.shape.shape_max_shift=-3", "methods.shape.shape_max_shift: must be >= 0, got -3"),
    ("methods.shape.shape_max_shift=abc", "methods.shape.shape_max_shift: invalid int value: 'abc'"),
    ("methods.shape.shape_max_shift=1.5", "methods.shape.shape_max_shift: invalid int value: '1.5'"),
    ("methods.shape.shape_max_shift=true", "methods.shape.shape_max_shift: invalid int value: 'True'"),
    ("methods.shape.shape_max_shift=[1, 2]", "methods.shape.shape_max_shift: can't be set to a list"),
    ("settings.enc_layers=two", "settings.enc_layers: invalid int value: 'two'"),
    ("methods.rpe.relative_attention=musik", "methods.rpe.relative_attention: invalid choice: 'musik'"),
]


def test_every_runs_options_are_checked_before_the_first_run(tmp_path):
    """A mistake in any method stops `onmt-posenc run` in one line naming the file and key,
    before the first run (the demo's first method, APE, is fine) has started: the command
    on two mistakes, the same check in this process on the others."""
    for change, message in OPTION_MISTAKES[:2]:
        output = tmp_path / "out"
        result = run([command("onmt-posenc"), "run", DEMO, "--output", output, "--set", change], cwd=REPO,
                     expect_ok=False)
        assert result.returncode == 2
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0] == f"onmt-posenc run: error: {DEMO}: {message}"
        assert not output.exists()
    for change, message in OPTION_MISTAKES[2:]:
        with pytest.raises(experiments.ExperimentError) as error:
            experiments.check_options(experiments.load(DEMO, [change]))
        assert str(error.value).startswith(f"{DEMO}: {message}")


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


def test_broken_set_value_and_writing_over_an_input_stop_in_one_line(tmp_path):
    result = run([command("onmt-posenc"), "run", DEMO, "--set", "settings.dropout=[0.1"], cwd=REPO, expect_ok=False)
    assert result.returncode == 2
    assert result.stderr.strip() == (f"onmt-posenc run: error: {DEMO}: --set settings.dropout=[0.1: the value is "
                                     "not valid YAML (while parsing a flow sequence)")
    lines = tmp_path / "lines.txt"
    write_lines(lines, ["a", "b"])
    for args in (["join", lines, lines, "-n", "2"], ["split", lines, lines, "--source", tmp_path / "other.txt"]):
        result = run([command("onmt-posenc"), "interpolate", *args], expect_ok=False)
        assert result.returncode == 2 and read_lines(lines) == ["a", "b"]
        assert result.stderr.strip() == (f"onmt-posenc interpolate: error: the output {lines} is the input {lines}; "
                                         "name another output file")


def test_report_help_says_what_data_means_for_a_report():
    text = " ".join(run([command("onmt-posenc"), "report", "--help"]).stdout.split())
    assert "the folder given to `onmt-posenc run --data`, to report the runs made on it" in text


def test_data_files_are_checked_before_the_first_run(tmp_path):
    """Every data file of an experiment is present, UTF-8, not empty and paired line by
    line before anything trains; the error names the file, the data setting and the set
    (the command on one problem, the same check in this process on the others)."""
    from onmt_posenc.experiments.runner import check_data_files

    src, tgt = tmp_path / "train.src", tmp_path / "train.tgt"
    test_src, test_tgt = tmp_path / "test.src", tmp_path / "test.tgt"
    path = experiment_file(tmp_path, data={"real": {"train": {"src": str(src), "tgt": str(tgt)},
                                                    "eval": {"test": {"src": str(test_src), "tgt": str(test_tgt)}}}},
                           grid={"method": ["ape"]})

    def files():
        head(TOY_ENDE / "src-train.txt", src, 50)
        head(TOY_ENDE / "tgt-train.txt", tgt, 50)
        head(TOY_ENDE / "src-test.txt", test_src, 20)
        head(TOY_ENDE / "tgt-test.txt", test_tgt, 20)

    def not_utf8():
        lines = tgt.read_bytes().split(b"\n")
        lines[6] = b"ein caf\xe9"
        tgt.write_bytes(b"\n".join(lines))

    problems = [
        (lambda: head(TOY_ENDE / "tgt-train.txt", tgt, 49),
         f"data.real.train: {src} has 50 lines but {tgt} has 49; {src}:50 has no partner line"),
        (test_tgt.unlink, f"data.real.eval.test: {test_tgt} does not exist"),
        (lambda: test_src.write_text(""), f"data.real.eval.test: src {test_src} is empty"),
        (lambda: test_tgt.write_text(""), f"data.real.eval.test: tgt {test_tgt} is empty"),  # the key of the file
        (lambda: write_yaml(path, {**yaml.safe_load(path.read_text()), "data": {"real": {
            "train": {"src": str(src), "tgt": str(tgt)},
            "eval": {"test": {"src": str(test_src), "tgt": str(test_tgt), "lines": 30}}}}}),
         f"data.real.eval.test.lines: 30, but {test_src} has 20 lines; lower it, or leave it out for the whole file"),
        (not_utf8, f"data.real.train: {tgt}:7: not UTF-8 text (byte 0xe9: invalid continuation byte)"),
    ]
    files()
    problems[0][0]()
    output = tmp_path / "out"
    result = run([command("onmt-posenc"), "run", path, "--output", output], expect_ok=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == f"onmt-posenc run: error: {path}: {problems[0][1]}"
    assert not output.exists()
    for make, expected in problems[1:]:
        files()
        make()
        loaded = experiments.load(path)
        with pytest.raises(experiments.ExperimentError, match=None) as error:
            check_data_files(loaded, loaded.runs)
        assert str(error.value) == f"{path}: {expected}"


def test_onmt_posenc_commands_name_a_file_that_is_not_utf8(tmp_path):
    """`evaluate` reads hypotheses and references as UTF-8 text; a bad byte is one line
    naming the file and line (the same in every command that reads text files)."""
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    write_lines(ref, ["ein Haus", "zwei Hunde", "drei Katzen"])
    hyp.write_bytes(b"ein Haus\nzwei Hunde\ndrei Katz\xe9n\n")
    result = run([command("onmt-posenc"), "evaluate", "--hyp", hyp, "--ref", ref], expect_ok=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == (f"onmt-posenc evaluate: error: {hyp}:3: not UTF-8 text "
                                     "(byte 0xe9: invalid continuation byte)")


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


def test_report_plots_shapes_difference_by_training_pairs(tmp_path, kftt_folder):
    """Over VANILLA settings that differ in size: SHAPE minus APE, ± the seeds' standard error."""
    from onmt_posenc.experiments import report

    loaded = experiments.load(REPO / "recipes" / "experiments" / "kftt.yaml", output=tmp_path / "out",
                              data_folder=kftt_folder)
    wanted = {"vanilla-30k": {"ape": [5.0, 5.4], "shape-K10": [3.0, 3.2]}, "vanilla": {"ape": [8.0], "shape-K10": [7.5]},
              "vanilla-120k": {"ape": [11.0], "shape-K10": [10.9]}}
    records = []
    for run in loaded.runs:
        scores = wanted.get(run.data, {}).get(run.label)
        if scores and run.seed <= len(scores):
            bleu = scores[run.seed - 1]
            records.append({**runner.run_fields(run), "status": "finished", "bleu": {"valid": bleu, "test": bleu},
                            "bleu_signature": "tok:ja-mecab", "length_ratio": {"valid": 1.0, "test": 1.0},
                            "config": run.config, "convergence": {"converged": True, "why": "test"},
                            "dir": str(tmp_path / run.id), "analyses": {}})
        else:
            records.append({**runner.run_fields(run), "status": "missing", "dir": str(tmp_path / run.id)})
    text = report.write(loaded, records).read_text(encoding="utf-8")
    assert "## SHAPE's difference from APE by training data" in text
    section = text[text.index("## SHAPE's difference from APE by training data"):]
    rows = [line for line in section.splitlines() if line.startswith("| vanilla")]
    # smallest first; 30k: -2.10 ± sqrt(0.08/2 + 0.02/2) = 0.22
    assert rows[:3] == ["| vanilla-30k | 30,000 | 5.20 ± 0.28 | 3.10 ± 0.14 | -2.10 ± 0.22 |",
                        "| vanilla | 60,000 | 8.00 | 7.50 | -0.50 |",
                        "| vanilla-120k | 120,000 | 11.00 | 10.90 | -0.10 |"]
    assert (tmp_path / "out" / "plots" / "data_size.png").read_bytes()[:8] == PNG_MAGIC
