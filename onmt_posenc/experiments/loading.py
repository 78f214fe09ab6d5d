"""An experiment file read and checked (onmt_posenc.experiments.spec says what it holds):
`--set` overrides, data settings and their files, the grid expanded into runs, the
evaluation and the analyses. A mistake is an ExperimentError naming the file and the key."""
import dataclasses
import functools
import itertools
import re
from dataclasses import fields
from pathlib import Path

import yaml
from configargparse import ConfigFileParserException

from onmt_posenc.config.include import merged_mapping, read_yaml
from onmt_posenc.core.arguments import is_one_token
from onmt_posenc.data.prepare_corpus import LANGUAGES_FILE
from onmt_posenc.data.synthetic import EVAL_SETS, SyntheticTask
from onmt_posenc.experiments.spec import (ANALYSES, COUNT_KEYS, EXTRAPOLATE_KEYS, FOLDER_FILES, FOLDER_TEST_LINES,
                                          FOLDER_VALID_LINES, GRID_AXES, INTERPOLATE_KEYS, RUNNER_KEYS,
                                          RUNNER_TRANSLATE_KEYS, SETTING_TRANSFORMS, TOP_KEYS, DataSetting, Experiment,
                                          ExperimentError, FilePair, Run, fail, shown, data_setting_keys,
                                          uses_shape, warm_start_source)


def _mapping(value, path, where):
    if value is None:
        return {}
    if not isinstance(value, dict):
        fail(path, f"{where} must be a mapping, got {type(value).__name__}")
    return value


def _string(value, path, where):
    """A name or a path. YAML reads `5`, `true` or `[a]` as other types, which neither
    Path nor a lookup among the names can take."""
    if not isinstance(value, str) or not value:
        fail(path, f"{where}: must be a non-empty string, got {shown(value)}")
    return value


def _names(value, path, where):
    """A non-empty list of names: a single name (`sets: valid`) would be read letter by letter."""
    if not isinstance(value, list) or not value or not all(isinstance(name, str) and name for name in value):
        fail(path, f"{where}: must be a non-empty list of names, got {shown(value)}")
    return value


def _labels(mapping, path, where):
    """The labels of `methods` or `data`: they name folders and runs."""
    for label in mapping:
        if not isinstance(label, str) or not label or "/" in label:
            fail(path, f"{where}: {shown(label)} cannot name runs and folders; use a word (a string without '/')")
    return mapping


def _integer(value, path, where, least=0):
    if not isinstance(value, int) or isinstance(value, bool):
        fail(path, f"{where}: must be an integer, got {shown(value)}")
    if value < least:
        fail(path, f"{where}: must be >= {least}, got {value}")
    return value


def _offsets(value, path, where):
    if (not isinstance(value, list) or len(value) < 2
            or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in value)
            or len(set(value)) < 2):
        fail(path, f"{where}: must be a list of two or more different integers >= 0 (offsets compared with each "
                    f"other), got {shown(value)}")
    return value


def _separator(value, path, where):
    if not isinstance(value, str) or not is_one_token(value):
        fail(path, f"{where}: must be one token (a string without spaces), got {shown(value)}")
    return value


# What each analysis option must be, checked when the file loads: the runner and the
# report take them as they are, after every run has trained (and length buckets of
# width 0 would never end). An option means the same in every analysis that has it.
ANALYSIS_OPTIONS = {
    "set": _string, "sets": _names, "offsets": _offsets, "sep": _separator,
    "width": functools.partial(_integer, least=1), "sentences": functools.partial(_integer, least=1),
    "position_width": functools.partial(_integer, least=1), "frequency_bins": functools.partial(_integer, least=1),
    "train_examples": _integer,
}


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


def _option_names(keys, path, where):
    """OpenNMT-py keys are option names: a YAML `5:` or `true:` is none."""
    for key in keys:
        if not isinstance(key, str):
            fail(path, f"{where}: {shown(key)} is not an option name")
    return keys


def _reject_runner_keys(keys, where, path):
    _option_names(keys, path, where)
    owned = set(keys) & set(RUNNER_KEYS)
    if owned:
        fail(path, f"{where} sets {sorted(owned)}, which the runner sets for every run")
    if "seed" in keys:  # grid.seed would override it in every run, without a word
        fail(path, f"{where}.seed: each run's seed is set by grid.seed (default [1]); list the seeds there")


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


def _reject_overridden_keys(layers, data, path):
    """Keys that a data setting's transforms own, or transforms the runner places itself.
    `layers`: (where, keys, the data settings those keys reach)."""
    layers = layers + [(f"data.{label}.settings", setting.settings, [setting]) for label, setting in data.items()]
    for where, keys, reached in layers:
        transforms = keys.get("transforms") or []
        if not isinstance(transforms, list) or not all(isinstance(name, str) for name in transforms):
            fail(path, f"{where}.transforms: must be a list of transform names, got {shown(transforms)}")
        for name in transforms:
            if name in SETTING_TRANSFORMS:
                fail(path, f"{where} lists the transform {name!r}, which would reach the validation corpus "
                            f"too; declare `{SETTING_TRANSFORMS[name]}: N` on a data setting instead")
        for setting in reached:
            own = set(data_setting_keys(setting))
            owned = set(keys) & own
            if owned:
                fail(path, f"{where} sets {sorted(owned)}, which data.{setting.label}.{setting.kind.lower()} "
                            "sets for its runs")
            # read by filtertoolong and concat_pairs only, which the runner puts on EXTRAPOLATE
            # and INTERPOLATE corpora: anywhere else they would change nothing
            unread = set(keys) & {*EXTRAPOLATE_KEYS, *INTERPOLATE_KEYS} - own
            if unread:
                fail(path, f"{where} sets {sorted(unread)}, which no transform of data.{setting.label} "
                            f"({setting.kind}) reads: it would change nothing; declare `extrapolate: N` or "
                            "`interpolate: N` on the data setting instead")


def _file_pair(spec, base, path, where):
    spec = _mapping(spec, path, where)
    unknown = set(spec) - {"src", "tgt", "ref", "lines", "join", "docids"}
    if unknown or not {"src", "tgt"} <= set(spec):
        fail(path, f"{where} needs src and tgt (and optionally ref, lines, join, docids); got {sorted(spec)}")
    for key in ("lines", "join"):
        if spec.get(key) is not None and (not isinstance(spec[key], int) or spec[key] < 1):
            fail(path, f"{where}.{key} must be a positive integer")
    for key in ("src", "tgt", *(key for key in ("ref", "docids") if spec.get(key) is not None)):
        _string(spec[key], path, f"{where}.{key}")
    ref, docids = ((base / spec[key]).resolve() if spec.get(key) else None for key in ("ref", "docids"))
    return FilePair((base / spec["src"]).resolve(), (base / spec["tgt"]).resolve(), ref,
                    spec.get("lines"), spec.get("join"), docids)


def _positive(value, path, where):
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        fail(path, f"{where} must be a positive integer, got {value!r}")
    return value


def _data_setting(label, spec, base, path, folder=None):
    """A data setting from its mapping; `folder` (--data) replaces where its files come from."""
    spec = _mapping(spec, path, f"data.{label}")
    known = {"train", "valid", "eval", "synthetic", "folder", "settings", *COUNT_KEYS, "warm_start", "target_language",
             "train_pairs"}
    unknown = set(spec) - known
    if unknown:
        fail(path, f"data.{label}: unknown keys {sorted(unknown)}; known: {sorted(known)}")
    settings = _mapping(spec.get("settings"), path, f"data.{label}.settings")
    design = {key: _positive(spec.get(key), path, f"data.{label}.{key}") for key in COUNT_KEYS}
    if design["extrapolate"] and design["interpolate"]:
        fail(path, f"data.{label}: choose extrapolate or interpolate, not both")
    if design["single_pairs"] and not design["interpolate"]:
        fail(path, f"data.{label}.single_pairs mixes single pairs into joined ones: it needs interpolate")
    if spec.get("warm_start") is not None:
        design["warm_start"] = _string(spec["warm_start"], path, f"data.{label}.warm_start")
    language = spec.get("target_language")
    if language is not None:
        _string(language, path, f"data.{label}.target_language")
    train_pairs = _positive(spec.get("train_pairs"), path, f"data.{label}.train_pairs")
    sources = [key for key in ("train", "synthetic", "folder") if key in spec]
    if folder is not None:
        sources, spec = ["folder"], {"folder": str(folder)}
        base = Path.cwd()
    if len(sources) != 1:
        fail(path, f"data.{label} needs one of train (with eval), synthetic or folder; got {sources or 'none'}")
    if sources == ["synthetic"]:
        extra = {"train", "valid", "eval", "train_pairs", "target_language"} & set(spec)
        if extra:
            fail(path, f"data.{label}: a synthetic data setting has no files; remove {sorted(extra)}")
        options = _mapping(spec["synthetic"], path, f"data.{label}.synthetic")
        known = [f.name for f in fields(SyntheticTask)]
        unknown = [key for key in options if key not in known]
        if unknown:  # `{seed:1}` (no space) is YAML's one key 'seed:1'
            fail(path, f"data.{label}.synthetic: unknown keys {unknown}; known: {known}")
        try:
            task = SyntheticTask(**options)
        except ValueError as error:
            fail(path, f"data.{label}.synthetic: {error}")
        several = {key: getattr(task, key) for key in ("max_sentences", "test_sentences", "concat_sentences")
                   if getattr(task, key) != 1}
        if design["interpolate"] and several:
            fail(path, f"data.{label}: interpolate joins single sentences, but the synthetic task "
                        f"already joins several ({', '.join(f'{k}: {v}' for k, v in several.items())}); set them to 1")
        return DataSetting(label, settings=settings, synthetic=task, eval_sets=dict.fromkeys(EVAL_SETS), **design)
    if sources == ["folder"]:
        extra = {"train", "valid", "eval"} & set(spec)
        if extra:
            fail(path, f"data.{label}: a folder data setting takes its files from the folder; remove {sorted(extra)}")
        spec = folder_data(base / _string(spec["folder"], path, f"data.{label}.folder"), design["interpolate"], path)
        language = language or spec["target_language"]
    if "eval" not in spec:
        fail(path, f"data.{label} needs eval (the sets to translate and score)")
    eval_sets = {name: _file_pair(pair, base, path, f"data.{label}.eval.{name}")
                 for name, pair in _mapping(spec["eval"], path, f"data.{label}.eval").items()}
    if not eval_sets:
        fail(path, f"data.{label}.eval names no evaluation set")
    for name, pair in eval_sets.items():
        if design["interpolate"] and pair.join not in (None, design["interpolate"]):
            fail(path, f"data.{label}.eval.{name}.join is {pair.join}, but interpolate joins every "
                        f"evaluation set {design['interpolate']} per line")
    train = _file_pair(spec["train"], base, path, f"data.{label}.train")
    if train_pairs is not None:
        if train.lines is not None:
            fail(path, f"data.{label}: train.lines and train_pairs both cut the training pairs; keep one")
        train = dataclasses.replace(train, lines=train_pairs)
    return DataSetting(
        label,
        train=train,
        valid=_file_pair(spec["valid"], base, path, f"data.{label}.valid") if "valid" in spec else None,
        eval_sets=eval_sets,
        settings=settings,
        target_language=language,
        **design,
    )


def _axis(grid, name, default, path):
    values = grid.get(name, default)
    if not isinstance(values, list) or not values:
        fail(path, f"grid.{name} must be a non-empty list")
    return values


def _grids(spec, path):
    """`grid`: one mapping of axes, or a non-empty list of them; each axis a non-empty
    list of names (method, data) or integers (seed, K)."""
    if isinstance(spec, list):
        if not spec:
            fail(path, "grid: an empty list names no run")
        grids = [_mapping(grid, path, f"grid[{i}]") for i, grid in enumerate(spec)]
    else:
        grids = [_mapping(spec, path, "grid")]
    for grid in grids:
        unknown = set(grid) - GRID_AXES
        if unknown:
            fail(path, f"grid: unknown axes {sorted(unknown)}; axes are {sorted(GRID_AXES)}")
        for name, values in grid.items():
            _axis(grid, name, None, path)
            for value in values:
                if name in ("method", "data") and not isinstance(value, str):
                    fail(path, f"grid.{name}: must be names, got {shown(value)}")
                if name in ("seed", "K") and (not isinstance(value, int) or isinstance(value, bool)):
                    fail(path, f"grid.{name}: must be integers, got {shown(value)}")
                if name in ("seed", "K") and value < 0:
                    fail(path, f"grid.{name}: must be >= 0, got {value}")
    return grids


def expand_grids(recipe, settings, methods, data, grids, path, recipe_name="recipe"):
    """The runs of every product in `grids`, in order; a run named twice is an error."""
    runs = {}
    for grid in grids:
        for run in expand_grid(recipe, settings, methods, data, grid, path, recipe_name):
            if run.id in runs:
                fail(path, f"grid: the run {run.id} is named twice")
            runs[run.id] = run
    return list(runs.values())


def expand_grid(recipe, settings, methods, data, grid, path, recipe_name="recipe"):
    """Every run of the grid (its axes checked by _grids), in a stable order: data, method, K, seed."""
    if "K" in grid:
        for label in grid.get("method", methods):
            if "shape_max_shift" in methods.get(label, {}):
                fail(path, f"methods.{label} sets shape_max_shift, which grid.K overrides; set one of them")
    method_names = _axis(grid, "method", list(methods), path)
    data_names = _axis(grid, "data", list(data), path)
    seeds = _axis(grid, "seed", [1], path)
    shifts = _axis(grid, "K", [None], path)
    for axis, names, known in (("method", method_names, methods), ("data", data_names, data)):
        for name in names:
            if name not in known:
                fail(path, f"grid.{axis} names {name!r}, which is not under {axis}s: {sorted(known)}"
                      if axis == "method" else f"grid.data names {name!r}, not under data: {sorted(known)}")
    runs = []
    for data_name, method in itertools.product(data_names, method_names):
        layers = [(recipe_name, recipe), ("settings", settings), (f"data.{data_name}.settings", data[data_name].settings),
                  (f"methods.{method}", methods[method])]
        config = {key: value for _, keys in layers for key, value in keys.items()}
        sources = {key: where for where, keys in layers for key in keys}
        for shift, seed in itertools.product(shifts if uses_shape(config) else [None], seeds):
            run_config = dict(config, seed=seed)
            if shift is not None:
                run_config["shape_max_shift"] = shift
            runs.append(Run(data_name, method, shift, seed, run_config,
                            {**sources, "seed": "grid.seed", **({"shape_max_shift": "grid.K"} if shift is not None else {})}))
    return runs


def _unused_runs(recipe, settings, methods, data, grids, runs, path, recipe_name):
    """A run of each method and each data setting that no grid line uses, so that
    check_options checks their keys too: with the first run's data setting or method,
    and, for a SHAPE method that does not set its own K, the grid's first K (or 0: a
    grid line naming the method would have to give one)."""
    shifts = [k for grid in grids for k in grid.get("K", [])][:1] or [0]
    first = runs[0]
    unused = [{"method": [m], "data": [first.data], "seed": [1],
               **({"K": shifts} if "shape_max_shift" not in methods[m] else {})}
              for m in methods if m not in {run.method for run in runs}]
    unused += [{"method": [first.method], "data": [d], "seed": [1],
                **({"K": [first.shift]} if first.shift is not None else {})}
               for d in data if d not in {run.data for run in runs}]
    return expand_grids(recipe, settings, methods, data, unused, path, recipe_name)


def _analyses(spec, eval_names, path):
    chosen = {}
    for name, options in _mapping(spec, path, "analyses").items():
        if name == "speed":
            fail(path, "analyses.speed: training speed is measured in every run while it trains; remove it")
        if name not in ANALYSES:
            fail(path, f"analyses: unknown analysis {name!r}; known: {sorted(ANALYSES)}")
        options = _mapping(options, path, f"analyses.{name}")
        unknown = set(options) - set(ANALYSES[name])
        if unknown:
            fail(path, f"analyses.{name}: unknown options {sorted(unknown)}; known: {sorted(ANALYSES[name])}")
        merged = {**ANALYSES[name], **options}
        if "set" in merged and merged["set"] is None:
            merged["set"] = eval_names[0]
        if "sets" in merged and merged["sets"] is None:
            merged["sets"] = list(eval_names)
        for option, value in merged.items():
            ANALYSIS_OPTIONS[option](value, path, f"analyses.{name}.{option}")
        chosen[name] = merged
    return chosen


def folder_data(folder, interpolate=None, path=None):
    """The files of a folder in OpenNMT-py's layout (FOLDER_FILES), as a data setting's
    mapping: training on train, validation on the first 500 val lines, evaluation on
    `valid` (the same), `test` (the first 1000 test lines) and `concat` (those test
    lines joined in pairs with <sep>, the swapped evaluation's input; under
    INTERPOLATE every set is joined N per line, `concat` too). BLEU is computed
    against `ref-val.txt` / `ref-test.txt` where the folder has them (raw text, as
    `onmt-posenc prepare` writes them), else against the target files. Document ids
    (`docid-train.txt`, ...), where the folder has them, keep joined lines within
    documents. The target language is the second word of `languages.txt`."""
    folder = Path(folder).resolve()
    where = f"{path}: " if path else ""
    if not folder.is_dir():
        raise ExperimentError(f"{where}data folder {folder} {'is a file' if folder.exists() else 'does not exist'}; "
                              "name a folder in OpenNMT-py's layout, as `onmt-posenc prepare` writes it")
    missing = [name for name in FOLDER_FILES if not (folder / name).is_file()]
    if missing:
        raise ExperimentError(f"{where}data folder {folder}: missing {', '.join(missing)}; it needs "
                              f"OpenNMT-py's layout ({', '.join(FOLDER_FILES)}), as `onmt-posenc prepare` writes it")

    def pair(part, **cut):
        files = {"src": str(folder / f"src-{part}.txt"), "tgt": str(folder / f"tgt-{part}.txt"), **cut}
        for key, prefix in (("ref", "ref"), ("docids", "docid")):
            if (folder / f"{prefix}-{part}.txt").is_file():
                files[key] = str(folder / f"{prefix}-{part}.txt")
        return files

    def first(part, most):  # at most `most` lines: a shorter file is taken whole
        with open(folder / f"src-{part}.txt", "rb") as f:
            count = sum(1 for _ in f)
        if count == 0:
            raise ExperimentError(f"{where}data folder {folder}: src-{part}.txt is empty")
        return min(most, count)

    valid = pair("val", lines=first("val", FOLDER_VALID_LINES))
    test = pair("test", lines=first("test", FOLDER_TEST_LINES))
    languages = folder / LANGUAGES_FILE
    language = languages.read_text(encoding="utf-8").split()[1:2] if languages.is_file() else []
    return {"train": pair("train"), "valid": valid, "target_language": language[0] if language else None,
            "eval": {"valid": valid, "test": test, "concat": {**test, "join": interpolate or 2}}}


def add_arguments(parser, reporting=False):
    """The arguments that name an experiment, shared by `run` and `report` (`reporting`)."""
    parser.add_argument("experiment", help="the experiment YAML (see onmt_posenc/experiments/spec.py)")
    parser.add_argument("--data", metavar="FOLDER",
                        help=("the folder given to `onmt-posenc run --data`, to report the runs made on it"
                              if reporting else "run on this folder's files instead of the file's data") +
                             f": OpenNMT-py's layout ({', '.join(FOLDER_FILES)}); default output "
                             "runs/<name>-<folder name>")
    parser.add_argument("--output", help="output folder (default: the file's `output`, else runs/<name>)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="override a key of the experiment file, e.g. --set settings.train_steps=100")


def _label_by_folder(mapping, folder_name):
    """With `--data FOLDER`, a data setting of the generated task reads the folder instead:
    its label (in `data` and the grid) becomes the folder's name, so that runs, progress
    and report do not call real files "synthetic"."""
    data = mapping.get("data")
    if not isinstance(data, dict):
        return
    label = re.sub(r"[^\w.-]+", "-", folder_name) or "data"
    generated = [key for key, spec in data.items() if isinstance(spec, dict) and "synthetic" in spec]
    renames = {key: (label if len(generated) == 1 and label not in data else f"{label}-{key}") for key in generated}
    mapping["data"] = {renames.get(key, key): spec for key, spec in data.items()}
    for spec in mapping["data"].values():
        if isinstance(spec, dict) and spec.get("warm_start") in renames:
            spec["warm_start"] = renames[spec["warm_start"]]
    grids = mapping.get("grid")
    for grid in grids if isinstance(grids, list) else [grids]:
        if isinstance(grid, dict) and isinstance(grid.get("data"), list):
            grid["data"] = [renames.get(name, name) for name in grid["data"]]


def from_arguments(args):
    return load(args.experiment, args.overrides, args.output, args.data)


def load(path, overrides=(), output=None, data_folder=None):
    """The experiment of a YAML file, `--set` overrides applied, its runs expanded;
    with `data_folder`, on that folder's files (see folder_data)."""
    path = Path(path)
    try:
        mapping = read_yaml(path) or {}
    except OSError as error:
        raise ExperimentError(f"cannot read experiment file: {error}") from None
    except ConfigFileParserException as error:  # not UTF-8 or not YAML: the file and line
        raise ExperimentError(str(error)) from None
    mapping = apply_overrides(_mapping(mapping, path, "the experiment file"), overrides, path)
    unknown = set(mapping) - TOP_KEYS
    if unknown:
        fail(path, f"unknown keys {sorted(unknown)}; known: {sorted(TOP_KEYS)}")
    base = path.resolve().parent
    name = _string(mapping.get("name", path.stem), path, "name")
    if data_folder is not None:
        name = f"{name}-{Path(data_folder).resolve().name}"
        mapping.pop("output", None)
        _label_by_folder(mapping, Path(data_folder).resolve().name)
    if mapping.get("output") is not None:
        _string(mapping["output"], path, "output")

    recipe = {}
    if mapping.get("recipe") is not None:
        recipe_path = base / _string(mapping["recipe"], path, "recipe")
        if not recipe_path.is_file():
            fail(path, f"recipe {mapping['recipe']} not found ({recipe_path})")
        try:
            recipe = merged_mapping(recipe_path)
        except ConfigFileParserException as error:  # not YAML, not a mapping, an include missing
            fail(path, f"recipe: {error}")
        _option_names(recipe, path, f"recipe {recipe_path}")
        _reject_recipe_corpus_transforms(recipe, recipe_path, path)
    settings = _mapping(mapping.get("settings"), path, "settings")
    methods = _labels(_mapping(mapping.get("methods"), path, "methods"), path, "methods")
    if not methods:
        fail(path, "methods: name at least one position method")
    for label, keys in methods.items():
        methods[label] = _mapping(keys, path, f"methods.{label}")
    for where, keys in [("settings", settings), *((f"methods.{m}", k) for m, k in methods.items())]:
        _reject_runner_keys(keys, where, path)
    baseline = _string(mapping.get("baseline", next(iter(methods))), path, "baseline")
    if baseline not in methods:
        fail(path, f"baseline {baseline!r} is not among methods: {sorted(methods)}")

    data = {label: _data_setting(label, spec, base, path, data_folder)
            for label, spec in _labels(_mapping(mapping.get("data"), path, "data"), path, "data").items()}
    if not data:
        fail(path, "data: name at least one data setting")
    for label, setting in data.items():
        _reject_runner_keys(setting.settings, f"data.{label}.settings", path)
    grids = _grids(mapping.get("grid"), path)
    gridded = [data[label] for label in dict.fromkeys(d for grid in grids for d in grid.get("data", data))
               if label in data]
    layers = [(f"recipe {mapping.get('recipe')}", recipe, gridded), ("settings", settings, gridded),
              *((f"methods.{m}", k, gridded) for m, k in methods.items())]
    _reject_overridden_keys(layers, data, path)
    runs = expand_grids(recipe, settings, methods, data, grids, path, f"recipe {mapping.get('recipe')}")
    for index, run in enumerate(runs):
        warm_start_source(data, runs[:index], run, path)
    unused = _unused_runs(recipe, settings, methods, data, grids, runs, path, f"recipe {mapping.get('recipe')}")

    evaluation = _mapping(mapping.get("evaluation"), path, "evaluation")
    unknown = set(evaluation) - {"sets", "average_last", "translate"}
    if unknown:
        fail(path, f"evaluation: unknown keys {sorted(unknown)} (sets, average_last, translate)")
    used_data = {run.data for run in runs}
    common = [n for n in next(iter(data.values())).eval_sets if all(n in data[d].eval_sets for d in used_data)]
    eval_sets = common if evaluation.get("sets") is None else _names(evaluation["sets"], path, "evaluation.sets")
    if not eval_sets:
        fail(path, f"the data settings {sorted(used_data)} share no evaluation set; name the same sets in each")
    for label in used_data:
        missing = [n for n in eval_sets if n not in data[label].eval_sets]
        if missing:
            fail(path, f"evaluation.sets names {missing}, which data.{label} has no eval set for")
    average_last = _positive(evaluation.get("average_last"), path, "evaluation.average_last")
    for run in runs:  # averaging more checkpoints than training keeps would average fewer, unsaid
        keep = run.config.get("keep_checkpoint")
        if average_last and isinstance(keep, int) and 0 < keep < average_last:
            fail(path, f"evaluation.average_last: {average_last} checkpoints, but "
                        f"{run.sources.get('keep_checkpoint', 'settings')}.keep_checkpoint keeps only {keep} "
                        f"(run {run.id}); raise keep_checkpoint or lower average_last")

    analyses = _analyses(mapping.get("analyses"), eval_sets, path)
    for analysis, options in analyses.items():
        for label in sorted(used_data):
            missing = [n for n in options.get("sets", [options.get("set")]) if n not in data[label].eval_sets]
            if missing:
                fail(path, f"analyses.{analysis} names {missing}, which data.{label} has no eval set for")
    translate = _option_names(_mapping(evaluation.get("translate"), path, "evaluation.translate"), path,
                              "evaluation.translate")
    owned = set(translate) & set(RUNNER_TRANSLATE_KEYS)
    if owned:
        fail(path, f"evaluation.translate sets {sorted(owned)}, which the runner sets for every translation")
    tensorboard = mapping.get("tensorboard", False)
    if not isinstance(tensorboard, bool):
        fail(path, f"tensorboard: must be true or false, got {shown(tensorboard)}")
    return Experiment(
        path=path,
        name=name,
        tensorboard=tensorboard,
        output=Path(output or mapping.get("output") or Path("runs") / name),
        baseline=baseline,
        data=data,
        runs=runs,
        eval_sets=eval_sets,
        average_last=average_last,
        translate=translate,
        analyses=analyses,
        unused=unused,
    )
