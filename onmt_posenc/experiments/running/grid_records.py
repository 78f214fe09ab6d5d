"""One record per run of an experiment's grid, as the run stands on disk: its result, its
failure, or what it lacks (the records the report and the claims read)."""
from onmt_posenc.experiments.running import curves
from onmt_posenc.experiments.running.data_preparation import corpus_files
from onmt_posenc.experiments.running.locks import held_by
from onmt_posenc.experiments.running.opennmt_config import run_config
from onmt_posenc.experiments.running.records import read_stored
from onmt_posenc.experiments.running.state import STALE, run_state
from onmt_posenc.experiments.running.store import data_dir, run_dir, run_fields


def collect(experiment):
    """One record per run of the grid: its result, its failure, or status 'missing', with the
    runner working on it now (`runner`: "pid N on HOST", see locks);
    a result that is not what the experiment file makes now is 'stale' (state.STALE;
    like a failure, left out of every table but the Runs table), with the reason the
    runner gives too."""
    records = []
    for run in experiment.runs:
        directory = run_dir(experiment, run)
        setting = experiment.data[run.data]
        config = run_config(experiment, run, corpus_files(setting, data_dir(experiment, run.data)))
        state = run_state(directory, config, experiment, run)
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
                for holder in (record, *(record.get("variants") or {}).values()):  # each variant's own too
                    _read_analyses(holder, directory)
        record.update(run_fields(run))
        record["dir"] = str(directory)
        if record.get("translations"):  # where its translations' files are named from (records.read_translations)
            record["translations_root"] = str(directory)
        holder = held_by(directory)
        if holder is not None:  # a runner works on it now: what is stored may change any moment
            record["runner"] = holder
        records.append(record)
    return records


def _read_analyses(record, directory):
    """The analyses' results into the record, or into one of its variants (`analysis_results`, kept
    in results.json so that the report can be rendered again without the run folders); an analysis
    file that cannot be read or used leaves the tables, with a note in the Runs table."""
    record["analysis_results"] = {}
    for name, path in list(record.get("analyses", {}).items()):
        result, unreadable = read_stored(directory / path, name)
        if unreadable:
            del record["analyses"][name]
            record.setdefault("analysis_errors", {})[name] = unreadable
        else:
            record["analysis_results"][name] = result
