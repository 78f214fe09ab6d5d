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

The methods are recognized by the role they play (batch.ROLES). Where a batch
has them, the perSPE paper's findings and seed 003's follow (perspe_paper).
"""
import statistics

from onmt_posenc.analysis import length_buckets
from onmt_posenc.experiments.claims.batch import (Batch, difference_tolerance, joined_training, mean_cell, missing,
                                                  row, unconverged)
from onmt_posenc.experiments.claims.perspe_paper import compare, perspe_claims, same
from onmt_posenc.experiments.claims.speeds import speed_compared_runs

# Training speed ratio within this of 1 is "about as fast".
SAME_SPEED = 0.05
# A machine whose load average exceeds its cores by more than this was shared
LOAD_MARGIN = 0.5
# "Far below": SHAPE's swapped drop at most this share of APE's, which must itself be a real drop.
SWAPPED_SHARE, SWAPPED_MIN_APE_DROP = 0.5, 1.0
NEAR_INVARIANT = 0.9


def vanilla_bleu(batch, role, paper):
    return compare(batch, f"{role}'s BLEU on VANILLA is about APE's", paper, role, "APE", same)


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
            return unconverged(claim, paper, measured, used) or row(claim, paper, measured, gain >= 0)
    return missing(claim, paper, f"an EXTRAPOLATE data setting with length buckets for APE and {role}")


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
        waiting = unconverged(claim, paper, measured, used)
        if waiting:
            return waiting
        if ape_result["drop"] < SWAPPED_MIN_APE_DROP:
            return row(claim, paper, measured + f"; APE drops < {SWAPPED_MIN_APE_DROP:g}, so there is no effect "
                                                 "for SHAPE to reduce", "not measured")
        return row(claim, paper, measured, shape_result["drop"] <= SWAPPED_SHARE * ape_result["drop"])
    if not_applicable:
        return row(claim, paper, "; ".join(not_applicable), "not measured")
    return missing(claim, paper, "a setting trained on joined sentences (INTERPOLATE) with the swapped analysis "
                                  "for APE and SHAPE")


def shift_invariance(batch, paper):
    """SHAPE's mean over its seeds at least NEAR_INVARIANT, and APE's below it by more than
    difference_tolerance of the two (from their seeds' spread: APE needs MIN_SEEDS_FOR_SPREAD seeds)."""
    claim = f"SHAPE's encoder is near shift-invariant (>= {NEAR_INVARIANT:g}), APE's lower beyond its seeds' spread"
    for data in batch.settings("VANILLA"):
        ape, shape = (batch.analyses(data, role, "shift_invariance") for role in ("APE", "SHAPE"))
        if not ape or not shape:
            continue
        rpe = batch.analysis(data, "RPE", "shift_invariance")
        note = "; RPE 1.00 by construction (no absolute positions)" if rpe and not rpe["absolute_positions"] else ""
        offsets = ", ".join(str(k) for k in shape[0][1]["offsets"])
        shape_values, ape_values = ([result["mean_off_diagonal"] for _, result in runs] for runs in (shape, ape))
        tolerance, rule = difference_tolerance(shape_values, ape_values, {}, digits=3)
        shape_mean = statistics.mean(shape_values)
        gap = shape_mean - statistics.mean(ape_values)
        measured = (f"{batch.where(data, 'SHAPE')}, offsets {offsets}: SHAPE {mean_cell(shape_values, 3, seeds=True)}, "
                    f"APE {mean_cell(ape_values, 3, seeds=True)} ({gap:+.3f}; {rule}){note}")
        waiting = unconverged(claim, paper, measured, [record for record, _ in ape + shape])
        if waiting:
            return waiting
        if tolerance is None:
            return row(claim, paper, measured, "not measured")
        return row(claim, paper, measured, shape_mean >= NEAR_INVARIANT and gap > tolerance)
    return missing(claim, paper, "the shift-invariance analysis for APE and SHAPE")


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
        compared = [r for r in speed_compared_runs(batch.experiment, batch.records, data)
                    if r["label"] in (ape["label"], other["label"])]
        shared = list(filter(None, map(shared_device, compared)))
        if shared:  # a ratio measured beside other work depends on that work
            more = f"; {len(shared) - 2} more of the runs compared likewise" if len(shared) > 2 else ""
            return row(claim, paper, f"{measured}; not a measurement of the method: {'; '.join(shared[:2])}{more}",
                        "not measured")
        return row(claim, paper, measured, held(ratio))
    return missing(claim, paper, f"training speed of APE and {role}")


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
