"""The files an experiment is read from, read once and first: the experiment YAML with its
`--set` overrides, and the recipe it names with the recipe's includes merged (config.include).
What comes out is plain mappings; the checks of loading and the modules it calls read them
and never go back to the files."""
import yaml
from configargparse import ConfigFileParserException

from onmt_posenc.config.include import merged_mapping, read_yaml
from onmt_posenc.experiments.file.spec import TOP_KEYS, ExperimentError, fail
from onmt_posenc.experiments.file.values import check_mapping, check_option_names, check_string


def apply_overrides(mapping, overrides, path):
    """`--set a.b.c=value` on the experiment mapping; the value is read as YAML."""
    for override in overrides:
        key, sep, text = override.partition("=")
        if not sep or not key:
            fail(path, f"--set expects KEY.PATH=VALUE, got {override!r}")
        *parents, last = key.split(".")
        node = mapping
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                fail(path, f"--set {key}: {part} is not a mapping")
        try:
            node[last] = yaml.safe_load(text)
        except yaml.YAMLError as error:
            problem = str(error).splitlines()[0]
            fail(path, f"--set {override}: the value is not valid YAML ({problem})")
    return mapping


def read_experiment_file(path, overrides):
    """(the experiment file's mapping with `overrides` applied, its recipe's merged mapping
    or {} without one)."""
    try:
        mapping = read_yaml(path) or {}
    except OSError as error:
        raise ExperimentError(f"cannot read experiment file: {error}") from None
    except ConfigFileParserException as error:  # not UTF-8 or not YAML: the file and line
        raise ExperimentError(str(error)) from None
    mapping = apply_overrides(check_mapping(mapping, path, "the experiment file"), overrides, path)
    unknown = set(mapping) - TOP_KEYS
    if unknown:
        fail(path, f"unknown keys {sorted(unknown)}; known: {sorted(TOP_KEYS)}")
    return mapping, _read_recipe(mapping.get("recipe"), path)


def _read_recipe(name, path):
    if name is None:
        return {}
    recipe_path = path.resolve().parent / check_string(name, path, "recipe")
    if not recipe_path.is_file():
        fail(path, f"recipe {name} not found ({recipe_path})")
    try:
        recipe = merged_mapping(recipe_path)
    except ConfigFileParserException as error:  # not YAML, not a mapping, an include missing
        fail(path, f"recipe: {error}")
    check_option_names(recipe, path, f"recipe {recipe_path}")
    _reject_recipe_corpus_transforms(recipe, recipe_path, path)
    return recipe


def _reject_recipe_corpus_transforms(recipe, recipe_path, path):
    """The runner replaces the recipe's corpora by the data settings' files; what a
    recipe corpus does beyond naming files would be lost without a word."""
    for name, corpus in check_mapping(recipe.get("data"), path, f"recipe {recipe_path}: data").items():
        extra = {key: value for key, value in check_mapping(corpus, path, f"recipe {recipe_path}: data.{name}").items()
                 if key not in ("path_src", "path_tgt") and value not in (None, [])}
        if extra:
            fail(path, f"recipe {recipe_path}: corpus {name!r} sets {sorted(extra)}, which the runner would drop "
                        "(it replaces the recipe's corpora by the data settings); use a recipe without them and "
                        "say it in the data setting: `extrapolate: N` or `interpolate: N`")
