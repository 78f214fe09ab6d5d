"""The finished runs of a batch by the role each method plays in the papers' tables, and
the shared ways the claims (shape_paper, perspe_paper) judge them.

The methods are recognized by their configs (ROLES): the experiment's baseline is
APE, a method with SHAPE on both sides is SHAPE, one with Shaw's relative attention
on both sides (its key term alone included) is RPE, and the perSPE paper's
encoder/decoder names (SPE, perSPE, none, RPE) for its ablations. Where a role has
several labels (a K grid), the one with the best BLEU on the `valid` set at the
lowest seed is used, as the paper chose K on its dev set; without that BLEU for each
label, none is (Batch.unchosen) and the role is not in the batch. A claim is "not measured"
where the batch cannot say: it lacks what the claim needs, or a model the claim rests
on has not converged (curves.RULE).

"About the same", "better" and "worse" are judged within SPREAD_FACTOR standard errors of the
difference of two means, from the seeds' spread: the two methods' own where either has
MIN_SEEDS_FOR_SPREAD seeds or more, else the spread of the methods of the batch that have (a
one-run comparison); where no method of the batch has, the claim cannot be judged and is not
measured.
"""
import math
import statistics
from typing import NamedTuple

from onmt_posenc.model.attention import attention_scheme
from onmt_posenc.model.positions import POSITION_ENCODINGS, side_schemes
from onmt_posenc.experiments.running.records import read_analysis

# How close "about the same" is: SPREAD_FACTOR standard errors of the difference (from the seeds' spread).
SPREAD_FACTOR = 2.0
# The fewest seeds a spread is taken from: the standard deviation of two values has one degree
# of freedom, and falls below a fifth of the true one about one time in six (two Multi30k APE
# seeds scored 36.675 and 36.681, which would have made every difference of 0.01 "not the same").
MIN_SEEDS_FOR_SPREAD = 3
# How a claim's measured text starts where the batch lacks what the claim needs (missing()).
NOT_IN_BATCH = "not in this batch"


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


class Batch:
    """The finished runs of a batch, by data setting and role (APE, SHAPE, RPE)."""

    def __init__(self, experiment, records):
        self.experiment, self.records = experiment, records
        by_label = {}  # (data, role) -> {label: finished records}
        for record in records:
            role = role_of(record, experiment.baseline) if record["status"] == "finished" else None
            if role is not None:
                by_label.setdefault((record["data"], role), {}).setdefault(record["label"], []).append(record)
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


def mean_cell(values, digits=2, seeds=False):
    """Seeds' values as a table cell: mean ± standard deviation (one value as it is, – for
    none); `seeds`: saying over how many."""
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    cell = f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"
    return f"{cell} ({len(values)} seeds)" if seeds else cell


def pooled_variance(samples):
    """The pooled variance of several samples (each of two values or more)."""
    return sum(statistics.variance(v) * (len(v) - 1) for v in samples) / sum(len(v) - 1 for v in samples)


def difference_tolerance(a, b, batch_seeds, digits=2):
    """How far apart two sets of values' means may be and still be "about the same":
    SPREAD_FACTOR standard errors of the difference of means, from the pooled variance of
    a's and b's seeds where either has MIN_SEEDS_FOR_SPREAD, else of `batch_seeds` ({name: values},
    the batch's methods with that many). Returns (tolerance, the rule in words); tolerance None
    where nothing has: the comparison cannot be judged."""
    own = [values for values in (a, b) if len(values) >= MIN_SEEDS_FOR_SPREAD]
    if own:
        variance, source = pooled_variance(own), "the seeds' spread"
    elif batch_seeds:
        variance = pooled_variance(list(batch_seeds.values()))
        source = "the batch's seed spread (" + ", ".join(f"{name}'s {len(v)} seeds" for name, v in batch_seeds.items()) + ")"
    else:
        return None, (f"cannot be judged: no method of the batch has {MIN_SEEDS_FOR_SPREAD} seeds, the fewest whose "
                      "spread is taken")
    error = math.sqrt(variance * (1 / len(a) + 1 / len(b)))
    return SPREAD_FACTOR * error, (f"the same if within ±{SPREAD_FACTOR * error:.{digits}f}, {SPREAD_FACTOR:g} standard "
                                   f"errors of the difference from {source}")


class Comparison(NamedTuple):
    """Two roles' BLEU on the evaluation set the claims read, in the first VANILLA setting with both."""
    data: str
    eval_set: str
    one: list  # the role's BLEU, a score a seed
    other: list  # the other role's
    tolerance: float  # difference_tolerance's; None: the comparison cannot be judged
    rule: str

    @property
    def means(self):
        return statistics.mean(self.one), statistics.mean(self.other)

    @property
    def difference(self):
        """Of the means, the role's minus the other's."""
        one, other = self.means
        return one - other


def compared_set(eval_sets):
    """The set on which methods' BLEU is compared across runs: test, else the last."""
    return "test" if "test" in eval_sets else eval_sets[-1]


def vanilla_comparison(batch, role, against):
    """`role` against `against` on the test set (else the last evaluation set) of the first
    VANILLA setting that has both; None where no setting has."""
    eval_set = compared_set(batch.experiment.eval_sets)
    for data in batch.of_kind("VANILLA"):
        one, other = batch.bleu(data, role, eval_set), batch.bleu(data, against, eval_set)
        if one and other:
            tolerance, rule = difference_tolerance(one, other, batch.seeded(data, eval_set))
            return Comparison(data, eval_set, one, other, tolerance, rule)
    return None


def row(claim, paper, measured, held):
    return {"claim": claim, "paper": paper, "measured": measured,
            "held": held if isinstance(held, str) else "yes" if held else "no"}


def missing(claim, paper, what):
    return row(claim, paper, f"{NOT_IN_BATCH} ({what})", "not measured")


def unconverged(claim, paper, measured, records):
    waiting = not_converged(records)
    if waiting:
        return row(claim, paper, f"{measured}; not converged: {'; '.join(waiting)}", "not measured")
    return None
