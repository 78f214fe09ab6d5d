"""The records the report reads, one per run of the grid, and the choices the tables make
among them (the lowest seed per method, the baseline, speeds relative to it)."""
import statistics

from onmt_posenc.experiments import curves
from onmt_posenc.experiments.data_preparation import corpus_files
from onmt_posenc.experiments.opennmt_config import run_config
from onmt_posenc.experiments.records import read_analysis, read_stored
from onmt_posenc.experiments.state import STALE, run_state
from onmt_posenc.experiments.store import data_dir, run_dir, run_fields


def collect(experiment):
    """One record per run of the grid: its result, its failure, or status 'missing';
    a result that is not what the experiment file makes now is 'stale' (state.STALE;
    like a failure, left out of every table but the Runs table), with the reason the
    runner gives too."""
    records = []
    for run in experiment.runs:
        directory = run_dir(experiment, run)
        setting = experiment.data[run.data]
        config = run_config(experiment, run, corpus_files(setting, data_dir(experiment, run.data)))
        state = run_state(directory, config, experiment, setting)
        if state.kind == "missing":
            record = {"status": "missing", "error": state.why}
        elif state.kind == "unreadable":
            record = {"status": "failed", "error": state.why}
        else:
            record = state.record
            if state.kind in STALE:
                record.update(status="stale", error=f"stale: {state.why}")
            elif state.kind == "interrupted":  # as of now: the file may have changed since it stopped
                record["error"] = state.why
            if record.get("curve"):  # the rule of today's code, also for results stored under an older one
                record["convergence"] = curves.convergence(record["curve"]["valid"])
            if record["status"] != "failed":
                _read_analyses(record, directory)
        record.update(run_fields(run))
        record["dir"] = str(directory)
        records.append(record)
    return records


def _read_analyses(record, directory):
    """The analyses' results into the record (`analysis_results`, kept in results.json so that
    the report can be rendered again without the run folders); an analysis file that cannot
    be read or used leaves the tables, with a note in the Runs table."""
    record["analysis_results"] = {}
    for name, path in list(record.get("analyses", {}).items()):
        result, unreadable = read_stored(directory / path, name)
        if unreadable:
            del record["analyses"][name]
            record.setdefault("analysis_errors", {})[name] = unreadable
        else:
            record["analysis_results"][name] = result


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


def describe_machine(machine):
    """A run's machine in words (runs on one machine have the same words)."""
    if not machine:
        return "an unrecorded machine"
    gpus = f", GPU {', '.join(machine['gpus'])}" if machine.get("gpus") else ""
    return f"{machine['cpu']} ({machine['cores']} cores{gpus}), torch {machine['torch']}"


def timed_runs(records, data):
    return [r for r in records if r["data"] == data and r["status"] == "finished" and r.get("training_speed")]


def speed_machine(experiment, timed):
    """The machine whose runs the speed ratios compare: of the machines the baseline trained
    on, the one that trained most of these runs. A ratio between runs on two machines would
    measure the machines (shards may run on several); None without a timed baseline."""
    machines = [describe_machine(r.get("machine")) for r in timed]
    with_baseline = [m for m, r in zip(machines, timed) if r["method"] == experiment.baseline]
    return max(dict.fromkeys(with_baseline), key=machines.count, default=None)


def speed_compared_runs(experiment, records, data):
    """The finished runs of a data setting whose training speeds the ratios compare: those on
    speed_machine (none without a timed baseline)."""
    timed = timed_runs(records, data)
    machine = speed_machine(experiment, timed)
    return [r for r in timed if describe_machine(r.get("machine")) == machine]


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
