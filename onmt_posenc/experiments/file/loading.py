"""An experiment file read and checked (onmt_posenc.experiments.file.spec says what it holds), in
one direction: the files read (reading: YAML, `--set` overrides, the recipe), then
the checks of their mappings (values, owned_keys), the data settings and their files
(data_settings, data_folder), the grid expanded into runs (grid), the evaluation and the
analyses. A mistake is an ExperimentError naming the file and the key."""
import functools
from pathlib import Path

from onmt_posenc.experiments.file.data_folder import label_by_folder
from onmt_posenc.experiments.file.data_settings import data_setting
from onmt_posenc.experiments.file.reading import read_experiment_file
from onmt_posenc.experiments.file.grid import checked_grids, expand_grids, unused_runs
from onmt_posenc.experiments.file.owned_keys import reject_early_stopping, reject_overridden_keys, reject_runner_keys
from onmt_posenc.experiments.file.spec import (ANALYSES, FOLDER_FILES, RUNNER_TRANSLATE_KEYS, Experiment, fail, shown,
                                               warm_start_source)
from onmt_posenc.experiments.file.values import (check_integer, check_labels, check_mapping, check_names, check_offsets,
                                                 check_option_names, check_positive, check_separator, check_string)


# What each analysis option must be, checked when the file loads: the runner and the
# report take them as they are, after every run has trained (and length buckets of
# width 0 would never end). An option means the same in every analysis that has it.
ANALYSIS_OPTIONS = {
    "set": check_string, "sets": check_names, "offsets": check_offsets, "sep": check_separator,
    "width": functools.partial(check_integer, least=1), "sentences": functools.partial(check_integer, least=1),
    "position_width": functools.partial(check_integer, least=1),
    "frequency_bins": functools.partial(check_integer, least=1), "train_examples": check_integer,
}


def _analyses(spec, eval_names, path):
    chosen = {}
    for name, options in check_mapping(spec, path, "analyses").items():
        if name == "speed":
            fail(path, "analyses.speed: training speed is measured in every run while it trains; remove it")
        if name not in ANALYSES:
            fail(path, f"analyses: unknown analysis {name!r}; known: {sorted(ANALYSES)}")
        options = check_mapping(options, path, f"analyses.{name}")
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


def add_arguments(parser, reporting=False):
    """The arguments that name an experiment, shared by `run` and `report` (`reporting`)."""
    parser.add_argument("experiment", nargs="?" if reporting else None,
                        help="the experiment YAML (see onmt_posenc/experiments/file/spec.py)")
    parser.add_argument("--data", metavar="FOLDER",
                        help=("the folder given to `onmt-posenc run --data`, to report the runs made on it"
                              if reporting else "run on this folder's files instead of the file's data") +
                             f": OpenNMT-py's layout ({', '.join(FOLDER_FILES)}); default output "
                             "runs/<name>-<folder name>")
    parser.add_argument("--output", help="output folder (default: the file's `output`, else runs/<name>)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="override a key of the experiment file, e.g. --set settings.train_steps=100")


def from_arguments(args):
    return load(args.experiment, args.overrides, args.output, args.data)


def load(path, overrides=(), output=None, data_folder=None):
    """The experiment of a YAML file, `--set` overrides applied, its runs expanded;
    with `data_folder`, on that folder's files (see folder_data)."""
    path = Path(path)
    mapping, recipe = read_experiment_file(path, overrides)
    base = path.resolve().parent
    name = check_string(mapping.get("name", path.stem), path, "name")
    if data_folder is not None:
        name = f"{name}-{Path(data_folder).resolve().name}"
        mapping.pop("output", None)
        label_by_folder(mapping, Path(data_folder).resolve().name)
    if mapping.get("output") is not None:
        check_string(mapping["output"], path, "output")

    settings = check_mapping(mapping.get("settings"), path, "settings")
    methods = check_labels(check_mapping(mapping.get("methods"), path, "methods"), path, "methods")
    if not methods:
        fail(path, "methods: name at least one position method")
    for label, keys in methods.items():
        methods[label] = check_mapping(keys, path, f"methods.{label}")
    for where, keys in [("settings", settings), *((f"methods.{m}", k) for m, k in methods.items())]:
        reject_runner_keys(keys, where, path)
    baseline = check_string(mapping.get("baseline", next(iter(methods))), path, "baseline")
    if baseline not in methods:
        fail(path, f"baseline {baseline!r} is not among methods: {sorted(methods)}")

    data = {label: data_setting(label, spec, base, path, data_folder)
            for label, spec in check_labels(check_mapping(mapping.get("data"), path, "data"), path, "data").items()}
    if not data:
        fail(path, "data: name at least one data setting")
    for label, setting in data.items():
        reject_runner_keys(setting.settings, f"data.{label}.settings", path)
    grids = checked_grids(mapping.get("grid"), path)
    gridded = [data[label] for label in dict.fromkeys(d for grid in grids for d in grid.get("data", data))
               if label in data]
    reject_early_stopping(recipe, f"recipe {mapping.get('recipe')}", path)
    layers = [(f"recipe {mapping.get('recipe')}", recipe, gridded), ("settings", settings, gridded),
              *((f"methods.{m}", k, gridded) for m, k in methods.items())]
    reject_overridden_keys(layers, data, path)
    runs = expand_grids(recipe, settings, methods, data, grids, path, f"recipe {mapping.get('recipe')}")
    for index, run in enumerate(runs):
        warm_start_source(data, runs[:index], run, path)
    unused = unused_runs(recipe, settings, methods, data, grids, runs, path, f"recipe {mapping.get('recipe')}")

    evaluation = check_mapping(mapping.get("evaluation"), path, "evaluation")
    unknown = set(evaluation) - {"sets", "average_last", "translate"}
    if unknown:
        fail(path, f"evaluation: unknown keys {sorted(unknown)} (sets, average_last, translate)")
    used_data = {run.data for run in runs}
    common = [n for n in data[runs[0].data].eval_sets if all(n in data[d].eval_sets for d in used_data)]
    eval_sets = common if evaluation.get("sets") is None else check_names(evaluation["sets"], path, "evaluation.sets")
    if not eval_sets:
        fail(path, f"the data settings {sorted(used_data)} share no evaluation set; name the same sets in each")
    for label in used_data:
        missing = [n for n in eval_sets if n not in data[label].eval_sets]
        if missing:
            fail(path, f"evaluation.sets names {missing}, which data.{label} has no eval set for")
    average_last = check_positive(evaluation.get("average_last"), path, "evaluation.average_last")
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
    translate = check_option_names(check_mapping(evaluation.get("translate"), path, "evaluation.translate"), path,
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
