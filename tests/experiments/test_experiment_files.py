"""Experiment files and the commands' options: the grid, --set overrides, shards, the shipped
experiment files, option mistakes in any method stopping `run` before its first run, and
files that cannot be read."""
from pathlib import Path

import pytest
from conftest import MULTI30K, REPO, TOY_ENDE, command, run
from runner_helpers import DEMO, experiment_file

from onmt_posenc import experiments
from onmt_posenc.core.text import read_lines, write_lines


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


def test_a_run_names_the_grid_line_that_gives_its_seed_and_k(tmp_path):
    """A message about a run's seed or K names where it was set: grid, or grid[i] in a list."""
    one = experiments.load(experiment_file(tmp_path)).runs[0]
    assert one.sources["seed"] == "grid.seed"
    lines = experiments.load(experiment_file(tmp_path, grid=[{"method": ["ape"]}, {"method": ["shape"], "K": [10]}]))
    shape = next(r for r in lines.runs if r.method == "shape")
    assert (shape.sources["seed"], shape.sources["shape_max_shift"]) == ("grid[1].seed", "grid[1].K")
    assert next(r for r in lines.runs if r.method == "ape").sources["seed"] == "grid[0].seed"


def test_overrides_and_clear_errors(tmp_path):
    path = experiment_file(tmp_path)
    loaded = experiments.load(path, ["settings.train_steps=3", "grid.K=[5]"])
    assert {r.config["train_steps"] for r in loaded.runs} == {3}
    assert {r.shift for r in loaded.runs if r.method == "shape"} == {5}
    for change, message in [
        ({"grid": {"method": ["ape", "spe"]}}, "grid.method names 'spe'"),
        ({"grid": [{"method": ["ape"]}, {"method": ["spe"]}]}, r"grid\[1\]\.method names 'spe'"),
        ({"grid": [{"method": ["ape"]}, {"seed": [-1]}]}, r"grid\[1\]\.seed: must be >= 0, got -1"),
        ({"settings": {"save_model": "x"}}, "runner sets"),
        ({"grid": {"methd": ["ape"]}}, "unknown axes"),
        ({"analyses": {"swaped": {}}}, r"analyses: unknown analyses \['swaped'\]"),
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
        ({"data": {"d": {"synthetic": {}, "interpolate": 0}}}, "data.d.interpolate: must be >= 1, got 0"),
        # YAML's yes is no line count (it would keep one line)
        ({"data": {"f": {"train": {"src": "a", "tgt": "b", "lines": True}, "eval": {"t": {"src": "a", "tgt": "b"}}}}},
         "data.f.train.lines: must be an integer, got true"),
        ({"data": {"d": {"synthetic": {}, "interpolate": 3, "extrapolate": 9}}}, "not both"),
        ({"methods": {"ape": {}, "shape": {"shape_max_shift": 9}}, "grid": {"method": ["ape", "shape"], "K": [10]}},
         "methods.shape sets shape_max_shift, which grid.K overrides"),
        ({"settings": {"train_steps": 10, "shape_max_shift": 9}}, "settings sets shape_max_shift, which grid.K overrides"),
        ({"data": {"d": {"synthetic": {}, "interpolate": 4}}}, "synthetic task already joins several"),
        ({"data": {"d": {"synthetic": {}}, "f": {"train": {"src": "a", "tgt": "b"}, "eval": {"t": {"src": "a", "tgt": "b"}}}}},
         r"share no evaluation set"),
        ({"analyses": {"swapped": {"set": "concat"}},
          "data": {"d": {"synthetic": {}}, "f": {"train": {"src": "a", "tgt": "b"},
                                                 "eval": {"valid": {"src": "a", "tgt": "b"}}}},
          "evaluation": {"sets": ["valid"]}}, r"analyses.swapped names \['concat'\], which data.f has no eval set"),
        ({"settings": {"keep_checkpoint": 2}, "evaluation": {"average_last": 3}},
         r"evaluation.average_last: 3 checkpoints, but settings.keep_checkpoint keeps only 2"),
        # long inputs: joined sets with a plain space, joined training examples
        ({"data": {"d": {"synthetic": {}, "joined_sets": [2]}}}, r"a synthetic data setting has no files; remove "
                                                                  r"\['joined_sets'\]"),
        ({"data": {"f": {"train": {"src": "a", "tgt": "b"}, "eval": {"t": {"src": "a", "tgt": "b"}},
                         "interpolate": 3, "joined_sets": [2]}}}, "interpolate joins every evaluation set with <sep>"),
        ({"data": {"f": {"train": {"src": "a", "tgt": "b"}, "joined_sets": [2],
                         "eval": {"t": {"src": "a", "tgt": "b"}, "t-join2": {"src": "a", "tgt": "b"}}}}},
         r"data.f.joined_sets makes the sets \['t-join2'\], which eval names already"),
        ({"data": {"f": {"train": {"src": "a", "tgt": "b"}, "joined_sets": [1],
                         "eval": {"t": {"src": "a", "tgt": "b"}}}}}, r"data.f.joined_sets\[0\]: must be >= 2, got 1"),
        ({"data": {"f": {"train": {"src": "a", "tgt": "b"}, "eval": {"t": {"src": "a", "tgt": "b", "joint": "space"}}}}},
         "data.f.eval.t.joint: space joins nothing without join: N"),
        ({"data": {"f": {"train": {"src": "a", "tgt": "b"}, "eval": {"t": {"src": "a", "tgt": "b", "joint": "tab"}}}}},
         "data.f.eval.t.joint"),
        ({"data": {"d": {"synthetic": {}, "interpolate": 3, "join_training": 2}}},
         "choose join_training .* or interpolate .*, not both"),
        ({"settings": {"join_adjacent_max": 3}}, r"settings sets \['join_adjacent_max'\], which no transform of "
                                                 r"data.small \(VANILLA\) reads: .* declare `join_training: N`"),
        ({"settings": {"transforms": ["join_adjacent"]}}, "declare `join_training: N` on a data setting"),
    ]:
        with pytest.raises(experiments.ExperimentError, match=message) as error:
            experiments.load(experiment_file(tmp_path, **change))
        assert str(path) in str(error.value)


def test_an_experiment_file_includes_another_and_replaces_whole_keys(tmp_path):
    """`include:` reads the other file first; each top-level key of the including file replaces
    the included one's whole. Relative paths stay relative to the file that gives them, and a
    mistake in an included key is reported at that file's line."""
    base = experiment_file(tmp_path)  # tmp_path/experiment.yaml: methods ape, shape, rpe; data small, long
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "only-ape.yaml").write_text("include: ../experiment.yaml\nname: only-ape\n"
                                       "grid: {method: [ape], data: [small]}\n", encoding="utf-8")
    loaded = experiments.load(sub / "only-ape.yaml")
    assert loaded.name == "only-ape" and [r.id for r in loaded.runs] == ["small/ape/seed1"]
    assert loaded.runs[0].config["train_steps"] == 10  # settings and the recipe's path from the included file
    assert loaded.runs[0].config["heads"] == 8
    assert set(experiments.load(base).data) == set(loaded.data)
    (sub / "bad.yaml").write_text("include: ../broken.yaml\ngrid: {method: [ape]}\n", encoding="utf-8")
    (tmp_path / "broken.yaml").write_text("methods:\n  ape: {}\ndata:\n  d:\n    synthetic: {}\n    extrapolate: 0\n",
                                          encoding="utf-8")
    with pytest.raises(experiments.ExperimentError,
                       match=f"{tmp_path / 'broken.yaml'}:6: data.d.extrapolate: must be >= 1"):
        experiments.load(sub / "bad.yaml")
    (tmp_path / "loop.yaml").write_text("include: loop.yaml\n", encoding="utf-8")
    with pytest.raises(experiments.ExperimentError, match="include cycle"):
        experiments.load(tmp_path / "loop.yaml")
    (tmp_path / "missing.yaml").write_text("include: nowhere.yaml\n", encoding="utf-8")
    with pytest.raises(experiments.ExperimentError, match="include: cannot read experiment file"):
        experiments.load(tmp_path / "missing.yaml")


def test_evaluation_sets_are_those_of_the_data_settings_the_grid_uses(tmp_path):
    """A data setting that no grid line uses does not decide the BLEU table's columns."""
    files = {"src": str(TOY_ENDE / "src-val.txt"), "tgt": str(TOY_ENDE / "tgt-val.txt")}
    data = {"unused": {"train": files, "eval": {"test": files}},
            "used": {"train": files, "eval": {"dev": files, "test": files}}}
    loaded = experiments.load(experiment_file(tmp_path, data=data, grid={"data": ["used"], "method": ["ape"]}))
    assert loaded.eval_sets == ["dev", "test"]


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
                                                    ("multi30k_extrapolate.yaml", "multi30k", MULTI30K),
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
