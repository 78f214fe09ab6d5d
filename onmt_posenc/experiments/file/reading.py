"""The files an experiment is read from, read once and first: the experiment YAML with its
`--set` overrides, and the recipe it names with the recipe's includes merged (config.include).
What comes out is plain mappings, which validation checks against the schema; loading and the
modules it calls read them and never go back to the files."""
from pathlib import Path

import yaml
from configargparse import ConfigFileParserException

from onmt_posenc.config.include import merged_mapping, read_yaml
from onmt_posenc.experiments.file.spec import ExperimentError, fail, shown
from onmt_posenc.experiments.file.validation import validated


def apply_overrides(mapping, overrides, path):
    """`--set a.b.c=value` on the experiment mapping, the value read as YAML; the key paths
    set (tuples), which have no line in the file. `--set a.b.c=null` removes the file's key, as
    if its line were deleted (the recipe's value or the option's default then holds); an empty
    value stays a key without a value, which validation refuses."""
    overridden = []
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
            value = yaml.safe_load(text)
        except yaml.YAMLError as error:
            problem = str(error).splitlines()[0]
            fail(path, f"--set {override}: the value is not valid YAML ({problem})")
        if value is None and text.strip():  # `null` or `~`, written out: unset the key
            if last not in node:
                fail(path, f"--set {override}: the file sets no {key} to unset")
            del node[last]
            continue
        node[last] = value
        overridden.append(tuple(key.split(".")))
    return overridden


class ExperimentMapping(dict):
    """An experiment file's mapping, its `include:` chain merged; `origins`: the file each
    top-level key comes from (its relative paths are relative to that file, and its line is
    found there)."""

    def __init__(self, mapping, origins):
        super().__init__(mapping)
        self.origins = origins

    def origin(self, key, path):
        return self.origins.get(key, path)


def _read_with_includes(path, seen=()):
    """The file's mapping over the mapping of the file it includes: a whole top-level key at a
    time (a key this file gives replaces the included file's), as recipes' `include:` does."""
    path = Path(path).resolve()
    if path in seen:
        fail(seen[0], f"include cycle: {' -> '.join(str(p) for p in (*seen, path))}")
    try:
        mapping = read_yaml(path) or {}
    except OSError as error:
        where = f"{seen[-1]}: include: " if seen else ""
        raise ExperimentError(f"{where}cannot read experiment file: {error}") from None
    except ConfigFileParserException as error:  # not UTF-8 or not YAML: the file and line
        raise ExperimentError(str(error)) from None
    if not isinstance(mapping, dict):  # refused in the schema's words
        validated(mapping, path)
    included = mapping.pop("include", None)
    if included is None:
        return ExperimentMapping(mapping, dict.fromkeys(mapping, path))
    if not isinstance(included, str) or not included:
        fail(path, f"include: must name one experiment file, got {shown(included)}")
    base = _read_with_includes(path.parent / included, (*seen, path))
    return ExperimentMapping({**base, **mapping}, {**base.origins, **dict.fromkeys(mapping, path)})


def read_experiment_file(path, overrides):
    """(the experiment file's mapping, its includes merged and `overrides` applied: an
    ExperimentMapping; the key paths the overrides set)."""
    mapping = _read_with_includes(path)
    return mapping, apply_overrides(mapping, overrides, path)


def read_recipe(name, path):
    """The recipe's merged mapping ({} without one), `name` relative to the experiment file."""
    if name is None:
        return {}
    recipe_path = path.resolve().parent / name
    if not recipe_path.is_file():
        fail(path, f"recipe {name} not found ({recipe_path})")
    try:
        recipe = merged_mapping(recipe_path)
    except ConfigFileParserException as error:  # not YAML, not a mapping, an include missing
        fail(path, f"recipe: {error}")
    for key in recipe:
        if not isinstance(key, str):
            fail(path, f"recipe {recipe_path}: {shown(key)} is not an option name")
    _reject_recipe_corpus_transforms(recipe, recipe_path, path)
    return recipe


def _reject_recipe_corpus_transforms(recipe, recipe_path, path):
    """The runner replaces the recipe's corpora by the data settings' files; what a
    recipe corpus does beyond naming files would be lost without a word."""
    for name, corpus in _mapping(recipe.get("data"), path, f"recipe {recipe_path}: data").items():
        extra = {key: value for key, value in _mapping(corpus, path, f"recipe {recipe_path}: data.{name}").items()
                 if key not in ("path_src", "path_tgt") and value not in (None, [])}
        if extra:
            fail(path, f"recipe {recipe_path}: corpus {name!r} sets {sorted(extra)}, which the runner would drop "
                        "(it replaces the recipe's corpora by the data settings); use a recipe without them and "
                        "say it in the data setting: `extrapolate: N` or `interpolate: N`")


def _mapping(value, path, where):
    if value is not None and not isinstance(value, dict):
        fail(path, f"{where} must be a mapping, got {type(value).__name__}")
    return value or {}
