"""sacreBLEU of translations, scored as `onmt-posenc evaluate` scores them.

Hypotheses are onmt_translate output: they are detokenized first
(onmt_posenc.evaluate.detokenize, which undoes the joiner marks of the
project's prepared data and leaves plain space-separated text as it is), then
scored against the references with sacreBLEU's defaults (13a, exp smoothing).
"""
from onmt_posenc.evaluate import score_lines


def corpus_bleu(hypotheses, references):
    """(BLEU, sacreBLEU signature) of hypothesis lines against one reference line each."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:
        raise ValueError("no sentences to score")
    score, signature = score_lines(hypotheses, references)
    return score.score, str(signature)
