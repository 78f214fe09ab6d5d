"""Both components of a difference between two methods' corpus scores: the seeds' spread and the
test set's (its sentences resampled pairwise); Holm's correction over a family of comparisons;
the smallest difference a comparison could detect.

A method's corpus score (BLEU, chrF) over its seeds, X̄ = mean_s X_s, varies with the seeds and
with the sentences the test set happens to hold. In the additive model of a seed s and a
sentence i, x_si = mu + u_s + e_i + eps_si (Clark et al. 2011, MultEval; the crossed design of
Owen 2007), a difference of two seed means varies by

    Var = sigma_u^2 (1/S_A + 1/S_B) + sigma_eps^2 (1/S_A + 1/S_B) / N + sigma_d^2 / N,

d_i the methods' difference on sentence i. The seeds' spread on this test set (Student's t over
the corpus scores, the seed component) estimates the first two terms; the paired bootstrap of the
seed-mean difference (the same resampled sentences for both sides and every seed: Koehn 2004,
sacreBLEU's `paired_bs`) estimates the last two, the seed-by-sentence noise counted once more.
That noise is measured by the bootstrap too, as the gap between a single seed's resampled
variance and the seed mean's: mean_s Var*(X_s) - Var*(X̄) = sigma_eps^2 (1 - 1/S) / N per side.
The test-set component is the bootstrap variance less that noise (floored at 0), and

    SE^2 = V_seeds + V_sentences,   df = SE^4 / (V_seeds^2 / df_seeds + V_sentences^2 / (N - 1))

(Welch-Satterthwaite), the interval estimate ± t(df) SE. With one seed a side there is no seed
component: the comparison is sacreBLEU's paired bootstrap itself (its resamples, seed and p).
Corpus scores of a resample come from the sentences' sufficient statistics summed over it and
sacreBLEU's own `_compute_score_from_stats`.

Power: at two-sided level alpha, a true difference delta is found with probability about
1 - beta where delta = (t(1 - alpha/2, df) + t(1 - beta, df)) SE; that delta at 80% power is
what a "no difference measured" cannot rule out.
"""
import numpy as np
from scipy.special import stdtr, stdtrit

# sacreBLEU's paired bootstrap: 1000 resamples from numpy's default_rng seeded as SACREBLEU_SEED's default
REPLICATES, SEED = 1000, 12345
POWER = 0.8


def resamples(sentences, replicates=REPLICATES, seed=SEED):
    """(replicates, sentences) indices drawn as sacreBLEU's paired bootstrap draws them."""
    return np.random.default_rng(seed).choice(sentences, size=(replicates, sentences), replace=True)


def resample_counts(indices, sentences):
    """How often each sentence is drawn in each resample: (replicates, sentences)."""
    replicates = len(indices)
    flat = (indices + sentences * np.arange(replicates)[:, None]).ravel()
    return np.bincount(flat, minlength=replicates * sentences).reshape(replicates, sentences).astype(float)


def metric_scorer(metric):
    """A scorer of summed sufficient statistics, (replicates, k) -> (replicates,), by a sacreBLEU
    metric's own `_compute_score_from_stats`."""
    return lambda sums: np.array([metric._compute_score_from_stats(list(row)).score for row in sums])


def resampled_scores(statistics, counts, scorer):
    """Each seed's corpus score on each resample: (seeds, replicates), from its (sentences, k) statistics."""
    return np.stack([scorer(counts @ np.asarray(seed, dtype=float)) for seed in statistics])


class SentenceComponent:
    """The paired bootstrap of a seed-mean difference, `one` minus `scale` x `other`, each a list of
    per-seed (sentences, k) sufficient statistics of the same sentences in the same order."""

    def __init__(self, one, other, scorer, scale=1.0, replicates=REPLICATES, seed=SEED, indices=None):
        sentences = len(one[0])
        if any(len(s) != sentences for s in [*one, *other]):
            raise ValueError("every seed's statistics must cover the same sentences")
        self.sentences, self.scale = sentences, scale
        indices = resamples(sentences, replicates, seed) if indices is None else indices
        counts = resample_counts(indices, sentences)
        self.one, self.other = resampled_scores(one, counts, scorer), resampled_scores(other, counts, scorer)
        self.differences = self.one.mean(0) - scale * self.other.mean(0)
        self.total = float(self.differences.var(ddof=1))
        # the seed-by-sentence noise in the seed means' bootstrap variance, which the seeds' spread counts
        self.noise = sum(weight * (side.var(axis=1, ddof=1).mean() - side.mean(0).var(ddof=1)) / (len(side) - 1)
                         for side, weight in ((self.one, 1.0), (self.other, scale ** 2)) if len(side) > 1)

    @property
    def variance(self):
        """The test set's own variance of the seed-mean difference (the bootstrap's, less the noise)."""
        return max(self.total - self.noise, 0.0)

    def paired_bootstrap_p(self, observed):
        """sacreBLEU's paired bootstrap p (one seed a side): resamples whose |difference|, centred on
        its mean, exceeds the observed |difference|, +1 over the resamples + 1."""
        spread = np.abs(self.differences)
        return float((np.sum(spread - spread.mean() > abs(observed)) + 1) / (len(spread) + 1))


def combined(seed_variance, seed_df, sentence_variance, sentences):
    """(standard error, Welch-Satterthwaite degrees of freedom) of the two components added;
    seed_variance None: the sentences' alone, at their own df."""
    if seed_variance is None:
        return float(np.sqrt(sentence_variance)), sentences - 1
    total = seed_variance + sentence_variance
    if total == 0:
        return 0.0, seed_df
    df = total ** 2 / (seed_variance ** 2 / seed_df + sentence_variance ** 2 / (sentences - 1))
    return float(np.sqrt(total)), float(df)


def t_quantile(df, probability):
    return float(stdtrit(df, probability))


def p_value(estimate, standard_error, df, bound=None):
    """Student's t p of an estimate: bound None, two-sided (against 0 either way); "lower", of the
    claim that it is above 0; "upper", below 0."""
    if standard_error == 0:
        return 0.0 if (estimate != 0 if bound is None else (estimate > 0) == (bound == "lower")) else 1.0
    t = estimate / standard_error
    if bound is None:
        return float(2 * stdtr(df, -abs(t)))
    return float(stdtr(df, -t if bound == "lower" else t))


def detectable(standard_error, df, confidence=0.95, power=POWER):
    """The smallest true difference found at `power` by the two-sided test at 1 - confidence:
    (t(1 - alpha/2, df) + t(power, df)) x SE."""
    return (t_quantile(df, 1 - (1 - confidence) / 2) + t_quantile(df, power)) * standard_error


def holm(p_values):
    """Holm's (1979) step-down adjusted p of each of a family's p-values, in their order:
    the k-th smallest times (m - k + 1), never below an earlier one, at most 1."""
    order = np.argsort(p_values, kind="stable")
    adjusted, running = [0.0] * len(p_values), 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def grouped(statistics, groups):
    """Sentences' (sentences, k) statistics laid out by group for group_weighted: (kept, G x (k + 1)),
    sentence i's statistics and a 1 in the block of its group, groups[i] (None: left out)."""
    statistics = np.asarray(statistics, dtype=float)
    kept = [i for i, group in enumerate(groups) if group is not None]
    count = max((groups[i] for i in kept), default=-1) + 1
    width = statistics.shape[1] + 1
    laid = np.zeros((len(kept), count * width))
    for row, i in enumerate(kept):
        laid[row, groups[i] * width:(groups[i] + 1) * width] = [*statistics[i], 1.0]
    return laid


def group_weighted(scorer, groups, k):
    """A scorer of grouped() sums: each group's corpus score by `scorer`, weighted by its sentences
    (the bucket-weighted BLEU of the length buckets); a group a resample misses weighs 0."""
    def score(sums):
        blocks = sums.reshape(len(sums), groups, k + 1)
        counts = blocks[:, :, k]
        scores = np.stack([scorer(blocks[:, g, :k]) for g in range(groups)], 1)
        return (scores * counts).sum(1) / counts.sum(1)
    return score
