"""Keys that the experiment file sets where something else owns them: the runner (for every
run), a data setting's transforms (for its runs), or no transform reads them. `locate(where,
key)`: the file and line of `key` in the layer `where` (validation.key_place)."""
from onmt_posenc.experiments.file.spec import (EXTRAPOLATE_KEYS, INTERPOLATE_KEYS, JOIN_TRAINING_KEYS, RUNNER_KEYS,
                                               SETTING_TRANSFORMS, data_setting_keys, fail, shown)

# each transform option the runner sets, and the data setting key that makes the runner set it
TRANSFORM_OPTION_OWNERS = {**dict.fromkeys(EXTRAPOLATE_KEYS, "extrapolate"),
                           **dict.fromkeys(INTERPOLATE_KEYS, "interpolate"),
                           **dict.fromkeys(JOIN_TRAINING_KEYS, "join_training")}


def reject_runner_keys(keys, where, locate):
    owned = sorted(set(keys) & set(RUNNER_KEYS))
    if owned:
        fail(locate(where, owned[0]), f"{where} sets {owned}, which the runner sets for every run")
    if "seed" in keys:  # grid.seed would override it in every run, without a word
        fail(locate(where, "seed"), f"{where}.seed: each run's seed is set by grid.seed (default [1]); list the seeds "
                                    "there")
    reject_early_stopping(keys, where, locate)


def reject_early_stopping(keys, where, locate):
    """Refused in every layer that reaches a run's config, the recipe's included."""
    if keys.get("early_stopping"):  # a run whose last checkpoint is short of train_steps is unfinished to the runner
        fail(locate(where, "early_stopping"),
             f"{where}.early_stopping: the runner trains every run to train_steps and the report judges its "
             "plateau from the validation curve; a run stopped early would be taken for an unfinished one. "
             "Set train_steps to where the curve flattens instead")


def reject_overridden_keys(layers, data, locate):
    """Keys that a data setting's transforms own, or transforms the runner places itself.
    `layers`: (where, keys, the data settings those keys reach)."""
    layers = layers + [(f"data.{label}.settings", setting.settings, [setting]) for label, setting in data.items()]
    for where, keys, reached in layers:
        transforms = keys.get("transforms") or []
        if not isinstance(transforms, list) or not all(isinstance(name, str) for name in transforms):
            fail(locate(where, "transforms"), f"{where}.transforms: must be a list of transform names, got "
                                              f"{shown(transforms)}")
        for name in transforms:
            if name in SETTING_TRANSFORMS:
                fail(locate(where, "transforms"), f"{where} lists the transform {name!r}, which would reach the "
                                                  f"validation corpus too; declare `{SETTING_TRANSFORMS[name]}: N` on a "
                                                  "data setting instead")
        for setting in reached:
            own = set(data_setting_keys(setting))
            owned = sorted(set(keys) & own)
            if owned:
                fail(locate(where, owned[0]), f"{where} sets {owned}, which data.{setting.label}."
                                              f"{TRANSFORM_OPTION_OWNERS[owned[0]]} sets for its runs")
            # read by filtertoolong, concat_pairs and join_adjacent only, which the runner puts on
            # the corpora of the data settings that ask for them: anywhere else they would change nothing
            unread = sorted(set(keys) & set(TRANSFORM_OPTION_OWNERS) - own)
            if unread:
                fail(locate(where, unread[0]), f"{where} sets {unread}, which no transform of "
                                               f"data.{setting.label} ({setting.kind}) reads: it would change "
                                               f"nothing; declare `{TRANSFORM_OPTION_OWNERS[unread[0]]}: N` on the "
                                               "data setting instead")
