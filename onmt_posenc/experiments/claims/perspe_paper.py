"""The perSPE paper's findings (Oka et al. 2022) and seed 003's on the decaying attention
mask, tested on a batch's results where it has the methods: the rows after the SHAPE
paper's in the report's claims table, judged the same way (batch: Student's t over the seeds,
two-sided for a sameness, one-sided for a direction)."""
from onmt_posenc.experiments.claims.batch import (ABOVE, BELOW, NOT_BELOW, ROLES, SAME, Rule, comparison, mean_cell,
                                                  missing, row, unconverged)

# "Collapses": BLEU at most this share of the other method's (the perSPE paper's 22.8 of 40.8 is 0.56)
COLLAPSE = 0.75
# judged one-sided on `role` minus COLLAPSE x `against`: a collapse where it is below zero beyond the spread
COLLAPSES = Rule(1, "upper", ("yes", "a collapse measured"), ("no", "no collapse measured"))


def compare(batch, claim, paper, role, against, rule, kind="VANILLA"):
    """`role` against `against` on the test set of the first setting of `kind` with both, read by
    `rule` (batch.Rule; COLLAPSES against COLLAPSE x `against`'s BLEU)."""
    found = comparison(batch, role, against, COLLAPSE if rule is COLLAPSES else 1.0, kind)
    if found is None:
        return missing(claim, paper, f"a{'n' if kind[0] in 'AEIOU' else ''} {kind} data setting with {role} and "
                                     f"{against}")
    difference = found.difference
    held, words, figures = batch.family.judge(rule, difference, batch.runs[(found.data, role)]
                                              + batch.runs[(found.data, against)], batch_wide=True)
    measured = (f"{batch.where(found.data, role, against)}, {found.eval_set}: {role} "
                f"{mean_cell(difference.one, seeds=True)} vs {against} {mean_cell(difference.other, seeds=True)}; "
                f"{words}")
    return (unconverged(claim, paper, measured, batch.runs[(found.data, role)] + batch.runs[(found.data, against)],
                        figures) or row(claim, paper, measured, held, figures))


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
        model = batch.first_seed(data, "APE")
        measured = (f"{batch.where(data, 'APE')}, APE's perplexity (seed {model['seed']}'s model, one reading each: "
                    f"a point comparison, no spread): {kept:.2f} as trained, {removed:.2f} without the decoder's "
                    f"positions, {decay:.2f} without them but with the decaying mask")
        return (unconverged(claim, paper, measured, [model])
                or row(claim, paper, measured, decay < removed))
    return missing(claim, paper, "the position ablation of an APE model with its decoder conditions")


def perspe_claims(batch):
    """The perSPE paper's findings (Oka et al. 2022; ASPEC En->Ja unless said) and seed 003's
    on the decaying mask, where the batch has the methods; none otherwise."""
    roles = {role for _, role in batch.runs}
    if not roles & {role for role in ROLES.values() if role not in ("SHAPE", "RPE")}:
        return []
    return [
        compare(batch, "perSPE (target phrases, [-1, 1]) improves BLEU over SPE",
                "ASPEC 41.0 -> 41.4; IWSLT17 8.5 -> 9.3 (Tables 2, 3)", "perSPE", "APE", ABOVE),
        compare(batch, "Token-level perturbation of the decoder ([-2, 2]) does not hurt",
                "SPE/perSPE 41.2 vs SPE/SPE 40.8 (Table 4)", "SPE/perSPE-token", "APE", NOT_BELOW),
        compare(batch, "Perturbing the encoder's positions hurts", "perSPE/SPE 37.4 vs SPE/SPE 40.8 (Table 4)",
                "perSPE-token/SPE", "APE", BELOW),
        compare(batch, "Perturbing both sides collapses BLEU", "perSPE/perSPE 23.7 vs SPE/SPE 40.8 (Table 4)",
                "perSPE-token/perSPE-token", "APE", COLLAPSES),
        compare(batch, "No positions in the encoder collapses BLEU", "none/SPE 22.8 vs SPE/SPE 40.8 (Table 1)",
                "none/SPE", "APE", COLLAPSES),
        compare(batch, "No positions in the decoder barely changes BLEU", "SPE/none 41.0 vs SPE/SPE 40.8 (Table 1)",
                "SPE/none", "APE", SAME),
        compare(batch, "RPE in the encoder only is about RPE on both sides", "RPE/none 40.3 vs RPE/RPE 39.1 "
                "(Table 1; keys only)", "RPE/none", "RPE", SAME),
        compare(batch, "RPE in the decoder only collapses BLEU", "none/RPE 19.3 vs RPE/RPE 39.1 (Table 1)",
                "none/RPE", "RPE", COLLAPSES),
        compare(batch, "The decaying mask beats no positions in the decoder (trained)",
                "seed 003, GPT-2 untrained: perplexity 11,897 vs 712,014", "SPE/decay", "SPE/none", ABOVE),
        decaying_mask_without_training(batch, "GPT-2: 111 with positions, 712,014 without, 11,897 with the "
                                              "decaying mask (seed 003)"),
    ]
