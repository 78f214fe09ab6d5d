"""What the report reads of an experiment (ReportedExperiment), and how results.json keeps it.

results.json holds it beside the runs' records (which hold their analyses' results), so that
`onmt-posenc report --results` renders report.md from results.json alone: the experiment file
may have changed since, and the run folders may be gone (committed results)."""
import dataclasses
from pathlib import Path

from onmt_posenc.data.synthetic import SyntheticTask
from onmt_posenc.experiments.file.spec import DataSetting, FilePair

PATH_FIELDS = ("src", "tgt", "ref", "docids")  # FilePair's fields that are paths
STORED_KEYS = ("name", "baseline", "eval_sets", "analyses", "training_pairs", "data")  # what to_json writes


@dataclasses.dataclass(frozen=True)
class ReportedExperiment:
    path: str  # the experiment file, as it was named when the report was written
    name: str
    output: Path  # where report.md and plots/ go
    baseline: str
    eval_sets: list
    analyses: dict  # name -> options
    data: dict  # label -> DataSetting
    training_pairs: dict  # label -> training pairs read, None where not known (a synthetic task)


def reported(experiment):
    """The ReportedExperiment of a loaded experiment (spec.Experiment)."""
    return ReportedExperiment(path=str(experiment.path), name=experiment.name, output=Path(experiment.output),
                              baseline=experiment.baseline, eval_sets=list(experiment.eval_sets),
                              analyses=experiment.analyses, data=experiment.data,
                              training_pairs={label: training_pairs(s) for label, s in experiment.data.items()})


def training_pairs(setting):
    """How many training pairs a data setting reads: its cut (`train_pairs`, `lines`, `train_sample`),
    else its training file's lines where the file is at hand; None otherwise (a synthetic task)."""
    if setting.train is None:
        return None
    if setting.train.lines or setting.train.sample:
        return setting.train.lines or setting.train.sample
    if setting.train.src.is_file():
        with open(setting.train.src, "rb") as f:
            return sum(1 for _ in f)
    return None


def to_json(experiment):
    """results.json's "experiment_as_loaded": all but the file's path (results.json's
    "experiment") and the output folder (wherever the report is rendered)."""
    return {"name": experiment.name, "baseline": experiment.baseline, "eval_sets": experiment.eval_sets,
            "analyses": experiment.analyses, "training_pairs": experiment.training_pairs,
            "data": {label: _plain(dataclasses.asdict(setting)) for label, setting in experiment.data.items()}}


def from_json(path, stored, output):
    """The ReportedExperiment that to_json stored, for the experiment file `path`."""
    data = {label: DataSetting(**{**fields, "train": _pair(fields["train"]), "valid": _pair(fields["valid"]),
                                  "eval_sets": {name: _pair(pair) for name, pair in fields["eval_sets"].items()},
                                  "synthetic": fields["synthetic"] and SyntheticTask(**fields["synthetic"])})
            for label, fields in stored["data"].items()}
    return ReportedExperiment(path=path, name=stored["name"], output=Path(output), baseline=stored["baseline"],
                              eval_sets=stored["eval_sets"], analyses=stored["analyses"], data=data,
                              training_pairs=stored["training_pairs"])


def _pair(fields):
    if fields is None:
        return None
    return FilePair(**{key: Path(value) if key in PATH_FIELDS and value is not None else value
                       for key, value in fields.items()})


def _plain(value):
    """`value` with its paths as strings, for JSON."""
    if isinstance(value, dict):
        return {key: _plain(inner) for key, inner in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(inner) for inner in value]
    return str(value) if isinstance(value, Path) else value
