"""Where a run of an experiment stands, decided in one place for the runner (which acts on it)
and the report (which shows it), with the same words: whether what is stored is what the
experiment file makes now (its settings, the model it started from, its evaluation).

    missing               no record stored yet: not run, or started (checkpoints but no record:
                          running now, or killed without one)
    unreadable            a result.json or failure.json that cannot be read or used
    failed                its failure.json
    interrupted           its interrupted.json: stopped by a signal; the same command goes on
                          from its newest checkpoint
    finished              its result.json, made with the file's settings and evaluation
    more_updates          finished with fewer updates than the file asks now (train_steps
                          raised, nothing else): training goes on from its newest checkpoint
    other_settings        finished with other settings than the file makes now
    other_data            finished, trained on files that have changed since (the same paths:
                          a cut of other size, synthetic data made again, a corpus prepared again)
    warm_source_changed   started (warm_start) from a model that has changed since
    evaluated_otherwise   finished, but evaluated with other evaluation settings: evaluated
                          again from its checkpoints, without training
"""
import functools
import json
import os
from pathlib import Path
from typing import NamedTuple

import yaml

from onmt_posenc.core.scoring import LANGUAGE_TOKENIZERS
from onmt_posenc.experiments.running import curves
from onmt_posenc.experiments.running.records import read_stored
from onmt_posenc.experiments.file.spec import RUNNER_KEYS
from onmt_posenc.experiments.running.store import (FAILURE, INTERRUPTED, RESULT, TRAINING_DATA, WARM_START, checkpoint_step,
                                                   file_digest, read_json, saved_checkpoints)

# The states a finished run's figures are left out of the report's tables for
STALE = ("more_updates", "other_settings", "other_data", "warm_source_changed", "evaluated_otherwise")


class RunState(NamedTuple):
    kind: str  # one of the states above
    why: str  # what it means for this run, in the words the runner and the report both show
    record: dict = None  # the stored result or failure, where one was read


def settings_of(config):
    """What a run's OpenNMT-py config says about the experiment: all but the paths the
    runner sets inside the output folder (its runs' files, the copies of cut corpora),
    so that a moved or copied output folder holds the same runs. Corpora elsewhere
    stay as they are: other files are another run. Which GPU a run trains on
    (`gpu_ranks`) is the machine's, stored in its result's `machine`, not the
    experiment's: a run made on CPU and one made with `--set settings.gpu_ranks=[0]`
    are the same run (`world_size` stays: it multiplies the batch)."""
    settings = {key: value for key, value in config.items() if key not in (*RUNNER_KEYS, "gpu_ranks")}
    if "save_model" not in config:
        return {**settings, "data": config.get("data"), "train_from": config.get("train_from")}
    output = Path(config["save_model"]).parents[3]  # <output>/<data>/<label>/seed<n>/model

    def inside_output(path):
        path = Path(path)
        return f"<output>/{path.relative_to(output).as_posix()}" if path.is_relative_to(output) else str(path)

    if config.get("train_from"):  # warm_start: the model the run started from is part of what it is
        settings["train_from"] = inside_output(config["train_from"])
    settings["data"] = {name: {key: inside_output(value) if key.startswith("path_") else value
                               for key, value in corpus.items()}
                        for name, corpus in (config.get("data") or {}).items()}
    return settings


def is_stale(record, config):
    """A finished run whose stored config has other settings than `config` (what the
    experiment file makes now)."""
    return settings_of(record.get("config") or {}) != settings_of(config)


@functools.lru_cache(maxsize=None)
def _digest(path, modified_ns, size):
    return file_digest(path)


def training_data_of(config):
    """SHA-256 of each file the run's corpora name ({corpus: {path_src: digest, ...}}; None
    for a file that is not there). Stored in result.json: a run's identity names its data by
    path only, and a cut or a prepared corpus is written again at the same path. Each file is
    read once for all the runs that name it while it is unchanged."""
    def digest(path):
        try:
            stat = os.stat(path)
        except OSError:
            return None
        return _digest(str(path), stat.st_mtime_ns, stat.st_size)

    return {name: {key: digest(value) for key, value in corpus.items() if key.startswith("path_")}
            for name, corpus in (config.get("data") or {}).items()}


def trained_on(directory):
    """training_data_of the run's config when the attempt in `directory` started training
    (TRAINING_DATA), or None (not kept, or unreadable)."""
    path = Path(directory) / TRAINING_DATA
    stored = read_stored(path)[0] if path.is_file() else None
    return stored if isinstance(stored, dict) else None


def changed_training_data(record, config):
    """'corpus.key' of each file a finished run was trained on that is another now; files not
    there now, or not recorded (a record written before records held them), say nothing."""
    stored, now = record.get("training_data") or {}, training_data_of(config)
    return [f"{name}.{key}" for name, files in stored.items() for key, digest in files.items()
            if now.get(name, {}).get(key) not in (None, digest)]


def warm_source_changed(directory, config):
    """Has the model a warm-started run started from changed since (its source trained
    further, trained again, or removed)? Its identity names that model by path only, so
    the run keeps the model's digest (WARM_START) and compares; without it, nothing
    vouches for the model it started from."""
    if not config.get("train_from"):
        return False
    if not (Path(directory) / WARM_START).is_file():
        return True
    try:
        stored = read_json(Path(directory) / WARM_START).get("sha256")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return True  # unreadable: nothing vouches for the model it started from
    return stored != file_digest(config["train_from"])


def evaluation_of(experiment, run):
    """What a run's scores and analyses depend on besides its model: the evaluation sets
    (each file's SHA-256, the lines taken and joined; a synthetic task's parameters), the
    translate options (but the GPU), the checkpoints averaged, the analyses' options and the
    evaluation variants that apply to it (their translate options; none: no key, as records made
    before variants existed hold none). Stored in result.json; a finished run whose evaluation is
    not what the file makes now is evaluated again from its checkpoints (runner), stale until then
    (report)."""
    setting = experiment.data[run.data]
    sets = {name: {"src": file_digest(pair.src), "tgt": file_digest(pair.tgt),
                   "ref": file_digest(pair.ref) if pair.ref else None,
                   "lines": pair.lines, "join": setting.interpolate or pair.join,
                   # the documents that bound joined lines
                   **({"docids": file_digest(pair.docids)} if pair.docids and (setting.interpolate or pair.join)
                      else {}),
                   # a plain space (joined_sets) instead of <sep>; recorded only then, as records made
                   # before the key existed joined with <sep>
                   **({"joint": pair.joint} if pair.joint != "sep" else {})}
            for name, pair in setting.eval_sets.items() if pair is not None}  # synthetic: generated later
    # which GPU translates (`gpu`) is the machine's, as gpu_ranks is in settings_of
    translate = {key: value for key, value in experiment.translate.items() if key != "gpu"}
    evaluation = {"sets": sets, "synthetic": setting.synthetic.__dict__ if setting.synthetic else None,
                  "translate": translate, "average_last": experiment.average_last,
                  "analyses": experiment.analyses}
    if setting.target_language in LANGUAGE_TOKENIZERS:  # scored with another tokenizer than 13a
        evaluation["target_language"] = setting.target_language
    variants = {name: variant.translate for name, variant in experiment.variants_of(run).items()}
    if variants:
        evaluation["variants"] = variants
    return json.loads(json.dumps(evaluation, default=str))  # as result.json will read it back


def evaluated_otherwise(record, experiment, run):
    """Was a finished run evaluated with other evaluation settings than the file's now
    (or without them recorded), or without a set the file now translates, as itself or as one
    of its variants (evaluation_of holds every set's files, not which are translated: a set
    taken off the list leaves its stored BLEU, which harms nothing)?"""
    translated = [record.get("bleu") or {}, *((record.get("variants") or {}).get(name, {}).get("bleu") or {}
                                              for name in experiment.variants_of(run))]
    untranslated = [name for scores in translated for name in experiment.translated_sets if name not in scores]
    return bool(untranslated) or record.get("evaluation") != evaluation_of(experiment, run)


def goes_on(stored, config):
    """Can a run made with the config `stored` go on to `config`? The same settings, or
    the same but for more updates (train_steps raised: training continues from the
    newest checkpoint, as if it had been asked for that many from the start, apart from
    the restarted data iterator)."""
    old, new = settings_of(stored), settings_of(yaml.safe_load(yaml.safe_dump(config)))
    steps = curves.DEFAULT_TRAIN_STEPS
    return old.pop("train_steps", steps) <= new.pop("train_steps", steps) and old == new


def start_again_why(directory, config):
    """Why the unfinished attempt in `directory` cannot go on to `config` from its
    checkpoints, or None where it can: it was made with another config, from a
    warm-start model that has changed since, or on training files that have."""
    directory = Path(directory)
    try:
        stored = yaml.safe_load((directory / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        stored = None
    if not isinstance(stored, dict):
        return "without a readable config.yaml"
    if not goes_on(stored, config):
        return "with another config"
    if warm_source_changed(directory, config):
        return f"from {config['train_from']} as it was before it changed"
    changed = changed_training_data({"training_data": trained_on(directory)}, config)
    if changed:
        return f"on training files that have changed since ({', '.join(changed)})"
    return None


def starts_again(why):
    """The words for an attempt that `onmt-posenc run` starts again; `why`: start_again_why's."""
    return f"an attempt {why}: `onmt-posenc run` starts it again"


def how_it_goes_on(directory, config):
    """What `onmt-posenc run` does with a run that has no usable record: it goes on from
    the checkpoints in `directory` where they were made with `config`, else starts again."""
    why = start_again_why(directory, config)
    if why:
        return starts_again(why)
    return "`onmt-posenc run` goes on from its newest complete checkpoint, or starts again if none is"


def interrupted_why(record, start_again=None):
    """What an interrupted run's record means, in the words the runner and the report show;
    `start_again`: why its checkpoints cannot be gone on from (start_again_why)."""
    at = f" at update {record['step']}" if record.get("step") else " before its first checkpoint"
    if start_again:
        return f"interrupted{at}, {starts_again(start_again)}"
    command = f"`{record['command']}`" if record.get("command") else "the same `onmt-posenc run` command"
    return f"interrupted{at}; {command} goes on from where it stopped"


def run_state(directory, config, experiment, run):
    """The state of the run `run` stored in `directory`, whose config the file makes as `config`."""
    directory = Path(directory)
    for name in (RESULT, FAILURE, INTERRUPTED):
        if (directory / name).is_file():
            record, unreadable = read_stored(directory / name)
            break
    else:
        saved = saved_checkpoints(directory)
        if not saved:
            return RunState("missing", "not run yet")
        return RunState("missing", f"started, no result yet: checkpoints up to update {checkpoint_step(saved[-1])} "
                                   f"(running now, or stopped without a record); {how_it_goes_on(directory, config)}")
    if unreadable:
        return RunState("unreadable", f"{unreadable}; {how_it_goes_on(directory, config)}")
    if record["status"] == "interrupted":
        return RunState("interrupted", interrupted_why(record, start_again_why(directory, config)), record)
    if record["status"] != "finished":
        return RunState("failed", record.get("error") or "failed", record)
    if warm_source_changed(directory, config):
        return RunState("warm_source_changed", f"{directory} holds a finished run that started from "
                                               f"{config['train_from']} before that model changed; remove that folder "
                                               "to run it again from the new model", record)
    changed = changed_training_data(record, config)
    if changed:
        return RunState("other_data", f"{directory} holds a finished run trained on files that have changed since "
                                      f"({', '.join(changed)}: the same paths, other contents); remove that folder "
                                      "to run it again on them", record)
    if is_stale(record, config):
        if goes_on(record.get("config") or {}, config):
            return RunState("more_updates", f"finished at {record['config'].get('train_steps')} updates; "
                                            f"`onmt-posenc run` trains it on to {config.get('train_steps')}", record)
        return RunState("other_settings", f"{directory} holds a finished run with other settings than "
                                          f"{experiment.path} makes now; remove that folder to run it again with the "
                                          "new settings", record)
    if evaluated_otherwise(record, experiment, run):
        return RunState("evaluated_otherwise", f"{directory} holds a run evaluated with other evaluation settings "
                                               f"(sets, translate, average_last or analyses) than {experiment.path} "
                                               "makes now; `onmt-posenc run` evaluates it again from its last "
                                               "checkpoint, without training", record)
    return RunState("finished", "finished", record)
