"""An experiment file read and checked (onmt_posenc.experiments.file.spec says what it holds), in
one direction: the files read (reading: YAML, `--set` overrides, the recipe), the file's keys
checked against its schema (validation, schema), then what no key says alone: keys that
others own (owned_keys), the data settings and their files
(data_settings, data_folder), the grid expanded into runs (grid), the evaluation and the
analyses. A mistake is an ExperimentError naming the file and the key."""
from pathlib import Path

from onmt_posenc.experiments.file.data_folder import label_by_folder
from onmt_posenc.experiments.file.data_settings import data_setting
from onmt_posenc.experiments.file.grid import expand_grids, unused_runs
from onmt_posenc.experiments.file.owned_keys import reject_early_stopping, reject_overridden_keys, reject_runner_keys
from onmt_posenc.experiments.file.reading import read_experiment_file, read_recipe
from onmt_posenc.experiments.file.spec import (FOLDER_FILES, RUNNER_TRANSLATE_KEYS, VARIANT_JOINT, Experiment, Variant,
                                               fail, takes_translate_options, warm_start_source)
from onmt_posenc.experiments.file.validation import key_place, validated


def _analyses(keys, eval_names):
    """{name: options} of the analyses asked for, a `set` or `sets` not given being the
    evaluation's (the first set, every set)."""
    chosen = keys.chosen()
    for options in chosen.values():
        if "set" in options and options["set"] is None:
            options["set"] = eval_names[0]
        if "sets" in options and options["sets"] is None:
            options["sets"] = list(eval_names)
    return chosen


def _variants(keys, methods, runs, locate):
    """{name: Variant} of evaluation.variants: each applies to the methods it names, each of whose
    runs' models must take its translate options (spec.takes_translate_options), else to every
    method whose runs' models do; one that applies to none is an error, and so is a translate key
    the runner sets."""
    variants = {}
    for name, keys_of in keys.items():
        where = f"evaluation.variants.{name}"
        translate = dict(keys_of.translate)
        owned = sorted(set(translate) & set(RUNNER_TRANSLATE_KEYS))
        if owned:
            fail(locate(f"{where}.translate", owned[0]),
                 f"{where}.translate sets {owned}, which the runner sets for every translation")
        clashing = [label for label in methods if VARIANT_JOINT in label and label.rsplit(VARIANT_JOINT, 1)[1] == name]
        if clashing:
            fail(locate(where, "methods"), f"{where}: the method {clashing[0]!r} has the name the report gives "
                                           f"a variant's runs ({clashing[0]}); rename one")

        def takes(label):
            return all(takes_translate_options(run.config, translate) for run in runs if run.method == label)

        if keys_of.methods is None:
            chosen = tuple(label for label in methods if takes(label))
            if not chosen:
                fail(locate(where, "translate"), f"{where}: no method's models take {sorted(translate)}")
        else:
            unknown = [label for label in keys_of.methods if label not in methods]
            if unknown:
                fail(locate(where, "methods"), f"{where}.methods names {unknown}, which are not under methods: "
                                               f"{sorted(methods)}")
            refused = [label for label in keys_of.methods if not takes(label)]
            if refused:
                fail(locate(where, "methods"), f"{where}.methods: the models of {refused} cannot take "
                                               f"{sorted(translate)} (onmt_translate refuses it for their position "
                                               "method)")
            chosen = tuple(keys_of.methods)
        variants[name] = Variant(methods=chosen, translate=translate)
    return variants


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
                        help="override a key of the experiment file, e.g. --set settings.train_steps=100; "
                             "KEY.PATH=null removes the file's key (the recipe's value or the default holds)")


def from_arguments(args):
    return load(args.experiment, args.overrides, args.output, args.data)


def load(path, overrides=(), output=None, data_folder=None):
    """The experiment of a YAML file, `--set` overrides applied, its runs expanded;
    with `data_folder`, on that folder's files (see folder_data)."""
    path = Path(path)
    mapping, overridden = read_experiment_file(path, overrides)
    if data_folder is not None:
        mapping.pop("output", None)
        label_by_folder(mapping, Path(data_folder).resolve().name)
    keys = validated(mapping, path, overridden)

    def locate(source, key):
        return key_place(mapping, path, overridden, source, key)

    # relative paths: to the file that gives the key (an included file's own folder)
    recipe = read_recipe(keys.recipe, mapping.origin("recipe", path))
    base = Path(mapping.origin("data", path)).resolve().parent
    name = keys.name or path.stem
    if data_folder is not None:
        name = f"{name}-{Path(data_folder).resolve().name}"

    settings = dict(keys.settings)
    methods = {label: dict(options) for label, options in keys.methods.items()}
    if not methods:
        fail(path, "methods: name at least one position method")
    for where, options in [("settings", settings), *((f"methods.{m}", k) for m, k in methods.items())]:
        reject_runner_keys(options, where, locate)
    baseline = keys.baseline or next(iter(methods))
    if baseline not in methods:
        fail(path, f"baseline {baseline!r} is not among methods: {sorted(methods)}")

    data = {label: data_setting(label, setting, base, path, data_folder) for label, setting in keys.data.items()}
    if not data:
        fail(path, "data: name at least one data setting")
    for label, setting in data.items():
        reject_runner_keys(setting.settings, f"data.{label}.settings", locate)
    grids = [line.model_dump(exclude_none=True) for line in keys.grid]  # the axes each line gives
    gridded = [data[label] for label in dict.fromkeys(d for grid in grids for d in grid.get("data", data))
               if label in data]
    reject_early_stopping(recipe, f"recipe {keys.recipe}", locate)
    layers = [(f"recipe {keys.recipe}", recipe, gridded), ("settings", settings, gridded),
              *((f"methods.{m}", k, gridded) for m, k in methods.items())]
    reject_overridden_keys(layers, data, locate)
    runs = expand_grids(recipe, settings, methods, data, grids, path, f"recipe {keys.recipe}", locate)
    for index, run in enumerate(runs):
        warm_start_source(data, runs[:index], run, path)
    unused = unused_runs(recipe, settings, methods, data, grids, runs, path, f"recipe {keys.recipe}", locate)

    used_data = {run.data for run in runs}
    common = [n for n in data[runs[0].data].eval_sets if all(n in data[d].eval_sets for d in used_data)]
    eval_sets = common if keys.evaluation.sets is None else keys.evaluation.sets
    if not eval_sets:
        fail(path, f"the data settings {sorted(used_data)} share no evaluation set; name the same sets in each")
    for label in used_data:
        missing = [n for n in eval_sets if n not in data[label].eval_sets]
        if missing:
            fail(path, f"evaluation.sets names {missing}, which data.{label} has no eval set for")
    average_last = keys.evaluation.average_last
    for run in runs:  # averaging more checkpoints than training keeps would average fewer, unsaid
        keep = run.config.get("keep_checkpoint")
        if average_last and isinstance(keep, int) and 0 < keep < average_last:
            fail(path, f"evaluation.average_last: {average_last} checkpoints, but "
                        f"{run.sources.get('keep_checkpoint', 'settings')}.keep_checkpoint keeps only {keep} "
                        f"(run {run.id}); raise keep_checkpoint or lower average_last")

    analyses = _analyses(keys.analyses, eval_sets)
    for analysis, options in analyses.items():
        for label in sorted(used_data):
            missing = [n for n in options.get("sets", [options.get("set")]) if n not in data[label].eval_sets]
            if missing:
                fail(path, f"analyses.{analysis} names {missing}, which data.{label} has no eval set for")
    translate = dict(keys.evaluation.translate)
    owned = set(translate) & set(RUNNER_TRANSLATE_KEYS)
    if owned:
        fail(locate("evaluation.translate", sorted(owned)[0]),
             f"evaluation.translate sets {sorted(owned)}, which the runner sets for every translation")
    variants = _variants(keys.evaluation.variants, methods, runs + unused, locate)
    return Experiment(
        path=path,
        name=name,
        tensorboard=keys.tensorboard,
        output=Path(output or keys.output or Path("runs") / name),
        baseline=baseline,
        data=data,
        runs=runs,
        eval_sets=eval_sets,
        average_last=average_last,
        translate=translate,
        analyses=analyses,
        unused=unused,
        locate=locate,
        variants=variants,
    )
