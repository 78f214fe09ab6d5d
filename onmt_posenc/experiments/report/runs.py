"""The choices the report's tables make among the runs' records (running.grid_records): the
lowest seed per method, the baseline, speeds relative to it."""
import statistics

from onmt_posenc.experiments.claims.speeds import speed_compared_runs
from onmt_posenc.experiments.running.records import read_analysis


def first_seed_runs(records, data):
    """{label: record} of the finished runs of a data setting, lowest seed per label."""
    chosen = {}
    for record in sorted((r for r in records if r["data"] == data and r["status"] == "finished"),
                         key=lambda r: r["seed"]):
        chosen.setdefault(record["label"], record)
    return chosen


def baseline_label(experiment, chosen):
    """The label of the baseline method among `chosen` (its first K if the grid varies K)."""
    for label, record in chosen.items():
        if record["method"] == experiment.baseline:
            return label
    return None


def relative_speeds(experiment, records):
    """{data: {label: training tokens/s relative to the baseline}}, means over seeds, among
    speed_compared_runs."""
    speeds = {}
    for data in dict.fromkeys(r["data"] for r in records):
        here = speed_compared_runs(experiment, records, data)
        if not here:
            continue
        mean = {label: statistics.mean(r["training_speed"]["tokens_per_second"] for r in here if r["label"] == label)
                for label in dict.fromkeys(r["label"] for r in here)}
        baseline = baseline_label(experiment, {r["label"]: r for r in here})
        speeds[data] = {label: value / mean[baseline] for label, value in mean.items()}
    return speeds


def per_run(records, name):
    """(record, result) of every finished run that has this analysis."""
    return [(r, read_analysis(r, name)) for r in records
            if r["status"] == "finished" and name in r.get("analyses", {})]
