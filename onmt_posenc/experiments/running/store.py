"""Where an experiment's runs and data live on disk, and how files are written there.

Both the runner (which writes runs) and the report (which only reads them) use
this module; neither imports the other.

    <output>/data/<data setting>/              prepared files of a data setting (data_preparation)
    <output>/<data>/<label>/seed<n>/           one run (label: the method, shape-K<K> with a K): config.yaml, logs/, hyp/, analyses/
        result.json                            written last: the run is finished
        failure.json                           the run failed (error and log)
        interrupted.json                       the run was stopped by a signal (where, and the command that goes on)
        warm_start.json                        warm_start: which model the run started from
        model_step_<N>.pt                      onmt_train's checkpoint after update N
"""
import hashlib
import json
import os
from pathlib import Path

RESULT = "result.json"
# a finished run's model: its last checkpoints averaged, the model evaluated
AVERAGED = "averaged.pt"
FAILURE = "failure.json"
# a run stopped by a signal (Ctrl-C, a scheduler's SIGTERM): the update it had reached, the command that goes on
INTERRUPTED = "interrupted.json"
# warm_start: the SHA-256 of the source model when the run started from it
WARM_START = "warm_start.json"
# the SHA-256 of each file the run's corpora name, when it started training (state.training_data_of)
TRAINING_DATA = "training_data.json"


def checkpoint_step(path):
    return int(Path(path).stem.rsplit("_", 1)[1])


def saved_checkpoints(run_dir):
    """The run's checkpoints, oldest first."""
    return sorted(Path(run_dir).glob("model_step_*.pt"), key=checkpoint_step)


def write_text_atomically(path, text):
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def write_json(path, value):
    write_text_atomically(path, json.dumps(value, indent=1) + "\n")


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def run_dir(experiment, run):
    return experiment.output / run.id


def data_dir(experiment, data):
    """Where a data setting's prepared files go (see data_preparation.prepare_data)."""
    return experiment.output / "data" / data


def run_fields(run):
    """What names a run in its result, its failure and the report."""
    return {"id": run.id, "data": run.data, "method": run.method, "label": run.label, "K": run.shift,
            "seed": run.seed}


def phrase_file(directory):
    """Where a data setting's target phrases live (data_preparation.prepare_phrases writes them)."""
    return Path(directory) / "train.tgt.phrases"


def file_digest(path):
    """SHA-256 of a file's bytes, None where there is no file."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except FileNotFoundError:
        return None
    return digest.hexdigest()
