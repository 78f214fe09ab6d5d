"""Where a run of an experiment stands, decided in one place for the runner (which acts on it)
and the report (which shows it), with the same words.

    missing               nothing stored yet
    unreadable            a result.json or failure.json that cannot be read or used
    failed                its failure.json
    finished              its result.json, made with the file's settings and evaluation
    more_updates          finished with fewer updates than the file asks now (train_steps
                          raised, nothing else): training goes on from its newest checkpoint
    other_settings        finished with other settings than the file makes now
    warm_source_changed   started (warm_start) from a model that has changed since
    evaluated_otherwise   finished, but evaluated with other evaluation settings: evaluated
                          again from its checkpoints, without training
"""
from pathlib import Path
from typing import NamedTuple

import yaml

from onmt_posenc.experiments import curves
from onmt_posenc.experiments.store import (FAILURE, RESULT, evaluated_otherwise, is_stale, read_stored, settings_of,
                                           warm_source_changed)

# The states a finished run's figures are left out of the report's tables for
STALE = ("more_updates", "other_settings", "warm_source_changed", "evaluated_otherwise")


class RunState(NamedTuple):
    kind: str  # one of the states above
    why: str  # what it means for this run, in the words the runner and the report both show
    record: dict = None  # the stored result or failure, where one was read


def goes_on(stored, config):
    """Can a run made with the config `stored` go on to `config`? The same settings, or
    the same but for more updates (train_steps raised: training continues from the
    newest checkpoint, as if it had been asked for that many from the start, apart from
    the restarted data iterator)."""
    old, new = settings_of(stored), settings_of(yaml.safe_load(yaml.safe_dump(config)))
    steps = curves.DEFAULT_TRAIN_STEPS
    return old.pop("train_steps", steps) <= new.pop("train_steps", steps) and old == new


def run_state(directory, config, experiment, setting):
    """The state of the run stored in `directory`, whose config the file makes as `config`."""
    directory = Path(directory)
    for name in (RESULT, FAILURE):
        if (directory / name).is_file():
            record, unreadable = read_stored(directory / name)
            break
    else:
        return RunState("missing", "not run yet")
    if unreadable:
        return RunState("unreadable", f"{unreadable}; `onmt-posenc run` does this run again from its newest "
                                      "checkpoint")
    if record["status"] != "finished":
        return RunState("failed", record.get("error") or "failed", record)
    if warm_source_changed(directory, config):
        return RunState("warm_source_changed", f"{directory} holds a finished run that started from "
                                               f"{config['train_from']} before that model changed; remove that folder "
                                               "to run it again from the new model", record)
    if is_stale(record, config):
        if goes_on(record.get("config") or {}, config):
            return RunState("more_updates", f"finished at {record['config'].get('train_steps')} updates; "
                                            f"`onmt-posenc run` trains it on to {config.get('train_steps')}", record)
        return RunState("other_settings", f"{directory} holds a finished run with other settings than "
                                          f"{experiment.path} makes now; remove that folder to run it again with the "
                                          "new settings", record)
    if evaluated_otherwise(record, experiment, setting):
        return RunState("evaluated_otherwise", f"{directory} holds a run evaluated with other evaluation settings "
                                               f"(sets, translate, average_last or analyses) than {experiment.path} "
                                               "makes now; `onmt-posenc run` evaluates it again from its last "
                                               "checkpoint, without training", record)
    return RunState("finished", "finished", record)
