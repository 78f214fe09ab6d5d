"""The report's results for other programs: results.json (the experiment as the report read
it, every run's record with its analyses' results, and the cross-run results; the runs'
translations copied beside it, records.copy_translations) and
results.csv (one row per run); and results.json read back, to render the report from it
alone (`onmt-posenc report --results`)."""
import csv
import io
from pathlib import Path

from onmt_posenc.experiments.running import curves
from onmt_posenc.experiments.running.records import ANALYSIS_FORMS, analysis_problem, copy_translations, record_problem
from onmt_posenc.experiments.report.experiment import STORED_KEYS, from_json, to_json
from onmt_posenc.experiments.file.spec import VARIANT_JOINT, ExperimentError
from onmt_posenc.experiments.running.store import read_json, write_json, write_text_atomically


CSV_FIELDS = ["id", "data", "method", "K", "seed", "status"]


# Kept in results.json as the report's comparisons across runs (across_runs), not per run:
# its per-token values are ~220 KB a Multi30k run, the comparisons a few KB a batch.
KEPT_AS_COMPARISONS = "token_nll"


def write_results(experiment, records, batch):
    """results.json and results.csv of a report.ReportedExperiment and its records."""
    out = Path(experiment.output)
    stored = [{**{key: value for key, value in r.items() if key != "translations_root"},
               **{key: {name: value for name, value in r[key].items() if name != KEPT_AS_COMPARISONS}
                  for key in ("analyses", "analysis_results") if key in r},
               **({"translations": copy_translations(r, out)} if r.get("translations") else {}),
               **({"variants": _variants_copied(r, out)} if r.get("variants") else {})} for r in records]
    write_json(out / "results.json", {"experiment": experiment.path, "experiment_as_loaded": to_json(experiment),
                                      "runs": stored, "across_runs": batch})
    sets = list(dict.fromkeys(name for r in records for name in r.get("bleu", {})))
    table = io.StringIO(newline="")  # csv's own line ends, as open(newline="") keeps them
    writer = csv.writer(table)
    writer.writerow(CSV_FIELDS + [f"bleu_{name}" for name in sets]
                    + ["final_valid_ppl", "converged", "training_tokens_per_second", "speed", "train_seconds",
                       "log"])
    for r in records:
        ratio = batch["speed"].get(r["data"], {}).get(r["label"])
        valid = (r.get("curve") or {}).get("valid")
        writer.writerow([r.get(k) for k in CSV_FIELDS]
                        + [f"{r['bleu'][n]:.2f}" if n in r.get("bleu", {}) else "" for n in sets]
                        + [f"{valid[-1]['ppl']:.3f}" if valid else "",
                           (r.get("convergence") or {}).get("converged", ""),
                           f"{r['training_speed']['tokens_per_second']:.0f}" if r.get("training_speed") else "",
                           f"{ratio:.3f}" if ratio is not None else "", r.get("train_seconds", ""),
                           r.get("log", "")])
    write_text_atomically(out / "results.csv", table.getvalue())


def _variants_copied(record, folder):
    """A record's evaluation variants with their translations copied into the results `folder`
    (as the run's own: records.copy_translations, named by the variant's record's id)."""
    return {name: {**variant, **({"translations": copy_translations(
                {"id": f"{record['id']}{VARIANT_JOINT}{name}", "translations": variant["translations"],
                 "translations_root": record["translations_root"]}, folder)} if variant.get("translations") else {})}
            for name, variant in record["variants"].items()}


def read_results(path, output):
    """(the ReportedExperiment, the records, {analysis: ids of the runs that name it but do
    not hold its results}, the token-NLL comparisons it keeps or None) of a results.json, to
    render its report into `output`. Each
    record's status is the stored one; its convergence is today's rule on its stored curve,
    as when the report is written from the runs. A results.json written before records held
    their analyses' results names only their files, in run folders that may be gone: those
    analyses leave the records, and the report says so."""
    try:
        stored = read_json(path)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ExperimentError(f"{path} cannot be read ({type(error).__name__}: {error})") from None
    if not (isinstance(stored, dict) and isinstance(stored.get("experiment"), str)
            and isinstance(stored.get("experiment_as_loaded"), dict) and isinstance(stored.get("runs"), list)):
        raise ExperimentError(f"{path} is not a results.json that `onmt-posenc report` wrote (it needs "
                              "'experiment', 'experiment_as_loaded' and 'runs')")
    missing = [key for key in STORED_KEYS if key not in stored["experiment_as_loaded"]]
    if missing:
        raise ExperimentError(f"{path}: experiment_as_loaded.{missing[0]}: missing")
    not_held = {}
    for index, record in enumerate(stored["runs"]):
        problem = _problem(record)
        if problem:
            raise ExperimentError(f"{path}: runs[{index}] cannot be used ({problem})")
        if record.get("curve"):
            record["convergence"] = curves.convergence(record["curve"]["valid"])
        if record.get("translations"):  # copied beside results.json (records.copy_translations)
            record["translations_root"] = str(Path(path).parent)
        held = record.get("analysis_results", {})
        for name in [name for name in record.get("analyses", {}) if name not in held]:
            del record["analyses"][name]
            not_held.setdefault(name, []).append(record["id"])
    comparisons = (stored.get("across_runs") or {}).get(KEPT_AS_COMPARISONS) or {}
    if not all(isinstance(c, dict) and "method" in c for c in comparisons.values()):
        comparisons = {}  # written before results.json kept them in place of the per-token values
    return (from_json(stored["experiment"], stored["experiment_as_loaded"], output), stored["runs"], not_held,
            comparisons or None)


def _problem(record):
    """Why a stored record cannot be rendered, or None (missing and stale runs are only listed)."""
    if not isinstance(record, dict) or "id" not in record:
        return "must be a JSON object with the run's id"
    if record.get("status") in ("missing", "stale"):
        return None
    problem = record_problem(record)
    held = [("", record), *((f"variants.{name}.", variant) for name, variant in (record.get("variants") or {}).items())]
    for where, holder in held:
        for name, result in holder.get("analysis_results", {}).items():
            problem = problem or (f"{where}analysis_results: unknown analysis {name!r}" if name not in ANALYSIS_FORMS
                                  else analysis_problem(name, result))
    return problem
