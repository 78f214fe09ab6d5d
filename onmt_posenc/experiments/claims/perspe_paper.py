"""The perSPE paper's findings (Oka et al. 2022) and seed 003's on the decaying attention
mask, tested on a batch's results where it has the methods: the rows after the SHAPE
paper's in the report's claims table, judged the same way (batch), "about the
same" within the seeds' spread."""
from onmt_posenc.experiments.claims.batch import ROLES, mean_cell, missing, row, unconverged, vanilla_comparison

# "Collapses": BLEU at most this share of the other method's
COLLAPSE = 0.75


def compare(batch, claim, paper, role, against, judge):
    """`role` against `against` on the test set of the first VANILLA setting with both:
    judge (a batch.Comparison) says if the claim held, None where it cannot be judged."""
    found = vanilla_comparison(batch, role, against)
    if found is None:
        return missing(claim, paper, f"a VANILLA data setting with {role} and {against}")
    rule = f"a collapse is at most {COLLAPSE:.0%} of {against}'s" if judge is collapses else found.rule
    measured = (f"{batch.where(found.data, role, against)}, {found.eval_set}: {role} {mean_cell(found.one, seeds=True)} vs "
                f"{against} {mean_cell(found.other, seeds=True)} ({found.difference:+.2f}; {rule})")
    held = judge(found)
    return (unconverged(claim, paper, measured, batch.runs[(found.data, role)] + batch.runs[(found.data, against)])
            or row(claim, paper, measured, "not measured" if held is None else held))


# Each judge: True or False, None where the comparison cannot be judged (no seed spread)
def better(found):
    return None if found.tolerance is None else found.difference > found.tolerance


def worse(found):
    return None if found.tolerance is None else found.difference < -found.tolerance


def same(found):
    return None if found.tolerance is None else abs(found.difference) <= found.tolerance


def not_worse(found):
    return None if found.tolerance is None else found.difference >= -found.tolerance


def collapses(found):
    """Far below: at most COLLAPSE of the other's BLEU (the perSPE paper's 22.8 of 40.8 is 0.56)."""
    mean, against = found.means
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
        return (unconverged(claim, paper, measured, [batch.first_seed(data, "APE")])
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
                "ASPEC 41.0 -> 41.4; IWSLT17 8.5 -> 9.3 (Tables 2, 3)", "perSPE", "APE", better),
        compare(batch, "Token-level perturbation of the decoder ([-2, 2]) does not hurt",
                "SPE/perSPE 41.2 vs SPE/SPE 40.8 (Table 4)", "SPE/perSPE-token", "APE", not_worse),
        compare(batch, "Perturbing the encoder's positions hurts", "perSPE/SPE 37.4 vs SPE/SPE 40.8 (Table 4)",
                "perSPE-token/SPE", "APE", worse),
        compare(batch, "Perturbing both sides collapses BLEU", "perSPE/perSPE 23.7 vs SPE/SPE 40.8 (Table 4)",
                "perSPE-token/perSPE-token", "APE", collapses),
        compare(batch, "No positions in the encoder collapses BLEU", "none/SPE 22.8 vs SPE/SPE 40.8 (Table 1)",
                "none/SPE", "APE", collapses),
        compare(batch, "No positions in the decoder barely changes BLEU", "SPE/none 41.0 vs SPE/SPE 40.8 (Table 1)",
                "SPE/none", "APE", same),
        compare(batch, "RPE in the encoder only is about RPE on both sides", "RPE/none 40.3 vs RPE/RPE 39.1 "
                "(Table 1; keys only)", "RPE/none", "RPE", not_worse),
        compare(batch, "RPE in the decoder only collapses BLEU", "none/RPE 19.3 vs RPE/RPE 39.1 (Table 1)",
                "none/RPE", "RPE", collapses),
        compare(batch, "The decaying mask beats no positions in the decoder (trained)",
                "seed 003, GPT-2 untrained: perplexity 11,897 vs 712,014", "SPE/decay", "SPE/none", better),
        decaying_mask_without_training(batch, "GPT-2: 111 with positions, 712,014 without, 11,897 with the "
                                              "decaying mask (seed 003)"),
    ]
