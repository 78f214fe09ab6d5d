"""The SHAPE paper's findings, tested on a batch's results (the report's first table).

Each claim names the paper's figure, computes this batch's figure from the
stored results (result.json and analyses/*.json of each run), and says whether
it held: "yes", "no", or "not measured" (the batch lacks the data setting,
method or analysis it needs, or, for the swapped evaluation, APE itself shows
no effect to reduce). A claim is tested on a data setting of the kind the
paper used (VANILLA, EXTRAPOLATE, INTERPOLATE) where the batch has one, else
on another; the measured cell names the setting and its kind. The VANILLA BLEU
claim is tested on VANILLA only. The methods are recognized by their configs:
the experiment's baseline is APE, a method with `shape_max_shift` is SHAPE,
one with `max_relative_positions` is RPE; the first of each kind is used.
"""
import statistics

from onmt_posenc.analysis import length_buckets
from onmt_posenc.experiment import uses_shape
from onmt_posenc.runs import read_analysis

# How close "about the same" is: BLEU points, and training speed ratio.
SAME_BLEU = 1.0
SAME_SPEED = 0.05
# "Far below": SHAPE's swapped drop at most this share of APE's, which must itself be a real drop.
SWAPPED_SHARE, SWAPPED_MIN_APE_DROP = 0.5, 1.0
NEAR_INVARIANT = 0.9


def _role(record, baseline):
    config = record.get("config") or {}
    if record["method"] == baseline:
        return "APE"
    if uses_shape(config):
        return "SHAPE"
    if (config.get("max_relative_positions") or 0) > 0:
        return "RPE"
    return None


class Batch:
    """The finished runs of a batch, by data setting and role (APE, SHAPE, RPE)."""

    def __init__(self, experiment, records):
        self.experiment = experiment
        self.runs = {}  # (data, role) -> finished records of the first label of that role
        for record in records:
            role = _role(record, experiment.baseline) if record["status"] == "finished" else None
            if role is None:
                continue
            chosen = self.runs.setdefault((record["data"], role), [])
            if not chosen or chosen[0]["label"] == record["label"]:
                chosen.append(record)

    def settings(self, kind=None):
        """Data settings with results, those of `kind` (VANILLA, ...) first if given."""
        data = list(dict.fromkeys(d for d, _ in self.runs))
        return sorted(data, key=lambda d: self.experiment.data[d].kind != kind) if kind else data

    def first_seed(self, data, role):
        runs = self.runs.get((data, role))
        return min(runs, key=lambda r: r["seed"]) if runs else None

    def analysis(self, data, role, name):
        record = self.first_seed(data, role)
        if record is None or name not in record.get("analyses", {}):
            return None
        return read_analysis(record, name)

    def where(self, data):
        return f"{data} ({self.experiment.data[data].kind})"

    def mean_bleu(self, data, role, eval_set):
        scores = [r["bleu"][eval_set] for r in self.runs.get((data, role), []) if eval_set in r["bleu"]]
        return statistics.mean(scores) if scores else None


def _row(claim, paper, measured, held):
    return {"claim": claim, "paper": paper, "measured": measured,
            "held": held if isinstance(held, str) else "yes" if held else "no"}


def _missing(claim, paper, what):
    return _row(claim, paper, f"not in this batch ({what})", "not measured")


def vanilla_bleu(batch, role, paper):
    claim = f"{role}'s BLEU on VANILLA is about APE's (within {SAME_BLEU:g})"
    eval_set = "test" if "test" in batch.experiment.eval_sets else batch.experiment.eval_sets[-1]
    vanilla = [d for d in batch.settings() if batch.experiment.data[d].kind == "VANILLA"]
    for data in vanilla:
        ape, other = batch.mean_bleu(data, "APE", eval_set), batch.mean_bleu(data, role, eval_set)
        if ape is not None and other is not None:
            return _row(claim, paper, f"{batch.where(data)}, {eval_set}: {other:.2f} vs {ape:.2f} ({other - ape:+.2f})",
                        abs(other - ape) <= SAME_BLEU)
    return _missing(claim, paper, f"a VANILLA data setting with APE and {role}")


def unseen_lengths(batch, role, paper):
    claim = f"{role} >= APE on source lengths unseen in training"
    for data in batch.settings("EXTRAPOLATE"):
        ape, other = batch.analysis(data, "APE", "length_buckets"), batch.analysis(data, role, "length_buckets")
        if ape is None or other is None:
            continue
        names = sorted(ape, key=lambda name: name != "test")
        for name in names:
            if name not in other:
                continue
            result = length_buckets.compare({"APE": ape[name], role: other[name]}, "APE")
            if not any(result["unseen"]):
                continue
            unseen = [k for k, u in enumerate(result["unseen"]) if u]
            sentences = sum(result["counts"][k] for k in unseen)
            gain = sum(result["gain"][role][k] * result["counts"][k] for k in unseen) / sentences
            return _row(claim, paper, f"{batch.where(data)}, {name}: {sentences} sentences longer than any training source "
                                      f"(> {result['max_train_length']}): mean bucket gain {gain:+.2f}", gain >= 0)
    return _missing(claim, paper, f"length buckets with unseen lengths for APE and {role}")


def swapped(batch, paper):
    claim = "SHAPE's swapped drop is far below APE's"
    for data in batch.settings("INTERPOLATE"):
        ape, shape = batch.analysis(data, "APE", "swapped"), batch.analysis(data, "SHAPE", "swapped")
        if ape is None or shape is None:
            continue
        measured = f"{batch.where(data)}: APE {ape['drop']:.2f}, SHAPE {shape['drop']:.2f}"
        if ape["drop"] < SWAPPED_MIN_APE_DROP:
            return _row(claim, paper, measured + f"; APE drops < {SWAPPED_MIN_APE_DROP:g}, so there is no effect "
                                                 "for SHAPE to reduce", "not measured")
        return _row(claim, paper, measured, shape["drop"] <= SWAPPED_SHARE * ape["drop"])
    return _missing(claim, paper, "the swapped analysis for APE and SHAPE")


def shift_invariance(batch, paper):
    claim = f"SHAPE's encoder is near shift-invariant (>= {NEAR_INVARIANT:g}), APE's less"
    for data in batch.settings("VANILLA"):
        ape, shape = (batch.analysis(data, role, "shift_invariance") for role in ("APE", "SHAPE"))
        if ape is None or shape is None:
            continue
        rpe = batch.analysis(data, "RPE", "shift_invariance")
        note = "; RPE 1.00 by construction (no absolute positions)" if rpe and not rpe["absolute_positions"] else ""
        offsets = ", ".join(str(k) for k in shape["offsets"])
        measured = (f"{batch.where(data)}, offsets {offsets}: SHAPE {shape['mean_off_diagonal']:.3f}, "
                    f"APE {ape['mean_off_diagonal']:.3f}{note}")
        return _row(claim, paper, measured,
                    shape["mean_off_diagonal"] >= NEAR_INVARIANT and shape["mean_off_diagonal"] > ape["mean_off_diagonal"])
    return _missing(claim, paper, "the shift-invariance analysis for APE and SHAPE")


def speed(batch, speeds, role, paper, held):
    claim = {"SHAPE": f"SHAPE trains about as fast as APE (within x{1 - SAME_SPEED:.2f}..x{1 + SAME_SPEED:.2f})",
             "RPE": f"RPE trains slower than APE (below x{1 - SAME_SPEED:.2f})"}[role]
    for data in batch.settings("VANILLA"):
        ape, other = batch.first_seed(data, "APE"), batch.first_seed(data, role)
        if ape is None or other is None or other["label"] not in speeds.get(data, {}):
            continue
        ratio = speeds[data][other["label"]]
        return _row(claim, paper, f"{batch.where(data)}: x{ratio:.3f} training tokens/s", held(ratio))
    return _missing(claim, paper, f"training speed of APE and {role}")


def evaluate(experiment, records, speeds):
    """The claims table's rows; `speeds`: {data: {label: training speed relative to APE}}."""
    batch = Batch(experiment, records)
    return [
        vanilla_bleu(batch, "SHAPE", "test 30.49 vs 30.46 (+0.03)"),
        vanilla_bleu(batch, "RPE", "test 30.54 vs 30.46 (+0.08)"),
        unseen_lengths(batch, "SHAPE", "EXTRAPOLATE test 29.80 vs 29.22; gains grow with length (Fig. 4)"),
        unseen_lengths(batch, "RPE", "EXTRAPOLATE test 29.86 vs 29.22"),
        swapped(batch, "APE 28.81 -> 20.74 (drop 8.07), SHAPE 28.51 -> 27.06 (drop 1.45)"),
        shift_invariance(batch, "SHAPE near 1 at offsets 0-500, APE clearly lower (Fig. 3)"),
        speed(batch, speeds, "SHAPE", "x1.01 (VANILLA), x0.99 (EXTRAPOLATE, INTERPOLATE)",
              lambda ratio: abs(ratio - 1) <= SAME_SPEED),
        speed(batch, speeds, "RPE", "x0.91", lambda ratio: ratio < 1 - SAME_SPEED),
    ]
