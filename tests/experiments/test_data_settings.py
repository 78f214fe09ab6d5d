"""An experiment file's data settings: data folders and generated tasks, EXTRAPOLATE and
INTERPOLATE through the stock commands on real corpora, single pairs mixed in, warm starts
named, target phrases made once, data files checked before the first run."""
import itertools
import json
import os
import re
import sys
from pathlib import Path

import pytest
import yaml
from conftest import MULTI30K, REPO, TEST_DATA, TOY_ENDE, command, head, run, write_yaml
from runner_helpers import DEMO, LONG, SCALED_DOWN, experiment_file, overrides

from onmt_posenc import experiments
from onmt_posenc.core.joining import join_lines
from onmt_posenc.core.text import read_lines, write_lines


# The demo's training scaled down (SCALED_DOWN's first five), on each test's real files, and its
# outputs cut at 30 tokens as SCALED_DOWN's: after 16 updates a model writes on to the demo's
# max_length (150) on many lines, with beam 4 (translating took two thirds of a run's time);
# nothing here depends on how long a hypothesis is.
SHORT_RUNS = [*SCALED_DOWN[:5], "evaluation.translate.max_length=30"]


def tokens(lines):
    return [line.split() for line in lines]


def toy_folder_and_demo(tmp_path):
    """A folder of real toy-ende lines in OpenNMT-py's layout (400 training pairs, 21 valid, 30
    test), and the demo experiment's mapping to point at it."""
    folder = tmp_path / "toy"
    folder.mkdir()
    for name, lines in [("train", 400), ("val", 21), ("test", 30)]:
        for side in ("src", "tgt"):
            head(TOY_ENDE / f"{side}-{name}.txt", folder / f"{side}-{name}.txt", lines)
    mapping = yaml.safe_load(DEMO.read_text())
    mapping["recipe"] = str(DEMO.parent / mapping["recipe"])
    return folder, mapping


def test_data_folder_names_the_generated_tasks_setting(tmp_path):
    """`--data DIR` on the demo: its setting of the generated task reads DIR, and is named after it."""
    folder = tmp_path / "my-corpus"
    folder.mkdir()
    for name in experiments.FOLDER_FILES:
        head(TOY_ENDE / name, folder / name, 20)
    loaded = experiments.load(DEMO, data_folder=folder)
    assert list(loaded.data) == ["my-corpus"] and loaded.runs[0].id == "my-corpus/ape/seed1"
    assert loaded.name == "demo-my-corpus" and loaded.data["my-corpus"].kind == "EXTRAPOLATE"


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


def test_a_data_settings_keys_concern_only_its_own_runs(tmp_path):
    loaded = experiments.load(experiment_file(tmp_path, data={
        "short": {"synthetic": {}, "extrapolate": 20},
        "plain": {"synthetic": {}, "settings": {"label_smoothing": 0.2}}}))
    configs = {run.data: run.config for run in loaded.runs if run.method == "ape" and run.seed == 1}
    assert configs["plain"]["label_smoothing"] == 0.2 and configs["short"]["label_smoothing"] != 0.2


@pytest.mark.parametrize("recipe", ["shape_interpolate.yaml", "ape_extrapolate.yaml"])
def test_a_recipe_whose_corpora_have_transforms_is_refused(tmp_path, recipe):
    """The runner replaces the recipe's corpora; their transforms would be lost without a word."""
    path = experiment_file(tmp_path, recipe=str(REPO / "recipes" / recipe))
    with pytest.raises(experiments.ExperimentError, match=r"corpus 'wmt16' sets \['transforms'\]") as error:
        experiments.load(path)
    assert str(path) in str(error.value) and recipe in str(error.value)


def test_data_settings_put_their_transforms_on_the_right_corpora(tmp_path):
    """EXTRAPOLATE (filtertoolong on training only) and INTERPOLATE (concat_pairs on training
    and validation, every evaluation set joined) through the stock commands, on real files."""
    folder, mapping = toy_folder_and_demo(tmp_path)
    mapping["data"] = {"short": {"folder": str(folder), "extrapolate": 12},
                       "joined": {"folder": str(folder), "interpolate": 3}}
    # SHAPE only where the speed column is read: three runs, not four
    mapping["grid"] = [{"data": ["short"], "method": ["ape"]}, {"data": ["joined"], "method": ["ape", "shape"]}]
    mapping["analyses"] = {"length_buckets": {"sets": ["test"], "width": 10}}
    path = write_yaml(tmp_path / "settings.yaml", mapping)
    output = tmp_path / "out"
    run([command("onmt-posenc"), "run", path, "--output", output, *overrides(SHORT_RUNS)], cwd=REPO, timeout=LONG)

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
    convergence = json.loads((output / "joined" / "shape" / "seed1" / "result.json").read_text()).get("convergence")
    seeds = "1" if (convergence or {}).get("converged") is True else "1 (none converged)"  # an unconverged run, marked
    row = next(line for line in report.splitlines() if line.startswith(f"| joined | INTERPOLATE | shape | {seeds} |"))
    assert row.endswith(f"| x{ratio:.2f} |")  # the BLEU table's speed column
    assert "## Joined sets" in report and "| joined/ape/seed1 | test | 10 |" in report
    assert "| hypothesis/reference length, by source length |" in report  # the length ratio per bucket


def test_joined_training_and_long_sets_without_a_separator(tmp_path):
    """EXTRAPOLATE's remedy (join_training: adjacent capped pairs joined with a plain space in
    training) and the long evaluation sets (joined_sets: k test sentences per line, a plain
    space between), through the stock commands on real files; the length analysis scores
    every bucket of every set with its teacher-forced NLL."""
    folder, mapping = toy_folder_and_demo(tmp_path)
    mapping["data"] = {"short-joined": {"folder": str(folder), "extrapolate": 12, "join_training": 3,
                                        "joined_sets": [2, 3]}}
    mapping["grid"] = {"method": ["ape"]}
    mapping["evaluation"] = {"sets": ["valid", "test", "test-join2", "test-join3"]}
    mapping["analyses"] = {"length_buckets": {"sets": ["test", "test-join2"], "width": 10}}
    path = write_yaml(tmp_path / "joined.yaml", mapping)
    output = tmp_path / "out"
    run([command("onmt-posenc"), "run", path, "--output", output, *overrides(SHORT_RUNS)], cwd=REPO, timeout=LONG)

    directory = output / "short-joined" / "ape" / "seed1"
    config = yaml.safe_load((directory / "config.yaml").read_text())
    assert config["data"]["train"]["transforms"] == ["filtertoolong", "join_adjacent"]
    assert config["data"]["valid"]["transforms"] == []  # validation on single pairs
    assert config["join_adjacent_max"] == 3
    train = {side: read_lines(folder / f"{side}-train.txt") for side in ("src", "tgt")}
    kept = [s for s, t in zip(train["src"], train["tgt"]) if len(s.split()) <= 12 and len(t.split()) <= 12]
    # the vocabulary and the sample come from the single capped pairs; the longest example the
    # transform can join (1 to 3 adjacent kept pairs, stopping before a dropped one) is what the
    # buckets call seen
    assert tokens(read_lines(directory / "sample" / "train.sample.src")) == tokens(kept)
    result = json.loads((directory / "result.json").read_text())
    keeps = [len(s.split()) <= 12 and len(t.split()) <= 12 for s, t in zip(train["src"], train["tgt"])]
    longest = {}
    for side, key in (("source", "src"), ("target", "tgt")):
        runs = []
        for start in range(len(keeps)):
            members = list(itertools.takewhile(lambda i: keeps[i], range(start, min(start + 3, len(keeps)))))
            runs += [sum(len(train[key][i].split()) for i in members)] if members else []
        longest[side] = max(runs)
    assert longest["source"] > max(len(line.split()) for line in kept)  # a join is longer than any pair
    assert result["longest_training_example"] == longest
    assert result["longest_training_source"] == longest["source"]
    assert json.loads((directory / "analyses" / "length_buckets.json").read_text())["test"]["max_train_length"] == \
        longest["source"]
    test = read_lines(folder / "src-test.txt")
    for k in (2, 3):
        joined = read_lines(output / "data" / "short-joined" / "eval" / f"test-join{k}.src")
        assert joined == [" ".join(" ".join(test[i:i + k]).split()) for i in range(0, len(test), k)]
        assert "<sep>" not in " ".join(joined).split()
        assert result["evaluation"]["sets"][f"test-join{k}"]["joint"] == "space"
        assert result["bleu"][f"test-join{k}"] >= 0 and f"test-join{k}" not in result["joined"]
    assert "joint" not in result["evaluation"]["sets"]["test"]
    buckets = json.loads((directory / "analyses" / "length_buckets.json").read_text())
    for name in ("test", "test-join2"):
        scores = buckets[name]
        assert sum(scores["counts"]) == (30 if name == "test" else 15)
        for key in ("bleu", "brevity_penalty", "precisions", "chrf", "length_ratio", "nll"):
            assert len(scores[key]) == len(scores["buckets"]), key
        assert all(nll > 0 for nll in scores["nll"]) and scores["nll_all"] > 0
    report = (output / "report.md").read_text(encoding="utf-8")
    assert "### short-joined / test-join2" in report and "| NLL of a gold token, by source length |" in report


def test_train_sample_draws_the_same_random_pairs_in_file_order(tmp_path):
    from onmt_posenc.experiments.running.data_preparation import corpus_files, prepare_data

    files = {"src": str(TOY_ENDE / "src-val.txt"), "tgt": str(TOY_ENDE / "tgt-val.txt")}
    data = {"matched": {"train": files, "eval": {"test": files}, "train_sample": 50}}
    setting = experiments.load(experiment_file(tmp_path, data=data)).data["matched"]
    made = [prepare_data(setting, tmp_path / f"data{i}") for i in (1, 2)]
    whole = {side: read_lines(TOY_ENDE / f"{side}-val.txt") for side in ("src", "tgt")}
    src, tgt = (read_lines(path) for path in made[0]["train"])
    assert len(src) == len(tgt) == 50 and read_lines(made[1]["train"][0]) == src  # the same draw twice
    numbers = [whole["src"].index(line) for line in src]
    assert numbers == sorted(numbers) and numbers != list(range(50))  # in file order, not the first 50
    assert [whole["tgt"][i] for i in numbers] == tgt  # still pairs
    assert corpus_files(setting, tmp_path / "data1")["train"] == made[0]["train"]
    for extra, message in (({"train_pairs": 10}, "train_pairs and train_sample both cut"),
                           ({"train_sample": 10**6}, None)):
        data["matched"].update(extra)
        if message:
            with pytest.raises(experiments.ExperimentError, match=message):
                experiments.load(experiment_file(tmp_path, data=data))
            del data["matched"]["train_pairs"]
        else:
            with pytest.raises(ValueError, match=r"train_sample: 1000000 pairs, but .*src-val.txt has 1000 lines"):
                prepare_data(experiments.load(experiment_file(tmp_path, data=data)).data["matched"], tmp_path / "d3")


def test_interpolate_on_the_synthetic_task_joins_its_single_sentences(tmp_path):
    from onmt_posenc.experiments.running.data_preparation import prepare_data
    from onmt_posenc.experiments.running.opennmt_config import run_config

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
    from onmt_posenc.experiments.running.data_preparation import prepare_data
    from onmt_posenc.experiments.running.opennmt_config import SINGLE_PAIRS_CORPUS, run_config
    from onmt_posenc.experiments.running.store import run_dir

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


def test_target_phrases_are_made_once_and_used_without_the_chunker(tmp_path, monkeypatch):
    """perSPE's phrase file is made by MeCab once per training target; a run given the made
    file (a GPU machine the data was carried to) does not import the chunker."""
    from onmt_posenc.experiments.running.data_preparation import prepare_phrases

    target = head(TEST_DATA / "small_parallel_enja" / "train.ja", tmp_path / "train.tgt", 5)
    said = []
    phrases = prepare_phrases({"train": (None, target)}, tmp_path, said.append)
    assert len(read_lines(phrases)) == 5 and len(said) == 1
    monkeypatch.setitem(sys.modules, "MeCab", None)  # importing it fails
    assert prepare_phrases({"train": (None, target)}, tmp_path, said.append) == phrases and len(said) == 1
    write_lines(target, ["別の文です"])  # another target: the file is made again, with the chunker
    with pytest.raises(ImportError):
        prepare_phrases({"train": (None, target)}, tmp_path, said.append)


def test_target_phrases_made_by_another_chunker_version_are_made_again(tmp_path, monkeypatch):
    """A phrase file keyed on its target alone outlived chunker fixes (eb9b114's empty lines):
    the chunker's version is part of the key."""
    from onmt_posenc.data import chunk_japanese
    from onmt_posenc.experiments.running.data_preparation import prepare_phrases

    target = tmp_path / "train.tgt"
    write_lines(target, ["今日 は 晴れ です", ""])
    said = []
    monkeypatch.setattr(chunk_japanese, "CHUNKER_VERSION", chunk_japanese.CHUNKER_VERSION - 1)
    phrases = prepare_phrases({"train": (None, target)}, tmp_path, said.append)
    phrases.write_text("stale\nstale\n", encoding="utf-8")  # what the older chunker wrote
    assert prepare_phrases({"train": (None, target)}, tmp_path, said.append) == phrases and len(said) == 1
    assert read_lines(phrases) == ["stale", "stale"]  # same version: kept
    monkeypatch.undo()
    assert prepare_phrases({"train": (None, target)}, tmp_path, said.append) == phrases and len(said) == 2
    assert read_lines(phrases) == ["0 0 1 1", "0"]


def test_data_files_are_checked_before_the_first_run(tmp_path):
    """Every data file of an experiment is present, UTF-8, not empty and paired line by
    line before anything trains; the error names the file, the data setting and the set
    (the command on one problem, the same check in this process on the others)."""
    from onmt_posenc.experiments.running.runner import check_data_files

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
        (lambda: write_yaml(path, {**yaml.safe_load(path.read_text()), "data": {"real": {
            "train": {"src": str(src), "tgt": str(tgt)}, "train_pairs": 60,
            "eval": {"test": {"src": str(test_src), "tgt": str(test_tgt)}}}}}),
         f"data.real.train.lines or train_pairs: 60, but {src} has 50 lines; lower it, or leave it out for the "
         "whole file"),
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


def test_the_longest_joined_example_is_the_longest_run_of_kept_adjacent_pairs():
    """join_adjacent's examples: a kept pair and up to N - 1 kept pairs after it, stopping before
    the first the filter drops (which starts none), and at the end of the file; each side's
    longest apart. filtertoolong keeps at most src_seq_length source tokens and tgt_seq_length - 2
    target tokens."""
    from onmt_posenc.experiments.running.data_preparation import longest_adjacent_runs

    src = [3, 4, 9, 2, 2, 5, 1]  # the third pair is too long: dropped
    tgt = [1, 6, 1, 6, 1, 1, 7]
    joined, singles = longest_adjacent_runs(src, tgt, 3, (5, 9))  # at most 5 source, 7 target tokens
    assert singles == {"source": 5, "target": 7}
    # sources: 3+4 (stopped by the dropped pair), 2+2+5 = 9, 5+1; targets: 6+1+1 = 8, 1+1+7 = 9
    assert joined == {"source": 9, "target": 9}
    assert longest_adjacent_runs(src, tgt, 1, (5, 9))[0] == singles
    assert longest_adjacent_runs(src, tgt, 2, None)[0] == {"source": 13, "target": 8}  # nothing dropped
