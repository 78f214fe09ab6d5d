"""The two-component interval (core.significance) tested as a statistician would: simulated
systems with a known seed spread and a known sentence-level spread, in the additive model of a
seed and a sentence, where the 95% interval must cover the true difference in 93-97% of 1,000
simulations (binomial standard error 0.7 points at 95%), and t over the seeds alone undercovers
where the sentences' spread dominates; with one seed a side, sacreBLEU's paired bootstrap itself."""
import numpy as np
import pytest
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

from onmt_posenc.core.significance import (SentenceComponent, combined, detectable, holm, metric_scorer, p_value,
                                           resamples, t_quantile)

SENTENCES, SIMULATIONS = 300, 1000


def mean_score(sums):
    """An additive sentence score as sufficient statistics (score, 1): the corpus score is their mean."""
    return sums[:, 0] / sums[:, 1]


def coverage(sigma_seed, sigma_sentence, sigma_noise, seeds=(3, 3), delta=1.0, seed=0):
    """(coverage of the two-component interval, of Student's t over the seeds alone) of the true
    difference `delta`: each simulation draws a test set of SENTENCES (a difficulty common to both
    methods, sd 10, and the methods' difference on each, sd sigma_sentence), each method's seeds
    (an offset a seed, sd sigma_seed) and a seed-by-sentence noise (sd sigma_noise)."""
    rng = np.random.default_rng(seed)
    indices = resamples(SENTENCES, seed=seed + 1)
    both = seeds_only = 0
    for _ in range(SIMULATIONS):
        difficulty = rng.normal(0, 10, SENTENCES)
        gain = delta + rng.normal(0, sigma_sentence, SENTENCES)

        def method(count, shift):
            return [shift + difficulty + rng.normal(0, sigma_seed) + rng.normal(0, sigma_noise, SENTENCES)
                    for _ in range(count)]

        one, other = method(seeds[0], gain), method(seeds[1], 0.0)
        scores_one, scores_other = [x.mean() for x in one], [x.mean() for x in other]
        estimate = np.mean(scores_one) - np.mean(scores_other)
        df = len(one) + len(other) - 2
        pooled = (np.var(scores_one, ddof=1) * (len(one) - 1) + np.var(scores_other, ddof=1) * (len(other) - 1)) / df
        seed_variance = pooled * (1 / len(one) + 1 / len(other))
        statistics = [[np.stack([x, np.ones_like(x)], 1) for x in side] for side in (one, other)]
        test_set = SentenceComponent(*statistics, mean_score, indices=indices)
        error, combined_df = combined(seed_variance, df, test_set.variance, SENTENCES)
        both += abs(estimate - delta) <= t_quantile(combined_df, 0.975) * error
        seeds_only += abs(estimate - delta) <= t_quantile(df, 0.975) * np.sqrt(seed_variance)
    return both / SIMULATIONS, seeds_only / SIMULATIONS


@pytest.mark.parametrize("spreads, seeds_only_below", [
    ((0.1, 20.0, 5.0), 0.60),   # the sentences' spread dominates: the seeds alone see little of it
    ((0.5, 15.0, 15.0), 0.90),  # both matter
    ((1.0, 2.0, 10.0), 1.0),    # the seeds' spread dominates: both intervals near 95%
])
def test_two_components_cover_the_true_difference(spreads, seeds_only_below):
    both, seeds_only = coverage(*spreads)
    assert 0.93 <= both <= 0.97, (spreads, both)
    assert seeds_only < seeds_only_below, (spreads, seeds_only)


def _systems():
    rng = np.random.default_rng(3)
    words = [f"w{k}" for k in range(30)]
    refs = [" ".join(rng.choice(words, rng.integers(4, 12))) for _ in range(60)]

    def system(keep):
        return [" ".join(w if rng.random() < keep else rng.choice(words) for w in ref.split()) for ref in refs]
    return refs, system(0.7), system(0.6)


def test_one_seed_a_side_is_sacrebleus_paired_bootstrap():
    refs, baseline, other = _systems()
    bleu = BLEU()
    stats = [np.array(bleu._extract_corpus_statistics(hyps, [refs])) for hyps in (other, baseline)]
    test_set = SentenceComponent([stats[0]], [stats[1]], metric_scorer(bleu))
    observed = bleu.corpus_score(other, [refs]).score - bleu.corpus_score(baseline, [refs]).score
    # the whole set's statistics give sacreBLEU's corpus score
    assert metric_scorer(bleu)(stats[0].sum(0, keepdims=True))[0] == pytest.approx(bleu.corpus_score(other, [refs]).score)
    _, scores = PairedTest([("baseline", baseline), ("other", other)], {"BLEU": BLEU()}, [refs], test_type="bs",
                           n_samples=1000)()
    result = scores["BLEU"][1]
    assert test_set.paired_bootstrap_p(observed) == pytest.approx(result.p_value)
    assert test_set.one.mean() == pytest.approx(result.mean, abs=1e-6)
    assert test_set.noise == 0  # one seed a side: no seed-by-sentence noise to take out


def test_chrf_statistics_rebuild_its_corpus_score():
    refs, baseline, _ = _systems()
    chrf = CHRF()
    stats = np.array(chrf._extract_corpus_statistics(baseline, [refs]))
    assert metric_scorer(chrf)(stats.sum(0, keepdims=True))[0] == pytest.approx(chrf.corpus_score(baseline, [refs]).score)


def test_holm_against_its_definition():
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1: 0.02, 0.03, 0.06, 0.04 -> running maximum 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


def test_detectable_difference_and_p():
    # the normal limit: (1.960 + 0.842) standard errors
    assert detectable(1.0, 1e9) == pytest.approx(2.8016, abs=1e-4)
    # the example: +-0.90 at 3 df is a standard error of 0.90 / 3.182, detectable 1.18
    assert detectable(0.90 / t_quantile(3, 0.975), 3) == pytest.approx(1.18, abs=0.01)
    assert p_value(t_quantile(4, 0.975), 1.0, 4) == pytest.approx(0.05)
    assert p_value(t_quantile(4, 0.95), 1.0, 4, "lower") == pytest.approx(0.05)
    assert p_value(-t_quantile(4, 0.95), 1.0, 4, "upper") == pytest.approx(0.05)
