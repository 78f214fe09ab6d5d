"""The experiment file's schema, declared once (onmt_posenc.experiments.file.schema): the JSON
Schema `onmt-posenc schema` prints is the committed one that every committed experiment file
names for editors and satisfies; a mistake written in a file is named with its line; the key
tables of docs/experiments.md are the schema's keys. Nothing here trains a model."""
import json
import re

import jsonschema
import pytest
import yaml
from conftest import REPO, command, run
from runner_helpers import experiment_file

from onmt_posenc import experiments
from onmt_posenc.experiments.file.schema import ANALYSES, DataSettingKeys, EvaluationKeys, ExperimentKeys, SyntheticKeys

EXPERIMENT_FILES = sorted((REPO / "recipes" / "experiments").glob("*.yaml"))
SCHEMA_LINE = "# yaml-language-server: $schema=schema.json"


@pytest.fixture(scope="module")
def printed_schema():
    result = run([command("onmt-posenc"), "schema"], cwd=REPO)
    return json.loads(result.stdout)


def test_the_committed_schema_is_the_printed_one(printed_schema):
    """recipes/experiments/schema.json, which editors read, is what `onmt-posenc schema` prints
    today: a change of the schema without writing it again fails here."""
    jsonschema.Draft202012Validator.check_schema(printed_schema)
    committed = json.loads((REPO / "recipes" / "experiments" / "schema.json").read_text(encoding="utf-8"))
    assert committed == printed_schema


@pytest.mark.parametrize("path", EXPERIMENT_FILES, ids=lambda p: p.name)
def test_each_committed_experiment_file_names_the_schema_and_satisfies_it(printed_schema, path):
    text = path.read_text(encoding="utf-8")
    assert text.splitlines()[0] == SCHEMA_LINE
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
              for e in jsonschema.Draft202012Validator(printed_schema).iter_errors(yaml.safe_load(text))]
    assert errors == []


# Mistakes that the JSON Schema flags in an editor as the loader refuses them (and one that both accept)
AGREED = [
    ({"setings": {}}, ".yaml:35: unknown keys ['setings']"),
    ({"analyses": {"swaped": {}}}, "analyses: unknown analyses ['swaped']"),
    ({"analyses": {"length_buckets": {"width": 0}}}, "analyses.length_buckets.width: must be >= 1, got 0"),
    ({"grid": {"seed": [True]}}, "grid.seed: must be integers, got true"),
    ({"grid": [{"seed": [1]}, {"K": ["ten"]}]}, "grid[1].K: must be integers, got ten"),
    ({"tensorboard": "yes"}, "tensorboard: must be true or false, got 'yes'"),
    ({"data": {"toy": {"folder": 5}}}, "data.toy.folder: must be a non-empty string, got 5"),
    ({"data": {"toy": {"synthetic": {"seed:1": None}}}}, "data.toy.synthetic: unknown keys ['seed:1']"),
    ({"evaluation": {"average_last": 0}}, "evaluation.average_last: must be >= 1, got 0"),
    ({"analyses": {"token_nll": None, "swapped": {"sep": "a b"}}},
     "analyses.swapped.sep: must be one token (a string without spaces), got a b"),
    ({"analyses": {"token_nll": None}}, None),  # `token_nll:` alone: its defaults
]


@pytest.mark.parametrize("change, message", AGREED, ids=[m or "accepted" for _, m in AGREED])
def test_the_json_schema_and_the_loader_agree(printed_schema, tmp_path, change, message):
    path = experiment_file(tmp_path)
    mapping = {**yaml.safe_load(path.read_text(encoding="utf-8")), **change}
    path.write_text(yaml.safe_dump(mapping, sort_keys=False), encoding="utf-8")
    flagged = list(jsonschema.Draft202012Validator(printed_schema).iter_errors(mapping))
    if message is None:
        assert flagged == [] and "token_nll" in experiments.load(path).analyses
        return
    assert flagged
    with pytest.raises(experiments.ExperimentError, match=re.escape(message)):
        experiments.load(path)


def test_a_mistake_written_in_the_file_is_named_with_its_line(tmp_path):
    """FILE:LINE: key: what is wrong, in one line; a value that --set gave has no line."""
    path = tmp_path / "exp.yaml"
    path.write_text("methods:\n  ape: {}\ndata:\n  toy:\n    synthetic: {seed: 1}\nanalyses:\n  length_buckets:\n"
                    "    width: 0\nsetings: {}\n", encoding="utf-8")
    with pytest.raises(experiments.ExperimentError) as error:
        experiments.load(path, ["setings={}", "settings={}"])
    assert str(error.value) == f"{path}: unknown keys ['setings']; known: {list(ExperimentKeys.model_fields)}"
    path.write_text(path.read_text(encoding="utf-8").replace("setings: {}\n", ""), encoding="utf-8")
    with pytest.raises(experiments.ExperimentError) as error:
        experiments.load(path)
    assert str(error.value) == f"{path}:8: analyses.length_buckets.width: must be >= 1, got 0"
    with pytest.raises(experiments.ExperimentError) as error:
        experiments.load(path, ["analyses.length_buckets.width=-2"])
    assert str(error.value) == f"{path}: analyses.length_buckets.width: must be >= 1, got -2"
    path.write_text("methods:\n  ape: {}\ndata:\n  toy:\n    synthetic: {seed: 1}\n    extrapolat: 5\n", encoding="utf-8")
    with pytest.raises(experiments.ExperimentError) as error:
        experiments.load(path)
    assert str(error.value) == (f"{path}:6: data.toy: unknown keys ['extrapolat']; "
                                f"known: {list(DataSettingKeys.model_fields)}")


def test_onmt_posenc_run_names_the_line_in_one_line(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("methods: {ape: {}}\ndata: {toy: {synthetic: {}}}\ngrid:\n  seed: [1, -1]\n", encoding="utf-8")
    result = run([command("onmt-posenc"), "run", path], cwd=tmp_path, expect_ok=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [f"onmt-posenc run: error: {path}:4: grid.seed: must be >= 0, got -1"]


def docs_tables():
    """docs/experiments.md's tables in order: (header cells, {first cell's key: the row's last cell})."""
    tables, lines = [], (REPO / "docs" / "experiments.md").read_text(encoding="utf-8").splitlines()
    for index, line in enumerate(lines):
        if line.startswith("|---"):
            header = [cell.strip() for cell in lines[index - 1].strip("|").split("|")]
            rows = {}
            for row in lines[index + 1:]:
                if not row.startswith("|"):
                    break
                cells = [cell.strip() for cell in row.strip("|").split("|")]
                key = re.match(r"`(\w+)", cells[0])  # `extrapolate: N` -> extrapolate
                rows[key.group(1) if key else cells[0]] = cells[-1]
            tables.append((header, rows))
    return tables


def docs_table(header, nth=0):
    return [rows for head, rows in docs_tables() if head == header][nth]


def test_the_docs_key_tables_are_the_schema_s_keys():
    """docs/experiments.md's tables name exactly the keys the schema declares, in its order:
    the file's, a data setting's (with the synthetic task's parameters), the evaluation's, and
    every analysis' options with their defaults."""
    assert list(docs_table(["key", "default", "meaning"])) == list(ExperimentKeys.model_fields)
    data_setting = docs_table(["key", "meaning"])
    assert list(data_setting) == list(DataSettingKeys.model_fields)
    assert re.findall(r"`(\w+)`", data_setting["synthetic"].split(";")[0]) == list(SyntheticKeys.model_fields)
    assert list(docs_table(["key", "default", "meaning"], nth=1)) == list(EvaluationKeys.model_fields)
    analyses = docs_table(["analysis", "options (defaults)"])
    assert list(analyses) == list(ANALYSES)
    for name, options in ANALYSES.items():
        documented = dict(re.findall(r"`(\w+)` \(((?:[^()]|\([^()]*\))*)\)", analyses[name]))
        assert list(documented) == list(options), name
        for option, default in options.items():
            if default is not None:  # None: the evaluation's sets, said in words
                assert str(default) in documented[option].replace("`", ""), (name, option)


def test_set_null_removes_the_files_key_and_the_default_holds(tmp_path):
    """`--set KEY=null` is the file without that line: the recipe's value or onmt_train's default
    (how a committed batch made under an earlier version of its file is made again)."""
    (tmp_path / "recipe.yaml").write_text("train_steps: 9\n", encoding="utf-8")
    path = tmp_path / "exp.yaml"
    path.write_text("recipe: recipe.yaml\nmethods:\n  ape: {}\ndata:\n  toy:\n    synthetic: {seed: 1}\n"
                    "settings:\n  train_steps: 7\n  word_embedding_scale: sqrt_d\n", encoding="utf-8")
    (run,) = experiments.load(path).runs
    assert (run.config["train_steps"], run.config["word_embedding_scale"]) == (7, "sqrt_d")
    (run,) = experiments.load(path, ["settings.word_embedding_scale=null", "settings.train_steps=~"]).runs
    assert run.config["train_steps"] == 9 and "word_embedding_scale" not in run.config


# Mistakes in the OpenNMT-py keys (settings, methods, a data setting's settings, evaluation.translate)
# that the JSON Schema, generated from the commands' parsers, flags: (change, the key's path, the message)
PLANTED = [
    ({"methods": {"shape": {"shape_max_shfit": 20}}}, "$.methods.shape",
     "Additional properties are not allowed ('shape_max_shfit' was unexpected)"),
    ({"settings": {"warmup_step": 8000}}, "$.settings",
     "Additional properties are not allowed ('warmup_step' was unexpected)"),
    ({"methods": {"shape": {"shape_max_shift": -20}}}, "$.methods.shape.shape_max_shift",
     "-20 is less than the minimum of 0"),
    ({"settings": {"train_steps": 0}}, "$.settings.train_steps", "0 is less than the minimum of 1"),
    ({"settings": {"model_dtype": "fp64"}}, "$.settings.model_dtype", "'fp64' is not one of ['fp32', 'fp16']"),
    ({"settings": {"position_encoding": "off"}}, "$.settings.position_encoding", "'off' is not of type 'boolean'"),
    ({"settings": {"dropout": [0.1, "x"]}}, "$.settings.dropout[1]", "'x' is not of type 'number'"),
    ({"data": {"toy": {"synthetic": {}, "settings": {"save_model": "x"}}}}, "$.data.toy.settings",
     "Additional properties are not allowed ('save_model' was unexpected)"),  # the runner's key
    ({"evaluation": {"translate": {"beam_size": "four"}}}, "$.evaluation.translate.beam_size",
     "'four' is not of type 'integer'"),
    ({"data": {"toy": {"synthetic": {}, "extrapolate": "many"}}}, "$.data.toy.extrapolate",
     "'many' is not of type 'integer', 'null'"),  # a key that may be left empty: still its own message
]


@pytest.mark.parametrize("change, where, message", PLANTED, ids=[w for _, w, _ in PLANTED])
def test_a_planted_mistake_fails_the_json_schema_naming_the_key(printed_schema, change, where, message):
    mapping = {"methods": {"ape": {}, "shape": {"shape_max_shift": 10}}, "data": {"toy": {"synthetic": {}}}}
    mapping = {**mapping, **change}
    flagged = [(error.json_path, error.message) for error in
               jsonschema.Draft202012Validator(printed_schema).iter_errors(mapping)]
    assert flagged == [(where, message)]


def test_the_schema_s_opennmt_keys_are_the_runner_s(printed_schema):
    """Every option of onmt_train, onmt_translate and onmt_build_vocab (the extension's too) but the
    runner's own keys; evaluation.translate: onmt_translate's but those the runner gives."""
    from onmt_posenc.config.strict import command_parsers
    from onmt_posenc.experiments.file.spec import RUNNER_KEYS, RUNNER_TRANSLATE_KEYS

    def keys(parser):
        return {key for action in parser._actions for key in parser.get_possible_config_keys(action)
                if not key.startswith("-") and not getattr(action, "is_config_file_arg", False) and key != "help"}

    parsers = command_parsers()
    training = printed_schema["$defs"]["OpenNMTTrainingOptions"]["properties"]
    assert set(training) == set().union(*map(keys, parsers.values())) - {*RUNNER_KEYS, "seed"}
    translation = printed_schema["$defs"]["OpenNMTTranslationOptions"]["properties"]
    assert set(translation) == keys(parsers["onmt_translate"]) - set(RUNNER_TRANSLATE_KEYS)
    assert training["shape_max_shift"]["minimum"] == 0 and training["shape_inference_offset"]["minimum"] == 0
    assert training["src_position_encoding"]["enum"] == list(parsers["onmt_train"]._option_string_actions[
        "-src_position_encoding"].choices)


# Mistakes in OpenNMT-py keys that the runner's own checks find: (the file, the key whose line is named,
# the message after it)
RUNNER_REFUSES = [
    ("methods:\n  ape: {}\n  shape:\n    shape_max_shfit: 20\n", "shape_max_shfit",
     "methods.shape.shape_max_shfit: unknown option; did you mean 'shape_max_shift'?"),
    ("settings:\n  train_steps: 10\n  warmup_step: 8000\nmethods:\n  ape: {}\n", "warmup_step",
     "settings.warmup_step: unknown option; did you mean 'warmup_steps'?"),
    ("methods:\n  ape: {}\n  shape:\n    shape_max_shift: -20\n", "shape_max_shift",
     "methods.shape.shape_max_shift: must be >= 0, got -20"),
    ("methods:\n  ape:\n    seed: 3\n", "seed",
     "methods.ape.seed: each run's seed is set by grid.seed (default [1]); list the seeds there"),
    ("methods:\n  ape: {}\nevaluation:\n  translate:\n    model: m.pt\n", "model",
     "evaluation.translate sets ['model'], which the runner sets for every translation"),
]


@pytest.mark.parametrize("text, key, message", RUNNER_REFUSES, ids=[k for _, k, _ in RUNNER_REFUSES])
def test_onmt_posenc_run_names_the_line_of_a_bad_opennmt_key(tmp_path, text, key, message):
    path = tmp_path / "exp.yaml"
    path.write_text(text + "data:\n  toy:\n    synthetic: {}\n", encoding="utf-8")
    line = next(number for number, row in enumerate(text.splitlines(), 1) if row.strip().startswith(f"{key}:"))
    result = run([command("onmt-posenc"), "run", path, "--output", tmp_path / "runs"], cwd=tmp_path,
                 expect_ok=False)
    assert result.stderr.splitlines() == [f"onmt-posenc run: error: {path}:{line}: {message}"]
    assert not (tmp_path / "runs").exists()
