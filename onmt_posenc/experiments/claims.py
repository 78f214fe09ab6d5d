"""The SHAPE paper's findings, tested on a batch's results (the report's first table).

Each claim names the paper's figure, computes this batch's figure from the
stored results (result.json and analyses/*.json of each run), and says whether
it held: "yes", "no", or "not measured". Not measured means the batch cannot
say: it lacks the data setting, method or analysis the claim needs; a model
the claim rests on has not converged (curves.RULE); or, for the swapped
evaluation, a model does not write the separators or APE shows no effect to
reduce. A claim is computed only on the kind of data setting the paper used
for it: VANILLA for BLEU, EXTRAPOLATE for unseen lengths, models trained on
joined sentences (INTERPOLATE) for the swapped evaluation; speed and shift
invariance (measured by the paper on every setting, or independent of the data)
prefer VANILLA and name the setting they used.

The methods are recognized by their configs (ROLES): the experiment's baseline is
APE, a method with SHAPE on both sides is SHAPE, one with Shaw's relative attention
on both sides (its key term alone included) is RPE. Where a role has several labels
(a K grid), the one with the best BLEU on the `valid` set at the lowest seed is used,
as the paper chose K on its dev set.

Where a batch has them, the perSPE paper's findings (Oka et al. 2022) follow, the
methods named as its tables name them (encoder/decoder: SPE, perSPE, none, RPE), and
seed 003's on the decaying attention mask; judged the same way, on trained models
only, "about the same" within the seeds' spread.
"""
import math
import statistics

from onmt_posenc.analysis import length_buckets
from onmt_posenc.model.attention import attention_scheme
from onmt_posenc.experiments.store import read_analysis

# How close "about the same" is with one seed: BLEU points; with several seeds it is
# SPREAD_FACTOR standard errors of the difference (from the seeds' spread).
SAME_BLEU = 1.0
SPREAD_FACTOR = 2.0
# Training speed ratio within this of 1 is "about as fast".
SAME_SPEED = 0.05
# A machine whose load average exceeds its cores by more than this was shared
LOAD_MARGIN = 0.5
# "Far below": SHAPE's swapped drop at most this share of APE's, which must itself be a real drop.
SWAPPED_SHARE, SWAPPED_MIN_APE_DROP = 0.5, 1.0
NEAR_INVARIANT = 0.9
# "Collapses": BLEU at most this share of the other method's
COLLAPSE = 0.75


def side_encodings(config):
    """(encoder, decoder) absolute encodings a run's config chooses, as the extension
    resolves them (options.resolve_position_options), without OpenNMT-py's parser."""
    def side(key, default):
        return config.get(key) or default

    absolute = "sinusoidal" if config.get("position_encoding") else "none"
    shape = "shape" if config.get("shape_max_shift") is not None else absolute
    return (side("src_position_encoding", shape),
            side("tgt_position_encoding", "perspe" if config.get("perspe_range") is not None else shape))


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


def _role(record, baseline):
    config = record.get("config") or {}
    if record["method"] == baseline:
        return "APE"
    unit = "phrase" if config.get("perspe_unit") in (None, "phrase") else "token"
    encoder, decoder = (f"perspe-{unit}" if side == "perspe" else side for side in side_encodings(config))
    attention = attention_scheme(config.get("relative_positions_buckets"), config.get("max_relative_positions"),
                                 config.get("relative_attention"))
    if attention != "absolute" and config.get("relative_positions_side") not in (None, "both"):
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
        self.experiment = experiment
        by_label = {}  # (data, role) -> {label: finished records}
        for record in records:
            role = _role(record, experiment.baseline) if record["status"] == "finished" else None
            if role is not None:
                by_label.setdefault((record["data"], role), {}).setdefault(record["label"], []).append(record)
        self.runs = {key: labels[self.choose(labels)] for key, labels in by_label.items()}
        self.choices = {key: self.describe_choice(labels) for key, labels in by_label.items() if len(labels) > 1}

    @staticmethod
    def _valid_bleu(runs):
        first = min(runs, key=lambda r: r["seed"])
        return first["bleu"].get("valid", -math.inf)

    def choose(self, labels):
        return max(labels, key=lambda label: self._valid_bleu(labels[label])) if len(labels) > 1 else next(iter(labels))

    def describe_choice(self, labels):
        chosen = self.choose(labels)
        scores = ", ".join(f"{label} {self._valid_bleu(runs):.2f}" for label, runs in labels.items())
        return f"{chosen} chosen on valid BLEU ({scores})"

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

    def where(self, data, *roles):
        choices = [self.choices[(data, role)] for role in roles if (data, role) in self.choices]
        return f"{data} ({self.experiment.data[data].kind}" + "".join(f"; {c}" for c in choices) + ")"

    def bleu(self, data, role, eval_set):
        return [r["bleu"][eval_set] for r in self.runs.get((data, role), []) if eval_set in r["bleu"]]


def _mean_cell(values):
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f} ({len(values)} seeds)"


def same_bleu_tolerance(a, b):
    """How far apart two methods' mean BLEU may be and still be "about the same": with
    seeds, SPREAD_FACTOR standard errors of the difference of means (the seeds' pooled
    variance); with one seed each, SAME_BLEU. Returns (tolerance, how it was set)."""
    spread = [values for values in (a, b) if len(values) > 1]
    if not spread:
        return SAME_BLEU, f"the same if within ±{SAME_BLEU:g} BLEU (one seed each)"
    pooled = sum(statistics.variance(v) * (len(v) - 1) for v in spread) / sum(len(v) - 1 for v in spread)
    error = math.sqrt(pooled * (1 / len(a) + 1 / len(b)))
    return SPREAD_FACTOR * error, (f"the same if within ±{SPREAD_FACTOR * error:.2f}, {SPREAD_FACTOR:g} "
                                   "standard errors of the seeds' spread")


def _row(claim, paper, measured, held):
    return {"claim": claim, "paper": paper, "measured": measured,
            "held": held if isinstance(held, str) else "yes" if held else "no"}


def _missing(claim, paper, what):
    return _row(claim, paper, f"not in this batch ({what})", "not measured")


def _unconverged(claim, paper, measured, records):
    waiting = not_converged(records)
    if waiting:
        return _row(claim, paper, f"{measured}; not converged: {'; '.join(waiting)}", "not measured")
    return None


def vanilla_bleu(batch, role, paper):
    claim = f"{role}'s BLEU on VANILLA is about APE's"
    eval_set = "test" if "test" in batch.experiment.eval_sets else batch.experiment.eval_sets[-1]
    for data in batch.of_kind("VANILLA"):
        ape, other = batch.bleu(data, "APE", eval_set), batch.bleu(data, role, eval_set)
        if not ape or not other:
            continue
        tolerance, rule = same_bleu_tolerance(ape, other)
        difference = statistics.mean(other) - statistics.mean(ape)
        measured = (f"{batch.where(data, role)}, {eval_set}: {_mean_cell(other)} vs {_mean_cell(ape)} "
                    f"({difference:+.2f}; {rule})")
        return (_unconverged(claim, paper, measured, batch.runs[(data, "APE")] + batch.runs[(data, role)])
                or _row(claim, paper, measured, abs(difference) <= tolerance))
    return _missing(claim, paper, f"a VANILLA data setting with APE and {role}")


def unseen_lengths(batch, role, paper):
    claim = f"{role} >= APE on source lengths unseen in training"
    for data in batch.of_kind("EXTRAPOLATE"):
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
            measured = (f"{batch.where(data, role)}, {name}: {sentences} sentences longer than any training source "
                        f"(> {result['max_train_length']}): BLEU gain per bucket, weighted by its sentences, "
                        f"{gain:+.2f}")
            used = [batch.first_seed(data, "APE"), batch.first_seed(data, role)]
            return _unconverged(claim, paper, measured, used) or _row(claim, paper, measured, gain >= 0)
    return _missing(claim, paper, f"an EXTRAPOLATE data setting with length buckets for APE and {role}")


def _swapped_cell(result):
    return f"{result['original']:.2f} -> {result['swapped']:.2f} (drop {result['drop']:.2f})"


def swapped(batch, paper):
    """On models trained on joined sentences, the paper's set (joined training examples)
    first, else the evaluation set the experiment names; of several such data settings,
    the first with drops for both models: found by the separators where both write them
    right, else by alignment (results stored before the alignment existed have none: the
    row then names each model's separators)."""
    claim = "SHAPE's swapped drop is far below APE's"
    not_applicable = []
    for data in (d for d in batch.settings() if joined_training(batch.experiment.data[d])):
        ape, shape = batch.analysis(data, "APE", "swapped"), batch.analysis(data, "SHAPE", "swapped")
        if ape is None or shape is None:
            continue
        name = next((n for n in sorted(ape, key=lambda n: n != "train") if n in shape), None)
        if name is None:
            continue
        where = f"{batch.where(data, 'SHAPE')}, {'training examples' if name == 'train' else name}"
        unusable = [f"{role}: {result['why']}" for role, result in (("APE", ape[name]), ("SHAPE", shape[name]))
                    if not result["applicable"]]
        ape_result, shape_result = ape[name], shape[name]
        if unusable and ape_result.get("aligned") and shape_result.get("aligned"):
            # X1 found by minimum edit distance instead of the separators the models do not write
            ape_result, shape_result = ape_result["aligned"], shape_result["aligned"]
            where += (f", X1 found by alignment (separators wrong on {ape[name]['wrong_separators']:.0%} of APE's "
                      f"and {shape[name]['wrong_separators']:.0%} of SHAPE's lines)")
        elif unusable:
            not_applicable.append(f"{where}: {'; '.join(unusable)}")
            continue
        measured = f"{where}: APE {_swapped_cell(ape_result)}, SHAPE {_swapped_cell(shape_result)}"
        used = [batch.first_seed(data, "APE"), batch.first_seed(data, "SHAPE")]
        waiting = _unconverged(claim, paper, measured, used)
        if waiting:
            return waiting
        if ape_result["drop"] < SWAPPED_MIN_APE_DROP:
            return _row(claim, paper, measured + f"; APE drops < {SWAPPED_MIN_APE_DROP:g}, so there is no effect "
                                                 "for SHAPE to reduce", "not measured")
        return _row(claim, paper, measured, shape_result["drop"] <= SWAPPED_SHARE * ape_result["drop"])
    if not_applicable:
        return _row(claim, paper, "; ".join(not_applicable), "not measured")
    return _missing(claim, paper, "a setting trained on joined sentences (INTERPOLATE) with the swapped analysis "
                                  "for APE and SHAPE")


def shift_invariance(batch, paper):
    claim = f"SHAPE's encoder is near shift-invariant (>= {NEAR_INVARIANT:g}), APE's less"
    for data in batch.settings("VANILLA"):
        ape, shape = (batch.analysis(data, role, "shift_invariance") for role in ("APE", "SHAPE"))
        if ape is None or shape is None:
            continue
        rpe = batch.analysis(data, "RPE", "shift_invariance")
        note = "; RPE 1.00 by construction (no absolute positions)" if rpe and not rpe["absolute_positions"] else ""
        offsets = ", ".join(str(k) for k in shape["offsets"])
        measured = (f"{batch.where(data, 'SHAPE')}, offsets {offsets}: SHAPE {shape['mean_off_diagonal']:.3f}, "
                    f"APE {ape['mean_off_diagonal']:.3f}{note}")
        return _row(claim, paper, measured,
                    shape["mean_off_diagonal"] >= NEAR_INVARIANT and shape["mean_off_diagonal"] > ape["mean_off_diagonal"])
    return _missing(claim, paper, "the shift-invariance analysis for APE and SHAPE")


def shared_device(record):
    """Why a run's training speed says nothing about its method (None: it trained alone):
    other trainings beside it, a machine loaded beyond its cores, or nothing recorded."""
    sharing = record.get("device_sharing")
    if not sharing:
        return f"{record['id']}: whether it shared its machine was not recorded"
    if sharing.get("other_trainings"):
        return f"{record['id']} trained beside {sharing['other_trainings']} other training(s)"
    load, cores = sharing.get("load_average"), sharing.get("cores")
    if load is not None and cores and load > cores + LOAD_MARGIN:
        return f"{record['id']} trained on a loaded machine (load average {load:.1f} on {cores} cores)"
    return None


def speed(batch, speeds, role, paper, held):
    claim = {"SHAPE": f"SHAPE trains about as fast as APE (within x{1 - SAME_SPEED:.2f}..x{1 + SAME_SPEED:.2f})",
             "RPE": f"RPE trains slower than APE (below x{1 - SAME_SPEED:.2f})"}[role]
    for data in batch.settings("VANILLA"):
        ape, other = batch.first_seed(data, "APE"), batch.first_seed(data, role)
        if ape is None or other is None or other["label"] not in speeds.get(data, {}):
            continue
        ratio = speeds[data][other["label"]]
        measured = f"{batch.where(data, role)}: x{ratio:.3f} training tokens/s"
        shared = list(filter(None, (shared_device(ape), shared_device(other))))
        if shared:  # a ratio measured beside other work depends on that work
            return _row(claim, paper, f"{measured}; not a measurement of the method: {'; '.join(shared)}",
                        "not measured")
        return _row(claim, paper, measured, held(ratio))
    return _missing(claim, paper, f"training speed of APE and {role}")


def compare(batch, claim, paper, role, against, judge):
    """`role` against `against` on the test set of the first VANILLA setting with both:
    judge(difference, tolerance, role's mean, against's mean) says if the claim held."""
    eval_set = "test" if "test" in batch.experiment.eval_sets else batch.experiment.eval_sets[-1]
    for data in batch.of_kind("VANILLA"):
        one, other = batch.bleu(data, role, eval_set), batch.bleu(data, against, eval_set)
        if not one or not other:
            continue
        tolerance, rule = same_bleu_tolerance(one, other)
        difference = statistics.mean(one) - statistics.mean(other)
        measured = (f"{batch.where(data, role, against)}, {eval_set}: {role} {_mean_cell(one)} vs {against} "
                    f"{_mean_cell(other)} ({difference:+.2f}; {rule})")
        return (_unconverged(claim, paper, measured, batch.runs[(data, role)] + batch.runs[(data, against)])
                or _row(claim, paper, measured, judge(difference, tolerance, statistics.mean(one),
                                                      statistics.mean(other))))
    return _missing(claim, paper, f"a VANILLA data setting with {role} and {against}")


def better(difference, tolerance, *means):
    return difference > tolerance


def worse(difference, tolerance, *means):
    return difference < -tolerance


def same(difference, tolerance, *means):
    return abs(difference) <= tolerance


def collapses(difference, tolerance, mean, against):
    """Far below: at most COLLAPSE of the other's BLEU (the perSPE paper's 22.8 of 40.8 is 0.56)."""
    return mean <= COLLAPSE * against


def decaying_mask_without_training(batch, paper):
    """Seed 003's untrained check on the baseline (APE) model: perplexity with the decoder's
    positions removed, and removed but the decaying mask in its self-attention."""
    claim = "Without training, the decaying mask recovers part of what removing the decoder's positions costs"
    for data in batch.of_kind("VANILLA"):
        ablation = batch.analysis(data, "APE", "position_ablation")
        conditions = (ablation or {}).get("conditions") or {}
        if not {"decoder", "decoder+decay"} <= set(conditions):
            continue
        kept, removed, decay = (ablation["perplexity_kept"], conditions["decoder"]["perplexity"],
                                conditions["decoder+decay"]["perplexity"])
        measured = (f"{batch.where(data, 'APE')}, APE's perplexity: {kept:.2f} as trained, {removed:.2f} without "
                    f"the decoder's positions, {decay:.2f} without them but with the decaying mask")
        return (_unconverged(claim, paper, measured, [batch.first_seed(data, "APE")])
                or _row(claim, paper, measured, decay < removed))
    return _missing(claim, paper, "the position ablation of an APE model with its decoder conditions")


def perspe_claims(batch):
    """The perSPE paper's findings (Oka et al. 2022; ASPEC En->Ja unless said) and seed 003's
    on the decaying mask, where the batch has the methods; none otherwise."""
    roles = {role for _, role in batch.runs}
    if not roles & {role for role in ROLES.values() if role not in ("SHAPE", "RPE")}:
        return []
    return [
        compare(batch, "perSPE (target phrases, [-1, 1]) improves BLEU over SPE",
                "ASPEC 41.0 -> 41.4; IWSLT17 8.5 -> 9.3 (Tables 2, 3)", "perSPE", "APE", better),
        compare(batch, "Token-level perturbation of the decoder ([-2, 2]) does not hurt",
                "SPE/perSPE 41.2 vs SPE/SPE 40.8 (Table 4)", "SPE/perSPE-token", "APE",
                lambda difference, tolerance, *means: difference >= -tolerance),
        compare(batch, "Perturbing the encoder's positions hurts", "perSPE/SPE 37.4 vs SPE/SPE 40.8 (Table 4)",
                "perSPE-token/SPE", "APE", worse),
        compare(batch, "Perturbing both sides collapses BLEU", "perSPE/perSPE 23.7 vs SPE/SPE 40.8 (Table 4)",
                "perSPE-token/perSPE-token", "APE", collapses),
        compare(batch, "No positions in the encoder collapses BLEU", "none/SPE 22.8 vs SPE/SPE 40.8 (Table 1)",
                "none/SPE", "APE", collapses),
        compare(batch, "No positions in the decoder barely changes BLEU", "SPE/none 41.0 vs SPE/SPE 40.8 (Table 1)",
                "SPE/none", "APE", same),
        compare(batch, "RPE in the encoder only is about RPE on both sides", "RPE/none 40.3 vs RPE/RPE 39.1 "
                "(Table 1; keys only)", "RPE/none", "RPE", lambda difference, tolerance, *means: difference >= -tolerance),
        compare(batch, "RPE in the decoder only collapses BLEU", "none/RPE 19.3 vs RPE/RPE 39.1 (Table 1)",
                "none/RPE", "RPE", collapses),
        compare(batch, "The decaying mask beats no positions in the decoder (trained)",
                "seed 003, GPT-2 untrained: perplexity 11,897 vs 712,014", "SPE/decay", "SPE/none", better),
        decaying_mask_without_training(batch, "GPT-2: 111 with positions, 712,014 without, 11,897 with the "
                                              "decaying mask (seed 003)"),
    ]


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
        *perspe_claims(batch),
    ]
