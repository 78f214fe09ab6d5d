"""The SHAPE paper's findings, tested on a batch's results (the report's first table).

Each claim names the paper's figure, computes this batch's figure from the
stored results (result.json and analyses/*.json of each run), and says whether
it held: "yes", "no", "not measured", or what a rule that can only find a
difference found ("no difference measured", "no drop measured": batch.Rule).
Not measured means the batch cannot say: it lacks the data setting, method or
analysis the claim needs; a model the claim rests on has not converged
(curves.RULE); its seeds give no spread to judge by; or, for the swapped
evaluation, a model does not write the separators or APE shows no effect to
reduce. A claim is computed only on the kind of data setting the paper used
for it: VANILLA for BLEU, EXTRAPOLATE for unseen lengths, models trained on
joined sentences (INTERPOLATE) for the swapped evaluation; speed and shift
invariance (measured by the paper on every setting, or independent of the data)
prefer VANILLA and name the setting they used.

The methods are recognized by the role they play (batch.ROLES). Where a batch
has them, the perSPE paper's findings and seed 003's follow (perspe_paper).
"""
import math
import statistics

from onmt_posenc.experiments.claims.batch import (ABOVE, CONFIDENCE, NOT_BELOW, SAME, Batch, Rule, bucket_bleu,
                                                  bucket_range, buckets_between, joined_training,
                                                  longest_training_example, mean_cell, missing, row, seed_difference,
                                                  t_quantile, unconverged)
from onmt_posenc.experiments.claims.perspe_paper import compare, perspe_claims
from onmt_posenc.experiments.claims.speeds import speed_compared_runs

# Training speed ratio within this of 1 is "about as fast".
SAME_SPEED = 0.05
# A machine whose load average exceeds its cores by more than this was shared
LOAD_MARGIN = 0.5
# "Far below": SHAPE's swapped drop at most this share of APE's (judged one-sided on SHAPE's drops
# minus this share of APE's, over their seeds), where APE's drops average this much or more.
SWAPPED_SHARE, SWAPPED_MIN_APE_DROP = 0.5, 1.0
FAR_BELOW = Rule(1, "upper", ("yes", f"at most {SWAPPED_SHARE:g} of APE's drop, measured"),
                 ("no", f"not shown to be at most {SWAPPED_SHARE:g} of APE's drop"))
NEAR_INVARIANT = 0.9


def vanilla_bleu(batch, role, paper):
    return compare(batch, f"{role}'s BLEU on VANILLA is about APE's", paper, role, "APE", SAME)


def extrapolate_bleu(batch, role, paper):
    """The paper's whole-test gain on EXTRAPOLATE: `role` above APE, one-sided over the seeds."""
    return compare(batch, f"On EXTRAPOLATE, {role}'s test BLEU is above APE's", paper, role, "APE", ABOVE, "EXTRAPOLATE")


def unseen_lengths(batch, role, paper):
    """Every seed of `role` and of APE with length buckets on the first EXTRAPOLATE setting that
    has both: UNSEEN_BLEU (beyond the longest training example of the runs), a value a seed, with
    the test set's component where they kept their translations; `role` minus APE judged one-sided
    (NOT_BELOW: held unless below beyond the spread)."""
    claim = f"{role} >= APE on source lengths unseen in training"
    for data in batch.of_kind("EXTRAPOLATE"):
        ape, other = batch.analyses(data, "APE", "length_buckets"), batch.analyses(data, role, "length_buckets")
        if not ape or not other:
            continue
        for name in sorted(ape[0][1], key=lambda name: name != "test"):
            if not all(name in result for _, result in ape + other):
                continue
            first = ape[0][1][name]
            longest = max(longest_training_example(record) or result[name]["max_train_length"] or 0
                          for record, result in ape + other)
            unseen = buckets_between(first, longest)
            if not unseen:
                continue
            ranges = [bucket_range(first["buckets"][k]) for k in unseen]
            test_set = batch.test_set([r for r, _ in other], [r for r, _ in ape], name, ranges=ranges)
            difference = seed_difference((role, "APE"), [bucket_bleu(result[name], unseen) for _, result in other],
                                         [bucket_bleu(result[name], unseen) for _, result in ape],
                                         test_set=test_set)
            held, words, figures = batch.family.judge(NOT_BELOW, difference, [r for r, _ in ape + other])
            measured = (f"{batch.where(data, role)}, {name}: {sum(first['counts'][k] for k in unseen)} sentences "
                        f"longer than any training example (> {longest}), their unseen BLEU (of their buckets, "
                        f"weighted by their sentences) {role} {mean_cell(difference.one, seeds=True)} vs APE "
                        f"{mean_cell(difference.other, seeds=True)}; {words}")
            return (unconverged(claim, paper, measured, [record for record, _ in ape + other], figures)
                    or row(claim, paper, measured, held, figures))
    return missing(claim, paper, f"an EXTRAPOLATE data setting with length buckets for APE and {role}")


def _swapped_cell(results):
    """A role's seeds on the swapped evaluation: mean original -> mean swapped, drop over the seeds."""
    return (f"{statistics.mean(r['original'] for r in results):.2f} -> "
            f"{statistics.mean(r['swapped'] for r in results):.2f}, "
            f"drop {mean_cell([r['drop'] for r in results], seeds=True)}")


def _share_cell(shares):
    low, high = min(shares), max(shares)
    return f"{low:.0%}" if f"{low:.0%}" == f"{high:.0%}" else f"{low:.0%}-{high:.0%}"


def swapped(batch, paper):
    """On models trained on joined sentences, every seed of APE and SHAPE that has the analysis:
    the paper's set (joined training examples) first, else the evaluation set the experiment
    names; of several such data settings, the first with drops for both models: found by the
    separators where every model writes them right, else by alignment (results stored before the
    alignment existed have none: the row then names each model's separators). Judged one-sided
    on SHAPE's drops minus SWAPPED_SHARE of APE's (FAR_BELOW)."""
    claim = "SHAPE's swapped drop is far below APE's"
    not_applicable = []
    for data in (d for d in batch.settings() if joined_training(batch.experiment.data[d])):
        ape, shape = batch.analyses(data, "APE", "swapped"), batch.analyses(data, "SHAPE", "swapped")
        if not ape or not shape:
            continue
        name = next((n for n in sorted(ape[0][1], key=lambda n: n != "train")
                     if all(n in result for _, result in ape + shape)), None)
        if name is None:
            continue
        where = f"{batch.where(data, 'SHAPE')}, {'training examples' if name == 'train' else name}"
        results = {"APE": [result[name] for _, result in ape], "SHAPE": [result[name] for _, result in shape]}
        unusable = [f"{role} {record['id']}: {result[name]['why']}" for role, found in (("APE", ape), ("SHAPE", shape))
                    for record, result in found if not result[name]["applicable"]]
        if unusable and all(r.get("aligned") for found in results.values() for r in found):
            # X1 found by minimum edit distance instead of the separators the models do not write
            wrong = {role: _share_cell([r["wrong_separators"] for r in found]) for role, found in results.items()}
            where += (f", X1 found by alignment (separators wrong on {wrong['APE']} of APE's and {wrong['SHAPE']} of "
                      "SHAPE's lines)")
            results = {role: [r["aligned"] for r in found] for role, found in results.items()}
        elif unusable:
            not_applicable.append(f"{where}: {'; '.join(unusable)}")
            continue
        measured = f"{where}: APE {_swapped_cell(results['APE'])}, SHAPE {_swapped_cell(results['SHAPE'])}"
        ape_drops, shape_drops = ([r["drop"] for r in results[role]] for role in ("APE", "SHAPE"))
        held, words, figures = batch.family.judge(FAR_BELOW, seed_difference(("SHAPE", "APE"), shape_drops,
                                                                             ape_drops, scale=SWAPPED_SHARE),
                                                  [record for record, _ in ape + shape])
        waiting = unconverged(claim, paper, measured, [record for record, _ in ape + shape], figures)
        if waiting:
            return waiting
        if statistics.mean(ape_drops) < SWAPPED_MIN_APE_DROP:
            return row(claim, paper, measured + f"; APE drops < {SWAPPED_MIN_APE_DROP:g}, so there is no effect "
                                                 "for SHAPE to reduce", "not measured", figures)
        return row(claim, paper, f"{measured}; {words}", held, figures)
    if not_applicable:
        return row(claim, paper, "; ".join(not_applicable), "not measured")
    return missing(claim, paper, "a setting trained on joined sentences (INTERPOLATE) with the swapped analysis "
                                  "for APE and SHAPE")


def shift_invariance(batch, paper):
    """Every seed of SHAPE and APE: SHAPE's mean similarity at least NEAR_INVARIANT by its
    one-sided lower bound, and SHAPE minus APE above zero by its one-sided lower bound (ABOVE),
    both from the spread pooled over the two methods' seeds (either with MIN_SEEDS_FOR_SPREAD
    or more; else not judged)."""
    claim = (f"SHAPE's encoder is near shift-invariant (>= {NEAR_INVARIANT:g}), APE's lower, both beyond the "
             "seeds' spread")
    for data in batch.settings("VANILLA"):
        ape, shape = (batch.analyses(data, role, "shift_invariance") for role in ("APE", "SHAPE"))
        if not ape or not shape:
            continue
        rpe = batch.analysis(data, "RPE", "shift_invariance")
        note = "; RPE 1.00 by construction (no absolute positions)" if rpe and not rpe["absolute_positions"] else ""
        offsets = ", ".join(str(k) for k in shape[0][1]["offsets"])
        shape_values, ape_values = ([result["mean_off_diagonal"] for _, result in runs] for runs in (shape, ape))
        difference = seed_difference(("SHAPE", "APE"), shape_values, ape_values)
        held, words, figures = batch.family.judge(ABOVE, difference, [record for record, _ in ape + shape], digits=3)
        if difference.spread is not None:
            spread = difference.spread
            floor = statistics.mean(shape_values) - t_quantile(spread.df, 1) * math.sqrt(spread.variance /
                                                                                        len(shape_values))
            near = floor >= NEAR_INVARIANT
            words = (f"SHAPE at least {floor:.3f} (one-sided {CONFIDENCE:.0%}, the same t and spread): "
                     f"{'' if near else 'not '}above {NEAR_INVARIANT:g}; {words}")
            held, figures = ("yes" if near and held == "yes" else "no"), {**figures, "shape_lower": floor}
        measured = (f"{batch.where(data, 'SHAPE')}, offsets {offsets}: SHAPE {mean_cell(shape_values, 3, seeds=True)}, "
                    f"APE {mean_cell(ape_values, 3, seeds=True)}; {words}{note}")
        waiting = unconverged(claim, paper, measured, [record for record, _ in ape + shape], figures)
        return waiting or row(claim, paper, measured, held, figures)
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
    """The claims table's rows, each comparison judged after Holm's correction over the table's
    (its family: batch.Family); `speeds`: {data: {label: training speed relative to APE}}."""
    batch = Batch(experiment, records)
    claims(batch, speeds)
    batch.family.close()
    return claims(batch, speeds)


def claims(batch, speeds):
    return [
        vanilla_bleu(batch, "SHAPE", "test 30.49 vs 30.46 (+0.03)"),
        vanilla_bleu(batch, "RPE", "test 30.54 vs 30.46 (+0.08)"),
        extrapolate_bleu(batch, "SHAPE", "test 29.80 vs 29.22 (+0.58)"),
        extrapolate_bleu(batch, "RPE", "test 29.86 vs 29.22 (+0.64)"),
        unseen_lengths(batch, "SHAPE", "EXTRAPOLATE test 29.80 vs 29.22; gains grow with length (Fig. 4)"),
        unseen_lengths(batch, "RPE", "EXTRAPOLATE test 29.86 vs 29.22"),
        swapped(batch, "APE 28.81 -> 20.74 (drop 8.07), SHAPE 28.51 -> 27.06 (drop 1.45)"),
        shift_invariance(batch, "SHAPE near 1 at offsets 0-500, APE clearly lower (Fig. 3)"),
        speed(batch, speeds, "SHAPE", "x1.01 (VANILLA), x0.99 (EXTRAPOLATE, INTERPOLATE)",
              lambda ratio: abs(ratio - 1) <= SAME_SPEED),
        speed(batch, speeds, "RPE", "x0.91", lambda ratio: ratio < 1 - SAME_SPEED),
        *perspe_claims(batch),
    ]
