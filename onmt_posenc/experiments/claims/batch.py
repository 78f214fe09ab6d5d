"""The finished runs of a batch by the role each method plays in the papers' tables, and
the shared ways the claims (shape_paper, perspe_paper) judge them.

The methods are recognized by their configs (ROLES): the experiment's baseline is
APE, a method with SHAPE on both sides is SHAPE, one with Shaw's relative attention
on both sides (its key term alone included) is RPE, and the perSPE paper's
encoder/decoder names (SPE, perSPE, none, RPE) for its ablations. Where a role has
several labels (a K grid), the one with the best BLEU on the `valid` set at the
lowest seed is used, as the paper chose K on its dev set; without that BLEU for each
label, none is (Batch.unchosen) and the role is not in the batch. A run that failed to
learn (failed_to_learn) plays no role. A claim is "not measured" where the batch cannot
say: it lacks what the claim needs, or a model the claim rests on has not converged
(curves.RULE).

Two methods are compared over their seeds by a Difference: the difference of their means,
with a Student's t interval at CONFIDENCE from the seeds' spread, pooled over the methods
compared that have MIN_SEEDS_FOR_SPREAD seeds or more (else, for BLEU, over the methods of the
batch that have: a one-run comparison), at the degrees of freedom of that pooled variance.
A claim of sameness is judged two-sided and can only find "no difference measured"; a claim
of a direction (better, worse, not below, at most a share) one-sided. Without a spread the
comparison is not judged.
"""
import math
import statistics
from typing import NamedTuple

from onmt_posenc.core import significance
from onmt_posenc.core.scoring import sentence_statistics, signature_tokenizer
from onmt_posenc.model.attention import attention_scheme
from onmt_posenc.model.positions import POSITION_ENCODINGS, side_schemes
from onmt_posenc.experiments.running.curves import generalization_gap
from onmt_posenc.experiments.running.records import read_analysis, read_translations

# The confidence of every interval the claims print and judge by.
CONFIDENCE = 0.95
# The fewest seeds a spread is taken from: the standard deviation of two values has one degree
# of freedom, and falls below a fifth of the true one about one time in six (two Multi30k APE
# seeds scored 36.675 and 36.681, which would have made every difference of 0.01 "not the same").
MIN_SEEDS_FOR_SPREAD = 3
# How a claim's measured text starts where the batch lacks what the claim needs (missing()).
NOT_IN_BATCH = "not in this batch"
# A run failed to learn where, at the end of training, its validation perplexity is at least
# FAILED_VALID_RATIO times its data setting's baseline's AND its generalization gap (last
# validation perplexity over the last quarter's training perplexity) at least FAILED_GAP_RATIO
# times the baseline's: far above the baseline on held-out text while it fits its training
# data. Set from the 169 committed runs with both curves (against their setting's baseline):
# multi30k-scaled-swapped's INTERPOLATE-warm SHAPE K = 500 has 3.16 and 1.39; no other run's
# gap ratio is above 1.18, and the others at twice the baseline's perplexity or more (no
# positions or ALiBi on the synthetic task) fit their training data no better (gap ratios
# 0.88-0.92): models that cannot learn the task, not ones that failed to.
FAILED_VALID_RATIO, FAILED_GAP_RATIO = 2.0, 1.25


# A method's role, by (encoder, decoder, attention) of its config: the tables' names,
# the perSPE paper's "encoder/decoder" for its ablation (Oka et al. 2022, Tables 1, 4)
ROLES = {
    ("shape", "shape", "absolute"): "SHAPE",
    ("none", "none", "shaw"): "RPE",
    ("sinusoidal", "perspe-phrase", "absolute"): "perSPE",
    ("sinusoidal", "perspe-token", "absolute"): "SPE/perSPE-token",
    ("perspe-token", "sinusoidal", "absolute"): "perSPE-token/SPE",
    ("perspe-token", "perspe-token", "absolute"): "perSPE-token/perSPE-token",
    ("none", "sinusoidal", "absolute"): "none/SPE",
    ("sinusoidal", "none", "absolute"): "SPE/none",
    ("none", "none", "absolute"): "none/none",
    ("sinusoidal", "none", "decay-decoder"): "SPE/decay",
    ("none", "none", "shaw-encoder"): "RPE/none",
    ("none", "none", "shaw-decoder"): "none/RPE",
}


def role_of(record, baseline):
    config = record.get("config") or {}
    if record["method"] == baseline:
        return "APE"
    # each side's scheme as the extension resolves it, by its name in the roles (perSPE's says its unit)
    encoder, decoder = (POSITION_ENCODINGS[side].role(config.get) if side in POSITION_ENCODINGS else side
                        for side in side_schemes(config.get))
    attention = attention_scheme(config.get("relative_positions_buckets"), config.get("max_relative_positions"),
                                 config.get("relative_attention"))
    if attention != attention_scheme(0, 0, None) and config.get("relative_positions_side") not in (None, "both"):
        attention += f"-{config['relative_positions_side']}"
    return ROLES.get((encoder, decoder, attention))


def joined_training(setting):
    """Was this data setting's model trained on joined sentences (INTERPOLATE, or a
    synthetic task whose training examples join several)?"""
    return bool(setting.interpolate or (setting.synthetic and setting.synthetic.max_sentences > 1))


def not_converged(records):
    """'id (why)' of each record that has not converged by curves.RULE."""
    return [f"{r['id']} ({(r.get('convergence') or {}).get('why', 'no learning curve stored')})"
            for r in records if (r.get("convergence") or {}).get("converged") is not True]


def failed_to_learn(records, baseline):
    """{id: why} of the finished runs that failed to learn (FAILED_VALID_RATIO and
    FAILED_GAP_RATIO against the mean of their data setting's `baseline` runs); a run, or a
    baseline, without both learning curves is not judged."""
    def end(record):  # (last validation perplexity, generalization gap), None without both curves
        gap = generalization_gap(record.get("curve") or {})
        return None if gap is None else (record["curve"]["valid"][-1]["ppl"], gap)

    finished = [r for r in records if r["status"] == "finished" and end(r)]
    failed = {}
    for data in dict.fromkeys(r["data"] for r in finished):
        here = [r for r in finished if r["data"] == data]
        ends = [end(r) for r in here if r["method"] == baseline]
        if not ends:
            continue
        base_valid, base_gap = (statistics.mean(values) for values in zip(*ends))
        for record in here:
            valid, gap = end(record)
            if valid >= FAILED_VALID_RATIO * base_valid and gap >= FAILED_GAP_RATIO * base_gap:
                failed[record["id"]] = (f"valid ppl {valid:.2f}, x{valid / base_valid:.2f} {baseline}'s "
                                        f"{base_valid:.2f}; valid/train ppl {gap:.2f}, x{gap / base_gap:.2f} "
                                        f"{baseline}'s {base_gap:.2f}")
    return failed


class Batch:
    """The finished runs of a batch that learned (failed: {id: why} of those that did not), by
    data setting and role (APE, SHAPE, RPE). A run that has not converged (curves.RULE) leaves its
    role's seeds where the role has converged ones (left_out: "id (why)" of each): the design
    replaces it by the next seed, and it stays listed, outside every comparison; a role none of
    whose runs converged keeps them, and every claim on it is not measured. `family`: the claims
    table's comparisons, judged together (Family)."""

    def __init__(self, experiment, records):
        self.experiment, self.records = experiment, records
        self.failed = failed_to_learn(records, experiment.baseline)
        self.family, self._statistics = Family(), {}
        by_label = {}  # (data, role) -> {label: finished records}
        for record in records:
            learned = record["status"] == "finished" and record["id"] not in self.failed
            role = role_of(record, experiment.baseline) if learned else None
            if role is not None:
                by_label.setdefault((record["data"], role), {}).setdefault(record["label"], []).append(record)
        self.left_out = []
        for labels in by_label.values():
            for label, runs in labels.items():
                converged = [r for r in runs if not not_converged([r])]
                if converged and len(converged) < len(runs):
                    self.left_out += not_converged(runs)
                    labels[label] = converged
        self.runs, self.choices = {}, {}
        self.unchosen = {}  # (data, role) -> why none of its labels could be chosen
        for key, labels in by_label.items():
            if len(labels) == 1:
                self.runs[key] = next(iter(labels.values()))
                continue
            valid = {label: min(runs, key=lambda r: r["seed"])["bleu"].get("valid") for label, runs in labels.items()}
            lacking = [label for label, bleu in valid.items() if bleu is None]
            if lacking:  # chosen otherwise, it would be the grid's order or the test set
                self.unchosen[key] = (f"{key[1]} in {key[0]}: no label chosen among {', '.join(labels)} "
                                      f"(no valid BLEU for {', '.join(lacking)})")
                continue
            chosen = max(valid, key=valid.get)
            self.runs[key] = labels[chosen]
            scores = ", ".join(f"{label} {bleu:.2f}" for label, bleu in valid.items())
            self.choices[key] = f"{chosen} chosen on valid BLEU ({scores})"

    def statistics(self, records, eval_set, ranges=None):
        """([each record's BLEU sufficient statistics on the set's sentences], their scorer), or
        (None, why not): a run kept no translations. `ranges`: [(shortest, longest source)] of
        length buckets, the score then their BLEU weighted by their sentences (unseen_bleu)."""
        found, metric = [], None
        for record in records:
            key = (record["id"], eval_set)
            if key not in self._statistics:
                translations, why = read_translations(record, eval_set)
                self._statistics[key] = (why if translations is None else
                                         (*sentence_statistics(*translations[:2],
                                                               signature_tokenizer(record["bleu_signature"]))["bleu"],
                                          translations[2]))
            stored = self._statistics[key]
            if isinstance(stored, str):
                return None, stored
            metric, stats, lengths = stored
            found.append(stats if ranges is None else significance.grouped(stats, [
                next((k for k, (low, high) in enumerate(ranges) if low <= n <= high), None) for n in lengths]))
        scorer = significance.metric_scorer(metric)
        if ranges is not None:
            scorer = significance.group_weighted(scorer, len(ranges), found[0].shape[1] // len(ranges) - 1)
        return (found, scorer), None

    def test_set(self, one, other, eval_set, scale=1.0, ranges=None):
        """(the test set's component of `one`'s seeds' BLEU minus `scale` x `other`'s, None) or
        (None, why it is not measured): the same resampled sentences for both sides and every seed."""
        return test_set_component(self, one, other, eval_set, scale, ranges)

    def settings(self, kind=None):
        """Data settings with results, those of `kind` (VANILLA, ...) first if given."""
        data = list(dict.fromkeys(d for d, _ in self.runs))
        return sorted(data, key=lambda d: self.experiment.data[d].kind != kind) if kind else data

    def of_kind(self, kind):
        return [d for d in self.settings() if self.experiment.data[d].kind == kind]

    def first_seed(self, data, role):
        runs = self.runs.get((data, role))
        return min(runs, key=lambda r: r["seed"]) if runs else None

    def analysis(self, data, role, name):
        record = self.first_seed(data, role)
        if record is None or name not in record.get("analyses", {}):
            return None
        return read_analysis(record, name)

    def analyses(self, data, role, name):
        """(record, its analysis `name`) of each of the role's seeds that has it."""
        return [(record, read_analysis(record, name)) for record in self.runs.get((data, role), [])
                if name in record.get("analyses", {})]

    def where(self, data, *roles):
        choices = [self.choices[(data, role)] for role in roles if (data, role) in self.choices]
        return f"{data} ({self.experiment.data[data].kind}" + "".join(f"; {c}" for c in choices) + ")"

    def bleu(self, data, role, eval_set):
        return [r["bleu"][eval_set] for r in self.runs.get((data, role), []) if eval_set in r["bleu"]]

    def seeded(self, data, eval_set):
        """{role: its seeds' BLEU} of the roles in `data` with enough seeds for a spread: the batch's."""
        scores = {role: self.bleu(data, role, eval_set) for d, role in self.runs if d == data}
        return {role: values for role, values in scores.items() if len(values) >= MIN_SEEDS_FOR_SPREAD}


# The one "unseen BLEU" of the claims, the report and the pages
UNSEEN_BLEU = ("unseen BLEU: the BLEU of the test set's length buckets whose sources are all longer than the run's "
               "longest training example, weighted by their sentences")


def longest_training_example(record):
    """The longest source a run trained on, in tokens, after every transform (joining included):
    the record's longest_training_example, else the older longest_training_source; None if neither."""
    return (record.get("longest_training_example") or {}).get("source", record.get("longest_training_source"))


def bucket_range(bucket):
    """A length bucket's "16-20" as (16, 20)."""
    low, _, high = bucket.partition("-")
    return int(low), int(high or low)


def buckets_between(result, low, high=None):
    """Indices of a length analysis's buckets whose sources all lie above `low` (and at most `high`)."""
    return [k for k, bucket in enumerate(result["buckets"])
            if bucket_range(bucket)[0] > low and (high is None or bucket_range(bucket)[1] <= high)]


def bucket_bleu(result, buckets):
    """A length analysis's BLEU over the buckets `buckets` (indices), weighted by their sentences;
    None without any."""
    counts = sum(result["counts"][k] for k in buckets)
    return sum(result["bleu"][k] * result["counts"][k] for k in buckets) / counts if counts else None


# The statistics of every comparison the claims and the report judge, in words (Difference)
STATISTICS_WORDS = (
    "A difference of two methods' seed means gets an interval from both its components: the seeds' spread "
    "(Student's t over their scores, pooled over the methods with 3 seeds or more) and, where the runs kept their "
    "translations, the test set's sentences (sacreBLEU's paired bootstrap of 1,000 resamples, the same sentences "
    "for both sides and every seed, less the seed-by-sentence noise the seeds' spread already counts), added with "
    "Welch-Satterthwaite degrees of freedom; with one seed a side, sacreBLEU's paired bootstrap alone. Where a "
    "batch kept no translations, the interval is the seeds' alone and says \"test-set variance not measured\". "
    "Every \"no difference measured\" states the smallest difference it could have found at 80% power "
    "(two-sided 5%): (t(0.975, df) + t(0.80, df)) x the standard error.")


def claims_method(rows):
    """How a claims table's comparisons are judged, in words, with its family's size."""
    family = max((row.get("figures", {}).get("family", 0) for row in rows), default=0)
    return [STATISTICS_WORDS, "", f"The table's comparisons are one family of {family}: each verdict is judged after "
            "Holm's correction over them (the raw p beside the adjusted)." if family else
            "No comparison of this table is judged, so its family is empty."]


def mean_cell(values, digits=2, seeds=False):
    """Seeds' values as a table cell: mean ± standard deviation (one value as it is, – for
    none); `seeds`: saying over how many."""
    if not values:
        return "–"
    cell = (f"{values[0]:.{digits}f}" if len(values) == 1
            else f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}")
    return f"{cell} ({len(values)} seed{'s' if len(values) > 1 else ''})" if seeds else cell


def t_quantile(df, sides):
    """Student's t at `df` degrees of freedom that a difference must pass, in standard errors,
    at CONFIDENCE: sides 2, either way (2.776 at 4 df); sides 1, one way (2.132)."""
    return significance.t_quantile(df, 1 - (1 - CONFIDENCE) / sides)


class Spread(NamedTuple):
    """A variance pooled over the seeds of several methods, its degrees of freedom, and whose it is."""
    variance: float
    df: int
    source: str

    @classmethod
    def pooled(cls, samples, source):
        """Of {name: values} (each of two values or more); source: words before the seeds' names."""
        df = sum(len(values) - 1 for values in samples.values())
        variance = sum(statistics.variance(values) * (len(values) - 1) for values in samples.values()) / df
        seeds = " and ".join(f"{name}'s {len(values)}" for name, values in samples.items())
        return cls(variance, df, f"{source}{seeds} seeds")


def degrees_in_words(df):
    """Degrees of freedom in words: a count as it is, a Welch-Satterthwaite df to one decimal."""
    return f"{df:.0f}" if float(df).is_integer() else f"{df:.1f}"


class Difference(NamedTuple):
    """One quantity of two methods over their seeds: `one`'s mean minus `scale` times `other`'s
    (scale 1: the plain difference; 0.5: against half the other's), with Student's t interval
    from `spread` (None: too few seeds for one) and, where the runs' translations were kept, the
    test set's own component beside it (`test_set`, a significance.SentenceComponent; None: not
    measured, `test_set_why` says why). With neither spread nor test set it is not judged; with a
    test set and one seed a side, sacreBLEU's paired bootstrap judges it."""
    names: tuple  # (one's, other's)
    one: list  # the quantity, a value a seed
    other: list
    spread: Spread
    scale: float = 1.0
    test_set: object = None
    test_set_why: str = None

    @property
    def judged(self):
        return self.spread is not None or self.test_set is not None

    @property
    def estimate(self):
        return statistics.mean(self.one) - self.scale * statistics.mean(self.other)

    @property
    def seed_variance(self):
        if self.spread is None:
            return None
        return self.spread.variance * (1 / len(self.one) + self.scale ** 2 / len(self.other))

    def _error(self):
        """(standard error, degrees of freedom): the seeds' alone, or both components added
        (significance.combined); with one seed a side, the paired bootstrap's."""
        if self.test_set is None:
            return math.sqrt(self.seed_variance), self.spread.df
        if self.spread is None:
            return significance.combined(None, None, self.test_set.total, self.test_set.sentences)
        return significance.combined(self.seed_variance, self.spread.df, self.test_set.variance,
                                     self.test_set.sentences)

    @property
    def standard_error(self):
        return self._error()[0]

    @property
    def df(self):
        return self._error()[1]

    def margin(self, sides):
        """How far the estimate may be from the true difference at CONFIDENCE: sides 2, either
        way; sides 1, the one way a one-sided rule reads."""
        return t_quantile(self.df, sides) * self.standard_error

    def p_value(self, bound=None):
        """Its p (bound None: two-sided; "lower"/"upper": of the claim that it is above/below 0);
        with one seed a side and a test set, sacreBLEU's paired bootstrap p (halved one way)."""
        if self.spread is None:
            both = self.test_set.paired_bootstrap_p(self.estimate)
            if bound is None:
                return both
            return both / 2 if (self.estimate > 0) == (bound == "lower") else 1 - both / 2
        return significance.p_value(self.estimate, self.standard_error, self.df, bound)

    def detectable(self):
        """The smallest difference found at 80% power (two-sided, 1 - CONFIDENCE; significance.detectable)."""
        return significance.detectable(self.standard_error, self.df, CONFIDENCE)

    def what(self):
        one, other = self.names
        return f"{one} - {other}" if self.scale == 1 else f"{one} - {self.scale:g} x {other}"

    def components(self, digits=2):
        """Where the interval comes from, in words: the t and its df, the seeds, the test set."""
        if self.spread is None:
            return (f"sacreBLEU's paired bootstrap, {len(self.test_set.differences)} resamples of the "
                    f"{self.test_set.sentences} sentences, one seed a side")
        seeds = f"{self.spread.source}"
        if self.test_set is None:
            return f"{seeds}; test-set variance not measured" + (f" ({self.test_set_why})" if self.test_set_why else "")
        return (f"{seeds} (± {math.sqrt(self.seed_variance):.{digits}f}) and the test set's "
                f"{self.test_set.sentences} sentences (± {math.sqrt(self.test_set.variance):.{digits}f}, paired "
                f"bootstrap of {len(self.test_set.differences)} resamples)")

    def interval(self, sides, digits=2, bound=None):
        """The estimate and its interval in words: sides 2, ± the margin; sides 1, the `bound`
        ("lower" or "upper") a one-sided rule reads; then the t, its degrees of freedom and the
        components (the seeds, the test set's sentences)."""
        margin, estimate = self.margin(sides), self.estimate
        shown = (f"{estimate:+.{digits}f} ± {margin:.{digits}f}" if sides == 2 else
                 f"{estimate:+.{digits}f}, {'at least' if bound == 'lower' else 'at most'} "
                 f"{estimate - margin if bound == 'lower' else estimate + margin:+.{digits}f}")
        kind = "two-sided" if sides == 2 else "one-sided"
        return (f"{self.what()} {shown} ({kind} {CONFIDENCE:.0%}, Student's t {t_quantile(self.df, sides):.3f} "
                f"at {degrees_in_words(self.df)} df from {self.components(digits)})")

    def figures(self, sides, bound=None):
        """The numbers the row states, for results.json: estimate, margin, the bound read, df, seeds,
        p, the smallest detectable difference and the components."""
        figures = {"estimate": self.estimate, "means": [statistics.mean(self.one), statistics.mean(self.other)],
                   "seeds": [len(self.one), len(self.other)], **({"scale": self.scale} if self.scale != 1 else {})}
        if not self.judged:
            return figures
        figures.update(margin=self.margin(sides), sides=sides, df=self.df, t=t_quantile(self.df, sides),
                       p=self.p_value(bound), detectable=self.detectable(),
                       seed_variance=self.seed_variance,
                       test_set_variance=None if self.test_set is None else
                       (self.test_set.total if self.spread is None else self.test_set.variance))
        if bound:
            figures[bound] = self.estimate + (-1 if bound == "lower" else 1) * figures["margin"]
        return figures


def seed_difference(names, one, other, batch_seeds=None, scale=1.0, test_set=(None, None)):
    """The Difference of two methods' values, a value a seed, judged by the variance pooled over
    whichever of the two has MIN_SEEDS_FOR_SPREAD seeds or more, else over `batch_seeds` ({name:
    values} of the batch's methods with that many: for BLEU, a one-run comparison), else none;
    `test_set`: (the test set's component, or None and why it is not measured)."""
    own = {name: values for name, values in zip(names, (one, other)) if len(values) >= MIN_SEEDS_FOR_SPREAD}
    if own:
        spread = Spread.pooled(own, "")
    elif batch_seeds:
        spread = Spread.pooled(batch_seeds, "the batch's spread: ")
    else:
        spread = None
    component, why = test_set
    if spread is None and component is not None and max(len(one), len(other)) > 1:
        component, why = None, "test set not judged alone: several seeds a side and no spread"
    return Difference(tuple(names), list(one), list(other), spread, scale, component, why)


def test_set_component(source, one, other, eval_set, scale=1.0, ranges=None):
    """(the paired bootstrap's component of `one`'s records minus `scale` x `other`'s on `eval_set`,
    None) or (None, why not); `source`: what reads the records' statistics (Batch.statistics)."""
    if not one or not other:
        return None, "no runs"
    found, why = source.statistics(one, eval_set, ranges)
    if why is None:
        other_found, why = source.statistics(other, eval_set, ranges)
    if why is not None:
        return None, why
    if len(found[0][0]) == 0:
        return None, "no sentence in the range"
    return significance.SentenceComponent(found[0], other_found[0], found[1], scale), None


def too_few_seeds(difference, batch_wide):
    """Why a Difference without a spread is not judged: "one seed" where each side has one and
    no other method could lend a spread; `batch_wide`: whether the batch's other methods could."""
    if max(len(difference.one), len(difference.other)) == 1 and not batch_wide:
        return "one seed: not judged by spread"
    whose = "no method of the batch has" if batch_wide else "neither method has"
    return f"not judged: {whose} {MIN_SEEDS_FOR_SPREAD} seeds, the fewest whose spread is taken"


def not_seen(difference, digits=2):
    """What a comparison that found no difference could have missed: "within ±margin; a difference
    under D would not be seen" (D at 80% power, two-sided 1 - CONFIDENCE: significance.detectable)."""
    return (f"within ±{difference.margin(2):.{digits}f}; a difference under {difference.detectable():.{digits}f} "
            "would not be seen")


def family_verdict(figures, above, below, what):
    """The verdict of a difference judged in a family, from its figures (Difference.figures with
    p_adjusted): `above` or `below` (by its sign) where its Holm-adjusted p is under 1 -
    CONFIDENCE; else no difference in `what` measured, "after Holm's correction" where its own p is."""
    if figures["p_adjusted"] < 1 - CONFIDENCE:
        return above if figures["estimate"] > 0 else below
    if figures["p"] < 1 - CONFIDENCE:  # its own interval clears zero, its family's correction does not
        return f"no difference in {what} measured after Holm's correction"
    return f"no difference in {what} measured"


def family_figures(figures, digits=2):
    """What a family's verdict rests on, in words: the estimate, margin and both p, and where its
    own p finds nothing, what it could have missed (not_seen's words)."""
    shown = (f"{figures['estimate']:+.{digits}f} ± {figures['margin']:.{digits}f}, p {figures['p']:.3f}, "
             f"Holm-adjusted {figures['p_adjusted']:.3f}")
    if figures["p"] >= 1 - CONFIDENCE:  # (a Holm-adjusted p is never below its own)
        shown += (f": within ±{figures['margin']:.{digits}f}; a difference under {figures['detectable']:.{digits}f} "
                  "would not be seen")
    return shown


def verdict_words(figures, above, below, what, digits=2):
    """family_verdict, then what it rests on (family_figures) in parentheses."""
    return f"{family_verdict(figures, above, below, what)} ({family_figures(figures, digits)})"


class Rule(NamedTuple):
    """How a claim reads a Difference: two-sided (bound None: a sameness, which can only find a
    difference) or one-sided on the bound it reads ("lower": the claim is that the difference is
    above zero; "upper": below); the verdict ("held") and its words where the difference is
    measured that way and where it is not. Measured: its p below 1 - CONFIDENCE (the interval
    clears zero), or, judged in a family, its Holm-adjusted p."""
    sides: int
    bound: str
    cleared: tuple  # (held, words)
    not_cleared: tuple

    def judge(self, difference, batch_wide=False, digits=2, adjusted=None):
        """(held, the interval and verdict in words, the figures for results.json); without a
        spread: not measured, and why. `adjusted`: (its Holm-adjusted p, the family's size)."""
        if not difference.judged:
            return ("not measured", f"{difference.what()} {difference.estimate:+.{digits}f}; "
                    f"{too_few_seeds(difference, batch_wide)}", difference.figures(self.sides))
        figures = difference.figures(self.sides, self.bound)
        p = figures["p"] if adjusted is None else adjusted[0]
        measured = p < 1 - CONFIDENCE
        held, words = self.cleared if measured else self.not_cleared
        if not measured and figures["p"] < 1 - CONFIDENCE:  # its interval clears zero, its family's correction not
            words = f"{words} after Holm's correction"
        elif not measured:
            words = f"{words} ({not_seen(difference, digits)})"
        figures["verdict"] = words  # the words alone, for the pages that quote a claim's verdict
        shown = f"p {figures['p']:.3f}"
        if adjusted is not None:
            figures.update(p_adjusted=adjusted[0], family=adjusted[1])
            shown += f", Holm-adjusted {adjusted[0]:.3f} over the {adjusted[1]} comparisons of its table"
        return held, f"{difference.interval(self.sides, digits, self.bound)}, {shown}: {words}", figures


class Family:
    """The comparisons of one table, judged together under Holm's correction over their p-values.
    The table is made twice: the first pass collects each judged comparison's p, close() adjusts
    them, the second pass judges each by its adjusted p, in the same order."""

    def __init__(self):
        self.p, self.adjusted, self.next = [], None, 0

    def judge(self, rule, difference, records=(), **options):
        """rule.judge of `difference`, in the family unless it is not judged or a model of
        `records` has not converged (its row is then not measured, and no member)."""
        if not difference.judged or not_converged(records):
            return rule.judge(difference, **options)
        if self.adjusted is None:
            self.p.append(difference.p_value(rule.bound))
            return rule.judge(difference, **options)
        adjusted = self.adjusted[self.next]
        self.next += 1
        return rule.judge(difference, adjusted=(adjusted, len(self.p)), **options)

    def close(self):
        self.adjusted, self.next = significance.holm(self.p), 0

    def __len__(self):
        return len(self.p)


SAME = Rule(2, None, ("no", "a difference measured"), ("no difference measured", "no difference measured"))
ABOVE = Rule(1, "lower", ("yes", "above, measured"), ("no", "no rise measured"))
BELOW = Rule(1, "upper", ("yes", "below, measured"), ("no", "no drop measured"))
NOT_BELOW = Rule(1, "upper", ("no", "below, measured"), ("no drop measured", "no drop measured"))


class Comparison(NamedTuple):
    """Two roles' BLEU on the evaluation set the claims read, in the first VANILLA setting with both."""
    data: str
    eval_set: str
    difference: Difference


def compared_set(eval_sets):
    """The set on which methods' BLEU is compared across runs: test, else the last."""
    return "test" if "test" in eval_sets else eval_sets[-1]


def comparison(batch, role, against, scale=1.0, kind="VANILLA"):
    """`role` against `against` (times `scale`) on the test set (else the last evaluation set)
    of the first setting of `kind` (VANILLA, EXTRAPOLATE) that has both, with the test set's
    component where the runs kept their translations; None where none has."""
    eval_set = compared_set(batch.experiment.eval_sets)
    for data in batch.of_kind(kind):
        one, other = batch.bleu(data, role, eval_set), batch.bleu(data, against, eval_set)
        if one and other:
            test_set = batch.test_set(batch.runs[(data, role)], batch.runs[(data, against)], eval_set, scale)
            return Comparison(data, eval_set, seed_difference((role, against), one, other,
                                                              batch.seeded(data, eval_set), scale, test_set))
    return None


def row(claim, paper, measured, held, figures=None):
    """A row of the claims table; `figures`: the numbers it states, by name (results.json keeps them)."""
    return {"claim": claim, "paper": paper, "measured": measured,
            "held": held if isinstance(held, str) else "yes" if held else "no",
            **({"figures": figures} if figures else {})}


def missing(claim, paper, what):
    return row(claim, paper, f"{NOT_IN_BATCH} ({what})", "not measured")


def unconverged(claim, paper, measured, records, figures=None):
    """The row "not measured" where a model of `records` has not converged (its figures still
    shown), else None."""
    waiting = not_converged(records)
    if waiting:
        return row(claim, paper, f"{measured}; not converged: {'; '.join(waiting)}", "not measured", figures)
    return None
