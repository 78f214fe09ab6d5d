"""Detokenized sacreBLEU per newstest year and macro-averaged, as in the SHAPE paper's appendix.

    onmt-posenc evaluate --hyp 'runs/shape/newstest{year}.hyp' --ref 'data/wmt16_en_de/newstest{year}.de'

Hypotheses are what onmt_translate writes for the prepared data (pyonmttok
tokens with BPE joiner marks); they are detokenized, which also undoes BPE,
and scored against the raw references with sacreBLEU's defaults (mixed case,
13a tokenization, exponential smoothing: the paper's signature). `{year}` in
both patterns stands for each of --years; the table ends with the macro
average over the dev years (2010-2013) and over the test years (2014-2016).

INTERPOLATE (joined sets, "X1 <sep> X2 ..."): the separators are removed from
translations and references before scoring, so BLEU counts words only
(sacreBLEU's 13a would split `<sep>` into three tokens that nearly always
match). `split_scores` also scores the sentences one by one after splitting
each line at its separators, and counts the lines whose separators do not
match their reference's.

Japanese (and Chinese, Korean) text has no spaces between words: 13a would
count a whole sentence as one or two "words". The target language chooses
sacreBLEU's tokenizer (ja: ja-mecab, zh: zh, ko: ko-mecab, else 13a); without
one, references with kana in most lines are scored as Japanese. Japanese is
never scored with 13a: a language that says otherwise for such references is
refused. chrF (character n-grams, no tokenizer) is computed beside BLEU, and
BLEU's brevity penalty and n-gram precisions are kept, to tell how much of a
difference is length.

The same functions score the runner's evaluation sets (onmt_posenc.experiments.running.runner).
"""
import argparse
import re
import string
from typing import NamedTuple

import numpy as np

from sacrebleu.metrics import BLEU, CHRF

from onmt_posenc.core.errors import UserError
from onmt_posenc.core.arguments import one_token
from onmt_posenc.core.joining import DEFAULT_SEP, fit_to_slots, split_segments
from onmt_posenc.core.text import read_lines
from onmt_posenc.core.tokenization import tokenizer

YEARS = tuple(range(2010, 2017))
DEV_YEARS = (2010, 2011, 2012, 2013)
TEST_YEARS = (2014, 2015, 2016)


class EvaluateError(UserError, ValueError):
    pass


# sacreBLEU's tokenizer for a target language; 13a for the others
LANGUAGE_TOKENIZERS = {"ja": "ja-mecab", "zh": "zh", "ko": "ko-mecab"}
_KANA = re.compile(r"[\u3041-\u309f\u30a0-\u30ff]")


class Bleu(NamedTuple):
    score: float
    length_ratio: float  # hypothesis length / reference length (sacreBLEU's, in its tokens)
    signature: str
    chrf: float = None
    brevity_penalty: float = None
    precisions: tuple = ()  # BLEU's 1- to 4-gram precisions, in %
    chrf_signature: str = None

    def details(self):
        """What a result stores beside the score: chrF, brevity penalty, precisions."""
        return {"chrf": self.chrf, "brevity_penalty": self.brevity_penalty, "precisions": list(self.precisions)}


def looks_japanese(refs):
    """Most non-empty reference lines hold kana (Japanese script; Chinese has none)."""
    lines = [line for line in refs if line.strip()]
    return bool(lines) and sum(bool(_KANA.search(line)) for line in lines) * 2 > len(lines)


def bleu_tokenizer(refs, language=None):
    """sacreBLEU's tokenizer for references `refs` of the target language `language`
    (None: Japanese if they look Japanese, else 13a)."""
    japanese = looks_japanese(refs)
    if language is None:
        return "ja-mecab" if japanese else "13a"
    tokenize = LANGUAGE_TOKENIZERS.get(language, "13a")
    if japanese and tokenize != "ja-mecab":
        raise EvaluateError(f"the references look Japanese (kana in most lines) but the target language is "
                            f"{language!r}, which would score them with {tokenize}: give the target language ja")
    return tokenize


def hypothesis_segments(line, detokenizer, sep=DEFAULT_SEP):
    """The sentences of one hypothesis line (one unless joined), each detokenized to plain text."""
    return [detokenizer.detokenize(segment) for segment in split_segments(line.split(), sep)]


def reference_segments(line, sep=DEFAULT_SEP):
    return [" ".join(segment) for segment in split_segments(line.split(), sep)]


def _bleu(hyps, refs, language=None):
    if len(hyps) != len(refs):
        raise EvaluateError(f"{len(hyps)} hypotheses but {len(refs)} references")
    if not hyps:
        raise EvaluateError("no sentences to score")
    metric, chrf = BLEU(tokenize=bleu_tokenizer(refs, language)), CHRF()
    score = metric.corpus_score(hyps, [refs])
    return Bleu(score.score, score.sys_len / max(score.ref_len, 1), str(metric.get_signature()),
                chrf.corpus_score(hyps, [refs]).score, score.bp, tuple(score.precisions),
                str(chrf.get_signature()))


def corpus_bleu(hyps, refs, sep=DEFAULT_SEP, language=None):
    """BLEU (and chrF) of tokenized hypothesis lines against raw reference lines, separators
    removed; `language`: the target language (see bleu_tokenizer)."""
    detokenizer = tokenizer()
    return _bleu([" ".join(hypothesis_segments(line, detokenizer, sep)) for line in hyps],
                 [" ".join(reference_segments(line, sep)) for line in refs], language)


def sentence_statistics(hyps, refs, tokenize, sep=DEFAULT_SEP):
    """{metric name: (its sacreBLEU metric, each line's sufficient statistics, a (lines, k) array)} of
    BLEU (with `tokenize`) and chrF, the lines prepared as corpus_bleu prepares them: the metric's
    `_compute_score_from_stats` of the statistics summed over any lines is their corpus score
    (significance.metric_scorer), so a resample of the sentences is scored without scoring text."""
    if len(hyps) != len(refs):
        raise EvaluateError(f"{len(hyps)} hypotheses but {len(refs)} references")
    detokenizer = tokenizer()
    hyps = [" ".join(hypothesis_segments(line, detokenizer, sep)) for line in hyps]
    refs = [" ".join(reference_segments(line, sep)) for line in refs]
    metrics = {"bleu": BLEU(tokenize=tokenize), "chrf": CHRF()}
    return {name: (metric, np.array(metric._extract_corpus_statistics(hyps, [refs]), dtype=float))
            for name, metric in metrics.items()}


def signature_tokenizer(signature):
    """The tokenizer a sacreBLEU signature names ("...|tok:13a|..." -> "13a")."""
    fields = dict(part.split(":", 1) for part in signature.split("|") if ":" in part)
    if "tok" not in fields:
        raise EvaluateError(f"the BLEU signature {signature!r} names no tokenizer (tok:...)")
    return fields["tok"]


def is_joined(refs, sep=DEFAULT_SEP):
    """Do these references join sentences with separators (an INTERPOLATE set)?"""
    return any(sep in line.split() for line in refs)


def split_scores(hyps, refs, sep=DEFAULT_SEP, language=None):
    """Joined lines split at their separators and scored sentence by sentence.

    A hypothesis with more or fewer separators than its reference still gives
    exactly the reference's number of sentences (interpolate.fit_to_slots), so
    the other sentences keep their place; such lines are counted."""
    if len(hyps) != len(refs):
        raise EvaluateError(f"{len(hyps)} hypotheses but {len(refs)} references")
    detokenizer = tokenizer()
    hyp_sentences, ref_sentences, mismatched = [], [], 0
    for hyp, ref in zip(hyps, refs):
        ref_segments = reference_segments(ref, sep)
        segments = split_segments(hyp.split(), sep)
        mismatched += len(segments) != len(ref_segments)
        hyp_sentences += [detokenizer.detokenize(s) for s in fit_to_slots(segments, len(ref_segments))]
        ref_sentences += ref_segments
    bleu = _bleu(hyp_sentences, ref_sentences, language)
    return {"bleu": bleu.score, "length_ratio": bleu.length_ratio, "sentences": len(ref_sentences),
            "lines": len(refs), "separator_mismatches": mismatched}


def score_files(hyp_path, ref_path, sep=DEFAULT_SEP, language=None):
    """corpus_bleu of a tokenized hypothesis file against a raw reference file."""
    hyps, refs = read_lines(hyp_path), read_lines(ref_path)
    if len(hyps) != len(refs):
        raise EvaluateError(f"{hyp_path} has {len(hyps)} lines but {ref_path} has {len(refs)}")
    return corpus_bleu(hyps, refs, sep, language)


def table(scores):
    """Markdown rows: one per year, then the macro average of the dev and of the test years."""
    rows = ["| newstest | BLEU |", "|---|---|"]
    rows += [f"| {year} | {score:.2f} |" for year, score in scores.items()]
    for name, years in (("dev", DEV_YEARS), ("test", TEST_YEARS)):
        present = [scores[y] for y in years if y in scores]
        if present:
            span = f"{years[0]}-{years[-1]}" if len(present) == len(years) else ", ".join(
                str(y) for y in years if y in scores)
            rows.append(f"| {name} average ({span}) | {sum(present) / len(present):.2f} |")
    return "\n".join(rows)


def year_range(text):
    """'2010-2016' or '2014,2016' -> years (argparse type: a bad value is its one-line error)."""
    found = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        try:
            first, last = int(first), int(last or first)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expects years like 2010-2016 or 2014,2016, got {text!r}") from None
        if last < first:
            raise argparse.ArgumentTypeError(f"the range {part} is reversed")
        found.extend(range(first, last + 1))
    return found


def year_pattern(text):
    """A file name in which '{year}' may stand for each year; any other brace would make
    str.format fail (argparse type: its one-line error)."""
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}
    except ValueError as error:  # a lone { or }
        raise argparse.ArgumentTypeError(f"{error} in {text!r}; only {{year}} may stand in braces") from None
    if fields - {"year"}:
        raise argparse.ArgumentTypeError(f"{text!r} has {', '.join('{' + f + '}' for f in sorted(fields - {'year'}))}"
                                         "; only {year} may stand in braces")
    return text


def add_arguments(parser):
    parser.add_argument("--hyp", type=year_pattern, required=True, help="hypothesis file; '{year}' stands for each year")
    parser.add_argument("--ref", type=year_pattern, required=True,
                        help="raw reference file; '{year}' stands for each year")
    parser.add_argument("--years", type=year_range,
                        help="years for '{year}', e.g. 2010-2016 or 2014,2016 (default: 2010-2016)")
    parser.add_argument("--target-language", metavar="LANG",
                        help="the references' language, which chooses sacreBLEU's tokenizer (ja: ja-mecab, zh, "
                             "ko: ko-mecab, else 13a; default: ja-mecab for references that look Japanese, else 13a)")
    parser.add_argument("--sep", type=one_token, default=DEFAULT_SEP, help="INTERPOLATE separator token (default: %(default)s)")


def main(args):
    per_year = "{year}" in args.hyp or "{year}" in args.ref
    if args.years is not None and not per_year:
        raise EvaluateError("argument --years: neither --hyp nor --ref has {year} to stand for them")
    if per_year and ("{year}" in args.hyp) != ("{year}" in args.ref):
        has, lacks = ("--hyp", "--ref") if "{year}" in args.hyp else ("--ref", "--hyp")
        raise EvaluateError(f"{has} has {{year}} but {lacks} does not: every year would be scored against the one "
                            f"{lacks} file; put {{year}} in both")
    if not per_year:
        bleu = score_files(args.hyp, args.ref, args.sep, args.target_language)
        print(f"BLEU = {bleu.score:.2f} (hyp/ref length {bleu.length_ratio:.3f}, brevity penalty "
              f"{bleu.brevity_penalty:.3f}, n-gram precisions {'/'.join(f'{p:.1f}' for p in bleu.precisions)}; "
              f"{bleu.signature})")
        print(f"chrF = {bleu.chrf:.2f} ({bleu.chrf_signature})")
        refs = read_lines(args.ref)
        if is_joined(refs, args.sep):
            split = split_scores(read_lines(args.hyp), refs, args.sep, args.target_language)
            print(f"split into {split['sentences']} sentences: BLEU = {split['bleu']:.2f}; "
                  f"{split['separator_mismatches']} of {split['lines']} lines had a wrong number of separators")
        return 0
    scores, signature = {}, None
    for year in args.years or YEARS:
        bleu = score_files(args.hyp.format(year=year), args.ref.format(year=year), args.sep, args.target_language)
        scores[year], signature = bleu.score, bleu.signature
    print(table(scores))
    print(f"\nsacreBLEU signature: {signature}")
    return 0
