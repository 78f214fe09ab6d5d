"""Bad input to `onmt-posenc run` and `onmt-posenc report`.

A mistake in an experiment file (or a --set) stops `onmt-posenc run` in one line,
`onmt-posenc run: error: FILE: where.key: what is wrong`, with exit status 2, before
anything trains. A stored result that the report cannot use (result.json or an
analysis file edited or cut short) is marked in the Runs table and left out of the
other tables; the report is written all the same. Nothing here trains a model."""
import json
import re

import pytest
from conftest import REPO, TOY_ENDE, command, head, run, write_yaml

from onmt_posenc import experiments
from onmt_posenc.experiments.running.data_preparation import corpus_files
from onmt_posenc.experiments.running.opennmt_config import run_config
from onmt_posenc.experiments.running.state import evaluation_of
from onmt_posenc.experiments.running.store import data_dir, run_dir, run_fields, write_json


def experiment_file(tmp_path, **changes):
    """Two runs (APE and RPE) on a few lines of toy-ende, every analysis asked for, and
    beside it the recipes that the cases below name."""
    folder = tmp_path / "toy-ende"
    if not folder.is_dir():
        folder.mkdir()
        for name in experiments.FOLDER_FILES:
            head(TOY_ENDE / name, folder / name, 20)
    (tmp_path / "bad-syntax.yaml").write_text("heads: 4\nlayers: [\n", encoding="utf-8")
    (tmp_path / "a-list.yaml").write_text("- heads: 4\n", encoding="utf-8")
    (tmp_path / "includes-missing.yaml").write_text("include: missing.yaml\n", encoding="utf-8")
    (tmp_path / "latin1.yaml").write_bytes(b"heads: 4\n# caf\xe9\n")
    (tmp_path / "stops-early.yaml").write_text(f"include: {REPO / 'recipes' / 'base.yaml'}\nearly_stopping: 4\n",
                                               encoding="utf-8")
    mapping = {
        "recipe": str(REPO / "recipes" / "base.yaml"),
        "settings": {"train_steps": 10, "hidden_size": 64, "word_vec_size": 64},
        "methods": {"ape": {}, "rpe": {"position_encoding": False, "max_relative_positions": 16}},
        "data": {"toy": {"folder": str(folder)}},
        "analyses": {name: {} for name in experiments.ANALYSES},
        **changes,
    }
    return write_yaml(tmp_path / "experiment.yaml", mapping)


# --set overrides, and the error after "FILE: " ({dir}: the experiment file's folder)
MISTAKES = [
    # R2, R3: a recipe that is not YAML, not a mapping, or includes a missing file
    (["recipe=bad-syntax.yaml"],
     "recipe: {dir}/bad-syntax.yaml:3: not valid YAML (expected the node content, but found '<stream end>')"),
    (["recipe=a-list.yaml"], "recipe: {dir}/a-list.yaml: a config file must be a YAML mapping"),
    (["recipe=includes-missing.yaml"],
     "recipe: config file not found: {dir}/missing.yaml (included from {dir}/includes-missing.yaml)"),
    (["recipe=latin1.yaml"], "recipe: {dir}/latin1.yaml:2: not UTF-8 text (byte 0xe9: invalid continuation byte)"),
    # R4, R5: names and paths that YAML reads as numbers or lists
    (["recipe=5"], "recipe: must be a non-empty string, got 5"),
    (["data.toy.folder=5"], "data.toy.folder: must be a non-empty string, got 5"),
    (["name=5"], "name: must be a non-empty string, got 5"),
    (["output=5"], "output: must be a non-empty string, got 5"),
    (["output=[x]"], "output: must be a non-empty string, got [x]"),
    # R6: a list where a name belongs
    (["grid.method=[[ape]]"], "grid.method: must be names, got [ape]"),
    (["baseline=[ape]"], "baseline: must be a non-empty string, got [ape]"),
    (["analyses.swapped.set=[valid]"], "analyses.swapped.set: must be a non-empty string, got [valid]"),
    # R7: analysis options, checked before the first run rather than after the last
    (["settings.train_steps=-5"], "settings.train_steps: must be >= 1, got -5"),  # onmt_train: without end
    # onmt_train's config parser drops a key without a value: 100,000 updates
    (["settings.train_steps="], "settings.train_steps: has no value: give it one, or remove the line to use the default"),
    # `=null` removes a key the file sets; one it does not set is most likely misspelt
    (["settings.train_step=null"], "--set settings.train_step=null: the file sets no settings.train_step to unset"),
    (["analyses.length_buckets.width=0"], "analyses.length_buckets.width: must be >= 1, got 0"),
    (["analyses.length_buckets.width=-3"], "analyses.length_buckets.width: must be >= 1, got -3"),
    (["analyses.shift_invariance.offsets=[0]"], "analyses.shift_invariance.offsets: must be a list of two or more "
                                                "different integers >= 0 (offsets compared with each other), got [0]"),
    (["analyses.shift_invariance.offsets=[0, -5]"], "analyses.shift_invariance.offsets: must be a list of two or more "
                                                    "different integers >= 0 (offsets compared with each other), "
                                                    "got [0, -5]"),
    (["analyses.shift_invariance.offsets=[5, 5]"], "analyses.shift_invariance.offsets: must be a list of two or more "
                                                   "different integers >= 0 (offsets compared with each other), "
                                                   "got [5, 5]"),
    (["analyses.shift_invariance.sentences=0"], "analyses.shift_invariance.sentences: must be >= 1, got 0"),
    (["analyses.position_ablation.sentences=abc"], "analyses.position_ablation.sentences: must be an integer, got abc"),
    (["analyses.token_nll.position_width=0"], "analyses.token_nll.position_width: must be >= 1, got 0"),
    (["analyses.token_nll.frequency_bins=true"], "analyses.token_nll.frequency_bins: must be an integer, got true"),
    (["analyses.swapped.train_examples=-1"], "analyses.swapped.train_examples: must be >= 0, got -1"),
    (["analyses.swapped.sep=a b"], "analyses.swapped.sep: must be one token (a string without spaces), got a b"),
    # X5: one name where a list belongs
    (["analyses.length_buckets.sets=test"], "analyses.length_buckets.sets: must be a non-empty list of names, got test"),
    (["evaluation.sets=valid"], "evaluation.sets: must be a non-empty list of names, got valid"),
    # R8: onmt_translate's keys, through its own parser
    (["evaluation.translate.beam_size=abc"], "evaluation.translate.beam_size: invalid int value: 'abc'"),
    (["evaluation.translate.no_such_opt=1"], "evaluation.translate.no_such_opt: unknown option"),
    (["evaluation.translate.train_steps=5"], "evaluation.translate.train_steps: not an onmt_translate option"),
    (["evaluation.translate.src=x.txt"], "evaluation.translate sets ['src'], which the runner sets for every translation"),
    # R9: a seed that grid.seed would override; a method that no grid line uses
    (["settings.seed=abc"], "settings.seed: each run's seed is set by grid.seed (default [1]); list the seeds there"),
    (["methods.rpe.seed=3"], "methods.rpe.seed: each run's seed is set by grid.seed (default [1]); list the seeds there"),
    (["settings.early_stopping=4"], "settings.early_stopping: the runner trains every run to train_steps and the "
                                    "report judges its plateau from the validation curve; a run stopped early would "
                                    "be taken for an unfinished one. Set train_steps to where the curve flattens "
                                    "instead"),
    (["recipe=stops-early.yaml"], "recipe stops-early.yaml.early_stopping: the runner trains every run to "
                                  "train_steps and the report judges its plateau from the validation curve; a run "
                                  "stopped early would be taken for an unfinished one. Set train_steps to where the "
                                  "curve flattens instead"),
    (["methods.foo.bar=1"], "methods.foo.bar: unknown option"),
    # phrase-level perSPE chunks Japanese targets: refused on German, not phrases made of nonsense
    (["methods.foo.perspe_range=1"], "methods.foo.perspe_range: phrase-level perSPE (perspe_unit: phrase, the default) "
                                     "perturbs the phrases `onmt-posenc chunk-ja` finds in each Japanese training "
                                     "target line, but data.toy has a target that is not Japanese (no kana in the "
                                     "first lines of {dir}/toy-ende/tgt-train.txt); set perspe_unit: token"),
    (["methods.foo.max_relative_positions=abc", "grid.method=[ape, rpe]"],
     "methods.foo.max_relative_positions: invalid int value: 'abc'"),
    # the synthetic task's parameters: types and ranges, unknown keys (YAML's `{seed:1}` is one key)
    (["data.toy={synthetic: {object_rate: 2.0}}"],
     "data.toy.synthetic: object_rate must be a number from 0 to 1, got 2.0"),
    (["data.toy={synthetic: {eval_examples: 1.5}}"], "data.toy.synthetic.eval_examples: must be an integer, got 1.5"),
    (["data.toy={synthetic: {seed:1}}"], "data.toy.synthetic: unknown keys ['seed:1']; known: ['seed', "
                                         "'train_examples', 'eval_examples', 'max_sentences', 'max_train_length', "
                                         "'test_sentences', 'max_test_length', 'concat_sentences', 'object_rate', "
                                         "'adjective_rate', 'prepositional_rate']"),
    (["data.toy.folder=nosuch"], "data folder {dir}/nosuch does not exist; name a folder in OpenNMT-py's layout, "
                                 "as `onmt-posenc prepare` writes it"),
    # X4: the grid's own message, not the option parser's
    (["grid.seed=[true]"], "grid.seed: must be integers, got true"),
    (["grid.seed=[-1]"], "grid.seed: must be >= 0, got -1"),
    (["grid.K=[ten]"], "grid.K: must be integers, got ten"),
]


@pytest.mark.parametrize("overrides, message", MISTAKES, ids=[" ".join(o) for o, _ in MISTAKES])
def test_a_mistake_is_one_error_naming_the_file_and_key(tmp_path, overrides, message):
    """What `onmt-posenc run` checks before the first run: loading, then every run's options."""
    path = experiment_file(tmp_path)
    with pytest.raises(experiments.ExperimentError) as error:
        experiments.check_options(experiments.load(path, overrides))
    assert str(error.value) == f"{path}: " + message.format(dir=tmp_path)


def test_no_committed_experiment_file_or_its_recipe_sets_early_stopping():
    """The refusal above, on what the committed experiment files hand every run."""
    from onmt_posenc.experiments.file.reading import read_experiment_file, read_recipe

    def keys(node):
        return set(node) | {k for value in node.values() for k in keys(value)} if isinstance(node, dict) else set()

    files = sorted((REPO / "recipes" / "experiments").glob("*.yaml"))
    assert len(files) >= 6
    for path in files:
        mapping, _ = read_experiment_file(path, ())  # its `include:` chain merged, as the runner reads it
        recipe = read_recipe(mapping["recipe"], mapping.origin("recipe", path))
        assert recipe and "early_stopping" not in keys(mapping) | set(recipe), path


def test_the_example_experiment_is_accepted(tmp_path):
    """The cases above change a file that passes every check."""
    from onmt_posenc.experiments.running.runner import check_data_files

    loaded = experiments.load(experiment_file(tmp_path))
    experiments.check_options(loaded)
    check_data_files(loaded, loaded.runs)
    assert [r.id for r in loaded.runs] == ["toy/ape/seed1", "toy/rpe/seed1"]


@pytest.mark.parametrize("overrides", [["recipe=bad-syntax.yaml"], ["name=5"], ["grid.method=[[ape]]"],
                                       ["analyses.length_buckets.width=0"], ["evaluation.translate.beam_size=abc"],
                                       ["methods.foo.bar=1"]], ids=lambda o: o[0])
def test_onmt_posenc_run_stops_in_one_line_before_training(tmp_path, overrides):
    path = experiment_file(tmp_path)
    message = dict((tuple(o), m) for o, m in MISTAKES)[tuple(overrides)].format(dir=tmp_path)
    result = run([command("onmt-posenc"), "run", path, *(arg for o in overrides for arg in ("--set", o))],
                 cwd=tmp_path, expect_ok=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [f"onmt-posenc run: error: {path}: {message}"]
    assert not (tmp_path / "runs").exists()


def test_an_experiment_file_that_is_not_utf8_or_not_yaml_is_named_with_its_line(tmp_path):
    """R1: the file and line of the bad byte (or of the YAML mistake), in one line."""
    path = experiment_file(tmp_path)
    latin1 = tmp_path / "latin1-experiment.yaml"
    latin1.write_bytes(path.read_bytes().replace(b"settings:", b"# caf\xe9\nsettings:"))
    line = latin1.read_bytes().split(b"\n").index(b"# caf\xe9") + 1
    result = run([command("onmt-posenc"), "run", latin1], cwd=tmp_path, expect_ok=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [f"onmt-posenc run: error: {latin1}:{line}: not UTF-8 text "
                                          "(byte 0xe9: invalid continuation byte)"]
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\nmethods: {ape: {}\n", encoding="utf-8")
    with pytest.raises(experiments.ExperimentError) as error:
        experiments.load(broken)
    assert str(error.value) == f"{broken}:3: not valid YAML (expected ',' or '}}', but got '<stream end>')"


# --- the report on stored results it cannot use -------------------------------

def good_result(experiment, run):
    """A result.json as the runner writes it, with made-up numbers."""
    setting = experiment.data[run.data]
    directory = run_dir(experiment, run)
    config = run_config(experiment, run, corpus_files(setting, data_dir(experiment, run.data)))
    return {**run_fields(run), "status": "finished",
            "bleu": {"valid": 20.0, "test": 18.0, "concat": 15.0},
            "length_ratio": {"valid": 1.0, "test": 0.9, "concat": 0.95},
            "joined": {"concat": {"bleu": 14.0, "length_ratio": 0.95, "sentences": 20, "lines": 10,
                                  "separator_mismatches": 1}},
            "bleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0",
            "training_speed": {"tokens_per_second": 1000.0 + run.seed, "reports": 3},
            "curve": {"train": [], "valid": [{"step": 5, "ppl": 9.0}, {"step": 10, "ppl": 8.0}], "train_seconds": 60.0},
            "convergence": {"converged": None, "why": "too few validations"},
            "machine": {"cpu": "test CPU", "cores": 2, "gpus": [], "torch": "2"},
            "train_seconds": 60.0, "seconds": 70.0, "config": json.loads(json.dumps(config)),
            "analyses": {"shift_invariance": "analyses/shift_invariance.json",
                         "position_ablation": "analyses/position_ablation.json"},
            "analysis_errors": {}, "evaluation": evaluation_of(experiment, run)}


GOOD_ANALYSES = {
    "shift_invariance": {"offsets": [0, 5], "matrix": [[1.0, 0.9], [0.9, 1.0]], "mean_off_diagonal": 0.9,
                         "absolute_positions": True},
    "position_ablation": {"removed_from": ["src", "tgt"], "encoder_cosine": 0.5, "decoder_cosine": 0.6,
                          "perplexity_kept": 8.0, "perplexity_removed": 30.0, "tokens": 100},
}
# RP1, RP2: what result.json holds (from a good result), and the problem the report names
BAD_RESULTS = [
    ("list", lambda good: [], "must be a JSON object, got []"),
    ("empty", lambda good: {}, "status: missing"),
    ("string", lambda good: "hello", 'must be a JSON object, got "hello"'),
    ("bleu string", lambda good: {**good, "bleu": "abc"}, 'bleu: must be a JSON object, got "abc"'),
    ("bleu value", lambda good: {**good, "bleu": {"test": "abc"}}, 'bleu.test: must be a number, got "abc"'),
    ("bleu missing", lambda good: {k: v for k, v in good.items() if k != "bleu"}, "bleu: missing"),
    ("curve list", lambda good: {**good, "curve": [1, 2]}, "curve: must be a JSON object, got [1, 2]"),
    ("analyses list", lambda good: {**good, "analyses": ["x"]}, 'analyses: must be a JSON object, got ["x"]'),
    ("joined number", lambda good: {**good, "joined": 5}, "joined: must be a JSON object, got 5"),
]
# RP3: an analysis file that holds {}, and the problem the report names
BAD_ANALYSES = [("shift_invariance", "offsets: missing"), ("position_ablation", "removed_from: missing")]


def rows(report, section, run_id):
    """The rows of a run in a section of report.md."""
    text = report.split(f"\n## {section}\n")[1].split("\n## ")[0]
    return [line for line in text.splitlines() if line.startswith(f"| {run_id} |")]


@pytest.fixture(scope="module")
def corrupt_report(tmp_path_factory):
    """`onmt-posenc report` on runs whose stored results are good (toy/rpe/seed1 and the
    last two APE seeds, each with one analysis file {}) or broken (an APE seed for each
    of BAD_RESULTS): (the command, report.md, the output folder)."""
    tmp_path = tmp_path_factory.mktemp("corrupt")
    seeds = len(BAD_RESULTS) + len(BAD_ANALYSES)
    path = experiment_file(tmp_path, grid=[{"method": ["ape"], "seed": list(range(1, seeds + 1))},
                                           {"method": ["rpe"], "seed": [1]}])
    output = tmp_path / "out"
    loaded = experiments.load(path, output=output)
    for each in loaded.runs:
        directory = run_dir(loaded, each)
        (directory / "analyses").mkdir(parents=True)
        good = good_result(loaded, each)
        broken = BAD_RESULTS[each.seed - 1][1](good) if each.method == "ape" and each.seed <= len(BAD_RESULTS) else good
        write_json(directory / "result.json", broken)
        for name, value in GOOD_ANALYSES.items():
            unusable = each.method == "ape" and each.seed > len(BAD_RESULTS) and (
                BAD_ANALYSES[each.seed - len(BAD_RESULTS) - 1][0] == name)
            write_json(directory / "analyses" / f"{name}.json", {} if unusable else value)
    result = run([command("onmt-posenc"), "report", path, "--output", output], cwd=tmp_path, expect_ok=False)
    return result, (output / "report.md").read_text(encoding="utf-8"), output


def test_the_report_of_corrupt_results_is_written_without_a_traceback(corrupt_report):
    result, report, output = corrupt_report
    assert result.returncode == 0 and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [f"report: {output / 'report.md'}"]
    assert "| toy/rpe/seed1 | finished |" in report
    # only the APE seeds with a usable result.json count in the BLEU table
    # the records' convergence is unknown ("too few validations"): all counted, marked
    assert f"| toy | VANILLA | ape | {len(BAD_ANALYSES)} (none converged) | 20.00 ± 0.00 |" in report
    runs = json.loads((output / "results.json").read_text(encoding="utf-8"))["runs"]
    assert [r["status"] for r in runs].count("failed") == len(BAD_RESULTS)


@pytest.mark.parametrize("seed, case", enumerate(BAD_RESULTS, 1), ids=[c[0] for c in BAD_RESULTS])
def test_a_result_the_report_cannot_use_is_a_failed_run_in_the_runs_table(corrupt_report, seed, case):
    _, report, output = corrupt_report
    stored = output / "toy" / "ape" / f"seed{seed}" / "result.json"
    [row] = rows(report, "Runs", f"toy/ape/seed{seed}")
    assert row == (f"| toy/ape/seed{seed} | failed | – | – | {stored} cannot be used ({case[2]}); "
                   "an attempt without a readable config.yaml: `onmt-posenc run` starts it again |")
    assert not (output / "plots" / f"shift_toy_ape_seed{seed}.png").exists()


@pytest.mark.parametrize("seed, case", enumerate(BAD_ANALYSES, len(BAD_RESULTS) + 1), ids=[c[0] for c in BAD_ANALYSES])
def test_an_analysis_the_report_cannot_use_is_a_note_on_its_run(corrupt_report, seed, case):
    _, report, output = corrupt_report
    name, problem = case
    stored = output / "toy" / "ape" / f"seed{seed}" / "analyses" / f"{name}.json"
    [row] = rows(report, "Runs", f"toy/ape/seed{seed}")
    assert row.startswith(f"| toy/ape/seed{seed} | finished |")
    assert row.endswith(f"| {name}: {stored} cannot be used ({problem}) |")
    # the run's other analysis is in its section; this one is not
    shift, ablation = (len(rows(report, section, f"toy/ape/seed{seed}"))
                       for section in ("Shift invariance of the encoder", "Position ablation"))
    assert (shift, ablation) == ((0, 1) if name == "shift_invariance" else (1, 0))
    assert (output / "plots" / f"shift_toy_ape_seed{seed}.png").exists() == (name != "shift_invariance")


def test_a_report_with_no_finished_run_warns(tmp_path):
    """RP4: the report is written (its Runs table says what happened), with a warning; exit status 0."""
    path = experiment_file(tmp_path)
    output = tmp_path / "out"
    output.mkdir()
    result = run([command("onmt-posenc"), "report", path, "--output", output], cwd=tmp_path)
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        "onmt-posenc report: warning: no run has finished yet (0 of 2); the report has no results, only what "
        "happened to each run", f"report: {output / 'report.md'}"]
    assert "| toy/ape/seed1 | missing |" in (output / "report.md").read_text(encoding="utf-8")


def test_a_shard_without_runs_records_that_into_a_new_output(tmp_path):
    """More shards than runs (an array job of a fixed size): shard 3 of 3 has none of the
    two runs, ends at once, and leaves its (empty) record for `report`."""
    output = tmp_path / "new" / "runs"
    result = run([command("onmt-posenc"), "run", experiment_file(tmp_path), "--output", output, "--shard", "3/3"],
                 cwd=tmp_path)
    assert "0 of 2 runs (shard 3/3)" in result.stderr
    assert json.loads((output / "shard-3-of-3.json").read_text()) == []


def test_output_and_data_paths_of_the_wrong_kind_are_named(tmp_path):
    """A file where the output folder belongs, a folder where a data file belongs."""
    from onmt_posenc.experiments.running.runner import check_data_files

    path = experiment_file(tmp_path)
    afile = tmp_path / "afile"
    afile.write_text("x\n")
    for name in ("run", "report"):
        result = run([command("onmt-posenc"), name, path, "--output", afile], cwd=tmp_path, expect_ok=False)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.splitlines()[-1].startswith(f"onmt-posenc {name}: error: the output {afile} is not a folder")
    # the file is a parent of the output: every run was started, and each failed
    result = run([command("onmt-posenc"), "run", path, "--output", afile / "runs"], cwd=tmp_path, expect_ok=False)
    assert result.stderr.splitlines()[-1] == (f"onmt-posenc run: error: the output {afile / 'runs'} is not a folder "
                                              f"({afile} is a file); name a folder (--output, or output in the file)")
    toy = tmp_path / "toy-ende"
    loaded = experiments.load(path, [f"data.toy={{train: {{src: {toy}/src-train.txt, tgt: {toy}/tgt-train.txt}}, "
                                     f"eval: {{test: {{src: {toy}/src-test.txt, tgt: {toy}/tgt-test.txt, ref: {tmp_path}}}}}}}",
                                     "analyses={}"])
    with pytest.raises(experiments.ExperimentError, match=re.escape(
            f"{path}: data.toy.eval.test: {tmp_path} is a folder, not a file")):
        check_data_files(loaded, loaded.runs)
