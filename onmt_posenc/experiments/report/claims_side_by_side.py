"""`onmt-posenc claims RESULTS_JSON RESULTS_JSON ...`: the papers' claims in several batches
side by side, as one Markdown table on stdout: each claim, the paper's figure, and in each
batch its verdict with what the batch measured.

Each batch is judged from its results.json alone by today's claims code, as `onmt-posenc
report --results` judges it, so the columns differ only in what the batches measured: the
same study under two conditions (the OpenNMT-py default and the controlled embedding scale,
recipes/experiments/results/embedding-scale/) reads off which verdicts the condition changes. The
claims that no batch has the runs for leave the table and are named below it, as are
analyses a results.json names without their results (written before records held them):
the claims on those are not measured here, as in that batch's own report."""
import sys
from pathlib import Path

from onmt_posenc.experiments.claims import shape_paper
from onmt_posenc.experiments.claims.batch import NOT_IN_BATCH, STATISTICS_WORDS, Batch, claims_method
from onmt_posenc.experiments.file.spec import ExperimentError
from onmt_posenc.experiments.report.results import read_results
from onmt_posenc.experiments.report.runs import relative_speeds


def judged(path):
    """(the claims' rows of a results.json as today's code judges them, {analysis: ids of the
    runs that name it without its results}, the runs left out as unconverged)."""
    experiment, records, not_held, _ = read_results(path, Path(path).parent)
    return (shape_paper.evaluate(experiment, records, relative_speeds(experiment, records)), not_held,
            Batch(experiment, records).left_out)


def document(labelled_paths):
    """The Markdown page comparing the batches of [(label, results.json path)]: what the command prints."""
    return "\n".join(side_by_side([(label, *judged(path)) for label, path in labelled_paths])) + "\n"


def side_by_side(batches):
    """The Markdown lines comparing `batches`, [(label, claims rows, not_held, left_out)]."""
    labels = [label for label, *_ in batches]
    lines = [STATISTICS_WORDS, ""]
    for label, claims, _, left_out in batches:
        lines += [f"{label}: {claims_method(claims)[-1]}" + (
            f" Left out of every comparison, as they did not converge: {'; '.join(left_out)}." if left_out else ""), ""]
    lines += ["| claim | paper | " + " | ".join(labels) + " |", "|" + "---|" * (2 + len(labels))]
    absent = []
    for index, first in enumerate(batches[0][1]):
        rows = [claims[index] for _, claims, *_ in batches]
        if all(row["measured"].startswith(NOT_IN_BATCH) for row in rows):
            absent.append(first["claim"])
            continue
        cells = [f"**{row['held']}**: {row['measured']}" for row in rows]
        lines.append(f"| {first['claim']} | {first['paper']} | " + " | ".join(cells) + " |")
    lines.append("")
    if absent:
        lines += ["Not in any of these batches: " + "; ".join(absent) + ".", ""]
    for label, _, not_held, _ in batches:
        if not_held:
            named = ", ".join(f"{name} ({len(ids)} runs)" for name, ids in not_held.items())
            lines += [f"{label}: its results.json names analyses without their results (it was written before "
                      f"records held them): {named}; the claims on them are not measured here.", ""]
    return lines


def add_arguments(parser):
    parser.add_argument("results", nargs="+", metavar="RESULTS_JSON",
                        help="the results.json of each batch (`onmt-posenc report` writes it), one column each")
    parser.add_argument("--label", action="append", metavar="NAME",
                        help="a column's name, once per RESULTS_JSON in their order (default: each file's folder)")


def main(args):
    labels = args.label or [Path(path).resolve().parent.name for path in args.results]
    if len(labels) != len(args.results):
        raise ExperimentError(f"{len(labels)} --label for {len(args.results)} RESULTS_JSON: give "
                              "one per file, or none")
    sys.stdout.write(document(zip(labels, args.results)))
    return 0
