"""`onmt-posenc report EXPERIMENT.yaml`: merge the finished runs of an experiment
(all shards) into results.json, results.csv and report.md with PNG plots.

The report only reads what the runs measured and stored (result.json and
analyses/*.json); it loads no model and times nothing. It opens with the SHAPE
paper's claims and whether this batch reproduces them (see claims/), then
holds the paper's tables and figures, BLEU per evaluation set with the relative
training speed (Table 2's layout: data setting x method), hypothesis/reference
length, joined-set scores, BLEU, gain and length by source length, the swapped
evaluation, shift invariance of the encoder, token-level NLL, and the position
ablation. Analyses that compare methods use each method's run with the lowest
seed; the BLEU table averages over seeds.

A stored result that cannot be read or used (see records.read_stored) is a failed run
in the Runs table, named with its file, and left out of the other tables; an analysis
file likewise, as a note on its run. When no run has finished yet, the report is
written all the same (its Runs table says what happened to each run) and a warning
says so on stderr; the exit status is still 0.

results.json keeps what the report read: the experiment as loaded (report.experiment) and
each run's record with its analyses' results. `onmt-posenc report --results RESULTS_JSON`
renders report.md and plots/ again from it alone, with today's code, whatever the
experiment file and the run folders have become, and writes results.json and results.csv
again beside them: the same runs, with what the report computed across them (its claims
among them) as today's code computes it. A results.json written before records held their
analyses' results is not written again: its across_runs keeps what was computed from the
run folders' analysis files, which today's code cannot compute from it.
"""
import sys
from pathlib import Path

from onmt_posenc.experiments.file.loading import add_arguments as add_experiment_arguments, from_arguments
from onmt_posenc.experiments.report import analysis_sections, extrapolation, tables
from onmt_posenc.experiments.report.document import Report
from onmt_posenc.experiments.report.experiment import reported
from onmt_posenc.experiments.report.results import read_results, write_results
from onmt_posenc.experiments.running.grid_records import collect
from onmt_posenc.experiments.file.spec import ExperimentError


def write_report(experiment, records, not_held=None, token_comparisons=None):
    """report.md of a ReportedExperiment, its sections in the order they are read; returns
    its path and the cross-run results the sections computed (for results.json).
    `not_held`: {analysis: ids of the runs whose results.json names it without its results};
    `token_comparisons`: the token-NLL comparisons a results.json keeps."""
    report, analyses = Report(experiment, records), experiment.analyses
    tables.header(report)
    tables.claims_table(report)
    tables.bleu_table(report)
    tables.length_ratio_table(report)
    tables.score_parts_table(report)
    tables.joined_table(report)
    tables.data_size_section(report)
    if not_held:
        analysis_sections.not_held_section(report, not_held)
    if "length_buckets" in analyses:
        analysis_sections.length_section(report, analyses["length_buckets"])
        extrapolation.extrapolation_section(report)
    if "swapped" in analyses:
        analysis_sections.swapped_section(report)
    if "shift_invariance" in analyses:
        analysis_sections.shift_section(report)
    if "token_nll" in analyses:
        analysis_sections.token_section(report, analyses["token_nll"], token_comparisons)
    if "position_ablation" in analyses:
        analysis_sections.ablation_section(report)
    tables.curves_section(report)
    tables.speed_table(report)
    tables.runs_table(report)
    return report.save(), report.batch


def write(experiment, records=None):
    """Collect the runs of a loaded experiment (unless given their `records`) and write
    results and report; returns report.md."""
    records = collect(experiment) if records is None else records
    experiment = reported(experiment)
    path, batch = write_report(experiment, records)
    write_results(experiment, records, batch)
    return path


def render(results, output=None):
    """report.md and plots/ from a results.json alone, into `output` (default: its folder),
    with results.json and results.csv written again there unless it names analyses without
    their results (see the module's docstring); returns report.md."""
    results = Path(results)
    experiment, records, not_held, token_comparisons = read_results(results, results.parent if output is None
                                                                    else output)
    path, batch = write_report(experiment, records, not_held, token_comparisons)
    if not not_held:
        write_results(experiment, records, batch)
    return path


def add_arguments(parser):
    """The arguments given to `onmt-posenc run`, to find the same runs; or --results."""
    add_experiment_arguments(parser, reporting=True)
    parser.add_argument("--results", metavar="RESULTS_JSON",
                        help="render report.md and plots/ from this results.json alone (the experiment as it was "
                             "loaded and every run's results), with today's code, into --output (default: its "
                             "folder), with results.json and results.csv written again there (unless it was written "
                             "before runs held their analyses' results); instead of EXPERIMENT")


def main(args):
    if args.results is not None:
        if args.experiment is not None or args.data is not None or args.overrides:
            raise ExperimentError("--results renders a results.json alone: give it without EXPERIMENT, --data "
                                  "or --set")
        print(f"report: {render(args.results, args.output)}", file=sys.stderr)
        return 0
    if args.experiment is None:
        raise ExperimentError("give the experiment file (EXPERIMENT), or --results RESULTS_JSON")
    experiment = from_arguments(args)
    if not experiment.output.is_dir():
        what = "is not a folder" if experiment.output.exists() else "does not exist; run the experiment first"
        print(f"onmt-posenc report: error: the output {experiment.output} {what}", file=sys.stderr)
        return 2
    records = collect(experiment)
    if not any(r["status"] == "finished" for r in records):
        stale = sum(r["status"] == "stale" for r in records)
        why = (f"{stale} of {len(records)} runs are stale (made with other settings than the file's)" if stale
               else f"no run has finished yet (0 of {len(records)})")
        print(f"onmt-posenc report: warning: {why}; the report has no results, only what happened to each run",
              file=sys.stderr)
    print(f"report: {write(experiment, records)}", file=sys.stderr)
    return 0
