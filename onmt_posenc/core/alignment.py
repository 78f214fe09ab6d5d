"""A translation of several joined sentences, cut into one segment per reference sentence
by minimum edit distance, as IWSLT scores unsegmented output (mwerSegmenter,
Matusov et al. 2005: "Evaluating machine translation output with automatic sentence
segmentation").

Given the hypothesis tokens h and the references r_1..r_N, find the cuts
0 = b_0 <= b_1 <= ... <= b_N = len(h) that minimize

    sum_k  Levenshtein(h[b_{k-1}:b_k], r_k)

by dynamic programming over (reference token, hypothesis position): one
Levenshtein table per reference whose first row may start at any position i,
at the cost of the references before ending at i. A row of the table is
vectorized: the substitution/deletion step is elementwise, the insertion chain
a running minimum (E[j] = j + min over i <= j of (T[i] - i)). O(sum |r_k| x |h|)
time, O(N x |h|) memory. Each cell carries where its segment started, so the
cuts are read back without a second table.

Tokens are the units BLEU counts (`units`): sacreBLEU's tokenizer for the
target language, ja-mecab's morphemes for Japanese, never whitespace words of
unsegmented text. This module is ours (mwerSegmenter's code is not used).
"""
import importlib

import numpy as np


def units(text, tokenize="13a"):
    """The tokens alignment works on: those of sacreBLEU's tokenizer `tokenize`
    ('13a', 'ja-mecab', 'zh', ...), made once per process."""
    if tokenize not in _TOKENIZER_OF:
        from sacrebleu.metrics.bleu import _TOKENIZERS

        module, name = _TOKENIZERS[tokenize].rsplit(".", 1)
        _TOKENIZER_OF[tokenize] = getattr(importlib.import_module(f"sacrebleu.tokenizers.{module}"), name)()
    return _TOKENIZER_OF[tokenize](text).split()


_TOKENIZER_OF = {}


def _running_argmin(values):
    """For each j, the (last) index i <= j of the smallest values[i]."""
    best = np.minimum.accumulate(values)
    at = np.where(values == best, np.arange(len(values)), 0)
    return np.maximum.accumulate(at)


def cuts(hypothesis, references):
    """The cut positions b_1..b_{N-1} of `hypothesis` (a token list) for the N
    `references` (token lists), and the total edit distance."""
    length = len(hypothesis)
    positions = np.arange(length + 1)
    hyp = np.array(hypothesis, dtype=object)
    cost = np.where(positions == 0, 0, np.inf)  # D_0: nothing aligned before position 0
    starts = []
    for reference in references:
        # row 0: the segment starts at i <= j, hypothesis tokens i..j-1 inserted
        begin = _running_argmin(cost - positions)
        row = cost[begin] + positions - begin
        start = begin.copy()
        for token in reference:
            # a reference token deleted (same j), or matched / substituted (from j - 1)
            substituted = np.full(length + 1, np.inf)
            substituted[1:] = row[:-1] + (hyp != token)
            through = np.where(row + 1 <= substituted, row + 1, substituted)
            through_start = np.where(row + 1 <= substituted, start, np.concatenate(([0], start[:-1])))
            # then hypothesis tokens inserted: a running minimum of through[i] - i
            best = _running_argmin(through - positions)
            row = through[best] + positions - best
            start = through_start[best]
        starts.append(start)
        cost = row
    bounds, end = [], length
    for start in reversed(starts[1:]):
        end = int(start[end])
        bounds.append(end)
    return bounds[::-1], float(cost[length])


def segment(hypothesis, references, tokenize="13a"):
    """`hypothesis` (plain text) cut into one segment per reference sentence (plain text),
    each segment its tokens joined by spaces."""
    tokens = units(hypothesis, tokenize)
    bounds, _ = cuts(tokens, [units(reference, tokenize) for reference in references])
    edges = [0, *bounds, len(tokens)]
    return [" ".join(tokens[a:b]) for a, b in zip(edges, edges[1:])]
