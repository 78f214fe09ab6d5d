"""The report's section on length extrapolation (the SHAPE paper's EXTRAPOLATE, issue 59): which
positions translate past their training lengths, and whether a failure is early stopping
(the length ratio) or worse writing (the teacher-forced NLL of the gold tokens).

Read from the length analysis of runs that split the test set at a length (`split`: the
sentences up to it and beyond it, each scored as one corpus; its buckets) and from the BLEU of
the sets joined with a plain space (`joined_sets`). Seen and unseen BLEU are the claims' one
definition (claims.batch.UNSEEN_BLEU): the buckets within and beyond each run's longest training
example, weighted by their sentences. For each data setting trained on capped pairs, every
method over its seeds: the means, then each method's difference from the baseline's with both
components of its interval (claims.batch.Difference; two-sided, CONFIDENCE). A setting that
joins its training pairs (join_training) is set against the setting of the same cap without,
its gains beyond the cap split into what lies within its own training lengths and what lies
past them; a VANILLA setting split at the same length (a size-matched control) gives each
method's extrapolation penalty by bucket: the capped runs' BLEU minus the control's. Each table
of differences is a family: its verdicts are judged after Holm's correction over its cells.
Runs that failed to learn are left out (claims.batch.failed_to_learn), and so are runs that did
not converge (curves.RULE: each replaced by its method's next seed), listed by name."""
import statistics
from typing import Callable, NamedTuple

from onmt_posenc.core import significance
from onmt_posenc.experiments.claims.batch import (CONFIDENCE, UNSEEN_BLEU, Batch, bucket_bleu, bucket_range,
                                                  buckets_between, failed_to_learn, longest_training_example,
                                                  mean_cell, not_converged, seed_difference, STATISTICS_WORDS,
                                                  test_set_component, degrees_in_words, verdict_words)
from onmt_posenc.experiments.running.records import read_analysis, with_variants

JOINED_PREFIX = "-join"


def _split(stored):
    """The test set's length analysis with its split, else the first set's that has one."""
    for name in sorted(stored, key=lambda name: name != "test"):
        if "beyond" in (stored[name].get("split") or {}):
            return name, stored[name]
    return None, None


class Column(NamedTuple):
    """A column of the section's tables: its title, a run's value from its record and stored length
    analysis, and the sentences its BLEU is of, for the test set's component ((set, length ranges
    of buckets or None for the whole set) from a run's record and analysis; None: not a BLEU)."""
    title: str
    value: Callable
    sentences: Callable = None


def _longest(record, result):
    """The longest training example of a run, else the length its analysis marks seen."""
    return longest_training_example(record) or result["max_train_length"]


def _buckets(result, low, high=None):
    return buckets_between(result, low, high)


def _within(result, high):
    return [k for k in range(len(result["buckets"])) if k not in buckets_between(result, high)]


def bleu_column(title, split_set, choose):
    """A column of the BLEU of the buckets `choose(result, longest)` picks, weighted by their sentences."""
    def value(record, stored):
        result = stored[split_set]
        return bucket_bleu(result, choose(result, _longest(record, result)))

    def sentences(record, stored):
        result = stored[split_set]
        return split_set, [bucket_range(result["buckets"][k]) for k in choose(result, _longest(record, result))]
    return Column(title, value, sentences)


def measures(split_set, joined, at):
    """The columns of a setting's tables: BLEU within and beyond each run's longest training
    example; the length ratio and the gold-token NLL of the sentences up to and beyond `at`, the
    analysis' split (split_at), named by it: for joined training that point lies within the
    training lengths, so these are not "unseen"."""
    def part(name, key):
        return lambda record, stored: stored[split_set]["split"][name][key]

    columns = [bleu_column("seen BLEU", split_set, _within),
               bleu_column("unseen BLEU", split_set, _buckets)]
    columns += [Column(f"BLEU, {k} joined", lambda record, stored, name=name: record["bleu"].get(name),
                       lambda record, stored, name=name: (name, None)) for k, name in joined]
    columns += [Column(f"length ratio up to {at}", part("up_to", "length_ratio")),
                Column(f"length ratio beyond {at}", part("beyond", "length_ratio")),
                Column(f"NLL beyond {at} - up to {at}",
                       lambda record, stored: _gap(stored[split_set]["split"]["beyond"].get("nll"),
                                                   stored[split_set]["split"]["up_to"].get("nll")))]
    return columns


def joining_measures(split_set, joined, cap, longest):
    """The columns of a joined setting against its plain one: the buckets beyond the cap split at the
    joined runs' longest training example (within their training lengths, and past them)."""
    within = bleu_column(f"BLEU beyond the cap, within the joined training lengths ({cap + 1}-{longest})",
                         split_set, lambda result, _: _buckets(result, cap, longest))
    past = bleu_column(f"BLEU beyond the joined training lengths (> {longest})", split_set,
                       lambda result, _: _buckets(result, longest))
    columns = measures(split_set, joined, cap)
    return [bleu_column(f"BLEU up to the cap (<= {cap})", split_set, lambda result, _: _within(result, cap)),
            bleu_column(f"BLEU beyond the cap (> {cap})", split_set, lambda result, _: _buckets(result, cap)),
            within, past, *columns[2:]]


def _gap(beyond, up_to):
    return None if beyond is None or up_to is None else beyond - up_to


class SplitRuns:
    """A data setting's finished runs that learned, with their stored length analysis split:
    {label: [(record, analysis)]} in the grid's order, and the set and length they split at."""

    def __init__(self, report, data, failed, batch):
        self.data, self.by_label, self.split_set, self.at = data, {}, None, None
        self.batch, self.left_out = batch, []  # the section's test-set statistics; "id (why)" unconverged
        for record in with_variants(report.records):  # a run's variants each a label of its own (rotary+ntk)
            if (record["data"] != data or record["status"] != "finished" or record.get("variant_of", record["id"])
                    in failed or "length_buckets" not in record.get("analyses", {})):
                continue
            if not_converged([record]):
                self.left_out += not_converged([record])
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

    def longest(self):
        """The longest training example of the setting's runs (else the length their analysis marks seen)."""
        return max(_longest(record, stored[self.split_set]) for runs in self.by_label.values()
                   for record, stored in runs)


def extrapolation_section(report):
    experiment = report.experiment
    failed = failed_to_learn(report.records, experiment.baseline)
    batch = Batch(experiment, report.records)
    capped = {data: SplitRuns(report, data, failed, batch) for data in report.data_settings()
              if experiment.data[data].extrapolate}
    capped = {data: runs for data, runs in capped.items() if runs.by_label}
    if not capped:
        return
    report.add("## Length extrapolation", "",
               "Test sentences within and beyond each run's longest training example, and the test lines joined k "
               f"per line with a plain space; the length ratio says where a model stops (the sentences up to the "
               "cap and beyond it, each as one corpus), the NLL of a gold token (teacher-forced) how well it writes. "
               f"Seen and {UNSEEN_BLEU} (seen: the buckets within). Means ± standard deviation over the seeds; "
               f"differences with their two-sided {CONFIDENCE:.0%} interval, its degrees of freedom, p raw and "
               "Holm-adjusted over the table (a family), and the smallest difference it could detect at 80% power; "
               "\"not judged\" without a spread (methods with 3 seeds or more).", "",
               STATISTICS_WORDS, "")
    left_out = [why for runs in capped.values() for why in runs.left_out]
    results = {"left_out": left_out} if left_out else {}
    if left_out:
        report.add("Left out of every mean and comparison of this section, as they did not converge (each is "
                   "replaced by its method's next seed): " + "; ".join(left_out) + ".", "")
    for data, runs in capped.items():
        columns = measures(runs.split_set, runs.joined, runs.at)
        base = _baseline_label(experiment, runs.by_label)
        report.add(f"### {data}: every method (split at {runs.at} tokens, {runs.split_set})", "",
                   f"The longest training example of its runs: {runs.longest()} tokens.", "")
        report.table(["method", *(column.title for column in columns)],
                     [[f"{label} ({len(runs.by_label[label])})", *(mean_cell(runs.values(label, column.value))
                                                                  for column in columns)]
                      for label in runs.by_label])
        results[data] = {"means": {label: {column.title: _mean(runs.values(label, column.value))
                                           for column in columns} for label in runs.by_label}}
        others = [label for label in runs.by_label if label != base]
        if base is not None and others:
            rows, figures, family = _differences(runs, runs, others, lambda label: base, columns)
            report.add(f"Each method minus {base} (a family of {family}):", "")
            _table(report, [column.title for column in columns], rows, figures)
            results[data]["minus_baseline"] = figures
            report.add(f"Verdicts against {base} (two-sided {CONFIDENCE:.0%}, after Holm's correction over the "
                       f"{family} comparisons of the table):", "",
                       *(f"- {_verdict(label, base, figures[label], runs.at)}" for label in others), "")
    for data, runs in capped.items():
        plain = _without_joining(experiment, data, capped)
        if not experiment.data[data].join_training or plain is None:
            continue
        columns = joining_measures(runs.split_set, runs.joined, capped[plain].longest(), runs.longest())
        labels = [label for label in runs.by_label if label in capped[plain].by_label]
        rows, figures, family = _differences(runs, capped[plain], labels, lambda label: label, columns)
        report.add(f"### {data} against {plain}: what joining the training pairs changes", "",
                   f"Each method trained on {data} minus the same method on {plain} (a family of {family}); the "
                   f"gain beyond the cap of {capped[plain].longest()} split into what lies within {data}'s own "
                   f"training lengths (its longest training example: {runs.longest()}) and what lies past them.", "")
        _table(report, [column.title for column in columns], rows, figures)
        results[data]["minus_without_joining"] = {"against": plain, **figures}
    for data, runs in capped.items():
        for control in (d for d in report.data_settings() if experiment.data[d].kind == "VANILLA"):
            other = SplitRuns(report, control, failed, batch)
            if other.at == runs.at and other.split_set == runs.split_set and other.by_label:
                results[data].setdefault("penalty", {})[control] = _penalty_table(report, runs, other)
    report.batch["extrapolation"] = results


def verdict_parts(at):
    """(column, what its difference from the baseline says above and below zero), for a split at `at`."""
    return [("unseen BLEU", "translates unseen lengths better", "translates unseen lengths worse"),
            (f"length ratio beyond {at}", f"stops later beyond {at}", f"stops earlier beyond {at}"),
            (f"NLL beyond {at} - up to {at}", f"writes worse beyond {at} (gold-token NLL)",
             f"writes better beyond {at} (gold-token NLL)")]


def _verdict(label, base, figures, at):
    """One method's verdict from its differences' figures, each judged by its Holm-adjusted p:
    whether it translates unseen lengths better than the baseline, and whether the difference is
    where it stops (the length ratio) or how it writes (the NLL's rise from seen to unseen lengths)."""
    said, unjudged = [], []
    for column, above, below in verdict_parts(at):
        found = figures.get(column)
        if not found:
            continue
        if "margin" not in found:
            unjudged.append(column)
            continue
        said.append(verdict_words(found, above, below, column))
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
    column, judged after Holm's correction over the table's judged cells; {label: {column: the
    Difference's figures}} for results.json, and the family's size."""
    found = {}
    for label in labels:
        for column in columns:
            one_runs, other_runs = runs.by_label.get(label, []), others.by_label.get(other_label(label), [])
            one, other = runs.values(label, column.value), others.values(other_label(label), column.value)
            if not one or not other:
                continue
            test_set = (None, None)
            if column.sentences is not None and len(one) == len(one_runs) and len(other) == len(other_runs):
                eval_set, ranges = column.sentences(*one_runs[0])
                test_set = test_set_component(runs.batch, [r for r, _ in one_runs], [r for r, _ in other_runs],
                                              eval_set, ranges=ranges or None) if ranges != [] else (None, None)
            # named by setting too: a method against itself on another setting is two samples
            found[(label, column.title)] = seed_difference((f"{runs.data}/{label}", f"{others.data}/{other_label(label)}"),
                                                           one, other, test_set=test_set)
    judged = [key for key, difference in found.items() if difference.judged]
    adjusted = dict(zip(judged, significance.holm([found[key].p_value() for key in judged])))
    rows, figures = [], {}
    for label in labels:
        cells, figures[label] = [], {}
        for column in columns:
            difference = found.get((label, column.title))
            if difference is None:
                cells.append("–")
                continue
            figures[label][column.title] = difference.figures(2)
            if difference.judged:
                figures[label][column.title].update(p_adjusted=adjusted[(label, column.title)], family=len(judged))
            cells.append(_cell(difference, figures[label][column.title]))
        rows.append([f"{label} ({len(runs.by_label[label])} vs {len(others.by_label[other_label(label)])})",
                     *cells])
    return rows, figures, len(judged)


def _cell(difference, figures, digits=2):
    if not difference.judged:
        return f"{difference.estimate:+.{digits}f} (not judged)"
    return (f"{difference.estimate:+.{digits}f} ± {difference.margin(2):.{digits}f} ({degrees_in_words(difference.df)} df; "
            f"p {figures['p']:.3f}, Holm {figures['p_adjusted']:.3f}; detectable {figures['detectable']:.2f})")


def _table(report, titles, rows, figures):
    """A table of differences under its column `titles`, and which of its cells lack the test set's component."""
    report.table(["method", *titles], rows)
    cells = [found for by_column in figures.values() for found in by_column.values() if "margin" in found]
    missing = sum(found["test_set_variance"] is None for found in cells)
    if missing:
        report.add(f"Test-set variance not measured in {missing} of the {len(cells)} judged cells (their runs kept no "
                   "translations, or the column is no BLEU): their intervals are the seeds' alone.", "")


def _penalty_table(report, runs, control):
    """Each method's BLEU by bucket of the test set, capped minus the control of the same method
    (a VANILLA setting of as many pairs, split at the same length): the extrapolation penalty."""
    labels = [label for label in runs.by_label if label in control.by_label]
    if not labels:
        return {}
    first = runs.by_label[labels[0]][0][1][runs.split_set]
    buckets = [bucket + (" *" if unseen else "") for bucket, unseen in zip(first["buckets"], first["unseen"])]

    def bucket(k):
        def measure(record, stored):
            result = stored[runs.split_set]
            return result["bleu"][k] if result["buckets"] == first["buckets"] else None
        return Column(first["buckets"][k], measure,
                      lambda record, stored: (runs.split_set, [bucket_range(first["buckets"][k])]))

    unseen = bleu_column("unseen BLEU", runs.split_set, lambda result, _: _buckets(result, runs.longest()))
    columns = [bucket(k) for k in range(len(first["buckets"]))] + [unseen]
    rows, figures, family = _differences(runs, control, labels, lambda label: label, columns)
    report.add(f"### {runs.data} against {control.data}: the extrapolation penalty by source length", "",
               f"{runs.split_set} BLEU of each bucket (* beyond the cap), each method trained on {runs.data} minus "
               f"the same method on {control.data} (a family of {family}); the last column: the unseen BLEU of the "
               f"buckets beyond {runs.longest()}, weighted by their sentences.", "")
    _table(report, [*buckets, f"unseen BLEU (> {runs.longest()})"], rows, figures)
    return figures
