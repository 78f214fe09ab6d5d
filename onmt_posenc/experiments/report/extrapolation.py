"""The report's section on length extrapolation (the SHAPE paper's EXTRAPOLATE, issue 59): which
positions translate past their training lengths, and whether a failure is early stopping
(the length ratio) or worse writing (the teacher-forced NLL of the gold tokens).

Read from the length analysis of runs that split the test set at a length (`split`: the
sentences up to it and beyond it, each scored as one corpus) and from the BLEU of the sets
joined with a plain space (`joined_sets`). For each data setting trained on capped pairs,
every method over its seeds: the means, then each method's difference from the baseline's
with Student's t interval (claims.batch.seed_difference; two-sided, CONFIDENCE). A setting
that joins its training pairs (join_training) is set against the setting of the same cap
without; a VANILLA setting split at the same length (a size-matched control) gives each
method's extrapolation penalty by bucket: the capped runs' BLEU minus the control's.
Runs that failed to learn are left out (claims.batch.failed_to_learn)."""
import statistics

from onmt_posenc.experiments.claims.batch import CONFIDENCE, failed_to_learn, mean_cell, seed_difference
from onmt_posenc.experiments.running.records import read_analysis

JOINED_PREFIX = "-join"


def _split(stored):
    """The test set's length analysis with its split, else the first set's that has one."""
    for name in sorted(stored, key=lambda name: name != "test"):
        if "beyond" in (stored[name].get("split") or {}):
            return name, stored[name]
    return None, None


def measures(split_set, joined):
    """(column title, the value of one run from its record and its stored length analysis)."""
    def part(name, key):
        return lambda record, stored: stored[split_set]["split"][name][key]

    columns = [("seen BLEU", part("up_to", "bleu")), ("unseen BLEU", part("beyond", "bleu"))]
    columns += [(f"BLEU, {k} joined", lambda record, stored, name=name: record["bleu"].get(name))
                for k, name in joined]
    columns += [("seen length ratio", part("up_to", "length_ratio")),
                ("unseen length ratio", part("beyond", "length_ratio")),
                ("NLL unseen - seen",
                 lambda record, stored: _gap(stored[split_set]["split"]["beyond"].get("nll"),
                                             stored[split_set]["split"]["up_to"].get("nll")))]
    return columns


def _gap(beyond, up_to):
    return None if beyond is None or up_to is None else beyond - up_to


class SplitRuns:
    """A data setting's finished runs that learned, with their stored length analysis split:
    {label: [(record, analysis)]} in the grid's order, and the set and length they split at."""

    def __init__(self, report, data, failed):
        self.data, self.by_label, self.split_set, self.at = data, {}, None, None
        for record in report.records:
            if (record["data"] != data or record["status"] != "finished" or record["id"] in failed
                    or "length_buckets" not in record.get("analyses", {})):
                continue
            stored = read_analysis(record, "length_buckets")
            name, result = _split(stored)
            if name is None:
                continue
            self.split_set, self.at = name, result["split"]["at"]
            self.by_label.setdefault(record["label"], []).append((record, stored))
        evaluated = set(report.experiment.eval_sets)
        self.joined = sorted(((int(name.rsplit(JOINED_PREFIX, 1)[1]), name) for name in evaluated
                              if name.startswith(f"{self.split_set}{JOINED_PREFIX}")), key=lambda pair: pair[0])

    def values(self, label, measure):
        found = [measure(record, stored) for record, stored in self.by_label.get(label, [])]
        return [value for value in found if value is not None]


def extrapolation_section(report):
    experiment = report.experiment
    failed = failed_to_learn(report.records, experiment.baseline)
    capped = {data: SplitRuns(report, data, failed) for data in report.data_settings()
              if experiment.data[data].extrapolate}
    capped = {data: runs for data, runs in capped.items() if runs.by_label}
    if not capped:
        return
    report.add("## Length extrapolation", "",
               "Test sentences up to the cap and beyond it (unseen: longer than any training sentence), each scored "
               "as one corpus, and the test lines joined k per line with a plain space; the length ratio says where "
               "a model stops, the NLL of a gold token (teacher-forced) how well it writes. Means ± standard "
               f"deviation over the seeds; differences with their two-sided {CONFIDENCE:.0%} Student's t interval, "
               "the degrees of freedom of the seeds' spread pooled over the two sides (methods with 3 seeds or "
               "more), \"not judged\" without such a spread.", "")
    results = {}
    for data, runs in capped.items():
        columns = measures(runs.split_set, runs.joined)
        base = _baseline_label(experiment, runs.by_label)
        report.add(f"### {data}: every method (split at {runs.at} tokens, {runs.split_set})", "")
        report.table(["method", *(title for title, _ in columns)],
                     [[f"{label} ({len(runs.by_label[label])})", *(mean_cell(runs.values(label, measure))
                                                                  for _, measure in columns)]
                      for label in runs.by_label])
        results[data] = {"means": {label: {title: _mean(runs.values(label, measure)) for title, measure in columns}
                                   for label in runs.by_label}}
        others = [label for label in runs.by_label if label != base]
        if base is not None and others:
            rows, figures = _differences(runs, runs, others, lambda label: base, columns)
            report.add(f"Each method minus {base}:", "")
            report.table(["method", *(title for title, _ in columns)], rows)
            results[data]["minus_baseline"] = figures
            report.add(f"Verdicts against {base} (two-sided {CONFIDENCE:.0%}):", "",
                       *(f"- {_verdict(label, base, figures[label])}" for label in others), "")
    for data, runs in capped.items():
        plain = _without_joining(experiment, data, capped)
        if not experiment.data[data].join_training or plain is None:
            continue
        columns = measures(runs.split_set, runs.joined)
        labels = [label for label in runs.by_label if label in capped[plain].by_label]
        rows, figures = _differences(runs, capped[plain], labels, lambda label: label, columns)
        report.add(f"### {data} against {plain}: what joining the training pairs changes", "",
                   f"Each method trained on {data} minus the same method on {plain}.", "")
        report.table(["method", *(title for title, _ in columns)], rows)
        results[data]["minus_without_joining"] = {"against": plain, **figures}
    for data, runs in capped.items():
        for control in (d for d in report.data_settings() if experiment.data[d].kind == "VANILLA"):
            other = SplitRuns(report, control, failed)
            if other.at == runs.at and other.split_set == runs.split_set:
                results[data].setdefault("penalty", {})[control] = _penalty_table(report, runs, other)
    report.batch["extrapolation"] = results


# (column, what its difference from the baseline says above and below zero)
VERDICT_PARTS = [("unseen BLEU", "translates unseen lengths better", "translates unseen lengths worse"),
                 ("unseen length ratio", "stops later on them", "stops earlier on them"),
                 ("NLL unseen - seen", "writes worse on them (gold-token NLL)", "writes better on them (gold-token NLL)")]


def _verdict(label, base, figures):
    """One method's verdict from its differences' figures: whether it translates unseen lengths
    better than the baseline, and whether the difference is where it stops (the length ratio) or
    how it writes (the NLL's rise from seen to unseen lengths)."""
    said, unjudged = [], []
    for column, above, below in VERDICT_PARTS:
        found = figures.get(column)
        if not found:
            continue
        if "margin" not in found:
            unjudged.append(column)
        elif found["estimate"] - found["margin"] > 0:
            said.append(f"{above} ({found['estimate']:+.2f} ± {found['margin']:.2f})")
        elif found["estimate"] + found["margin"] < 0:
            said.append(f"{below} ({found['estimate']:+.2f} ± {found['margin']:.2f})")
        else:
            said.append(f"no difference in {column} measured (within ±{found['margin']:.2f})")
    if unjudged and not said:
        return f"{label}: too few seeds for a spread, not judged"
    return f"{label}, against {base}: " + "; ".join(said) + (f"; not judged: {', '.join(unjudged)}" if unjudged else "")


def _baseline_label(experiment, by_label):
    return next((label for label, found in by_label.items() if found[0][0]["method"] == experiment.baseline), None)


def _without_joining(experiment, data, capped):
    """The capped setting of the same cap and files as `data`, without join_training."""
    setting = experiment.data[data]
    return next((other for other in capped if other != data and not experiment.data[other].join_training
                 and experiment.data[other].extrapolate == setting.extrapolate
                 and experiment.data[other].train == setting.train), None)


def _mean(values):
    return statistics.mean(values) if values else None


def _differences(runs, others, labels, other_label, columns):
    """Table rows of each label's difference from `other_label(label)` in `others`, a cell a
    column, and {label: {column: the Difference's figures}} for results.json."""
    rows, figures = [], {}
    for label in labels:
        cells, figures[label] = [], {}
        for title, measure in columns:
            one, other = runs.values(label, measure), others.values(other_label(label), measure)
            if not one or not other:
                cells.append("–")
                continue
            # named by setting too: a method against itself on another setting is two samples
            difference = seed_difference((f"{runs.data}/{label}", f"{others.data}/{other_label(label)}"), one, other)
            cells.append(_cell(difference))
            figures[label][title] = difference.figures(2)
        rows.append([f"{label} ({len(runs.by_label[label])} vs {len(others.by_label[other_label(label)])})",
                     *cells])
    return rows, figures


def _cell(difference, digits=2):
    if difference.spread is None:
        return f"{difference.estimate:+.{digits}f} (not judged)"
    return f"{difference.estimate:+.{digits}f} ± {difference.margin(2):.{digits}f} ({difference.spread.df} df)"


def _penalty_table(report, runs, control):
    """Each method's BLEU by bucket of the test set, capped minus the control of the same method
    (a VANILLA setting of as many pairs, split at the same length): the extrapolation penalty."""
    labels = [label for label in runs.by_label if label in control.by_label]
    if not labels:
        return {}
    first = runs.by_label[labels[0]][0][1][runs.split_set]
    buckets = [bucket + (" *" if unseen else "") for bucket, unseen in zip(first["buckets"], first["unseen"])]
    report.add(f"### {runs.data} against {control.data}: the extrapolation penalty by source length", "",
               f"{runs.split_set} BLEU of each bucket (* beyond the cap), each method trained on {runs.data} minus "
               f"the same method on {control.data}; the last column: the sentences beyond {runs.at} as one corpus.", "")

    def bucket(k):
        def measure(record, stored):
            result = stored[runs.split_set]
            return result["bleu"][k] if result["buckets"] == first["buckets"] else None
        return measure

    def beyond(record, stored):
        return stored[runs.split_set]["split"]["beyond"]["bleu"]

    columns = [(name, bucket(k)) for k, name in enumerate(first["buckets"])] + [("beyond", beyond)]
    rows, figures = _differences(runs, control, labels, lambda label: label, columns)
    report.table(["method", *buckets, f"beyond {runs.at}"], rows)
    return figures
