"""Detokenized sacreBLEU per newstest year and macro-averaged, as in the SHAPE paper's appendix.

    onmt-posenc evaluate --hyp 'runs/shape/newstest{year}.hyp' --ref 'data/wmt16_en_de/newstest{year}.de'

Hypotheses are what onmt_translate writes for the prepared data (pyonmttok
tokens with BPE joiner marks); they are detokenized, which also undoes BPE,
and scored against the raw references with sacreBLEU's defaults (mixed case,
13a tokenization, exponential smoothing: the paper's signature). `{year}` in
both patterns stands for each of --years; the table ends with the macro
average over the dev years (2010-2013) and over the test years (2014-2016).

INTERPOLATE: score the joined translations against the joined references
(newstest{year}.interp.de); each separator-delimited segment is detokenized on
its own and the separators are kept, as in the references.
"""
import sys

from sacrebleu.metrics import BLEU

from onmt_posenc.interpolate import DEFAULT_SEP, join_segments, read_lines, split_segments
from onmt_posenc.prepare_wmt16 import DEV_YEARS, TEST_YEARS, YEARS, tokenizer


class EvaluateError(ValueError):
    pass


def detokenize(line, detokenizer, sep=DEFAULT_SEP):
    """One hypothesis line back to plain text, segment by segment around separators."""
    segments = [detokenizer.detokenize(segment).split() for segment in split_segments(line.split(), sep)]
    return " ".join(join_segments(segments, sep))


def score_lines(hyps, refs, sep=DEFAULT_SEP):
    """(BLEU score, sacreBLEU signature) of tokenized hypothesis lines against raw reference lines."""
    detokenizer = tokenizer()
    bleu = BLEU()
    return bleu.corpus_score([detokenize(line, detokenizer, sep) for line in hyps], [list(refs)]), bleu.get_signature()


def score_files(hyp_path, ref_path, sep=DEFAULT_SEP):
    """score_lines of a tokenized hypothesis file against a raw reference file."""
    hyps, refs = read_lines(hyp_path), read_lines(ref_path)
    if len(hyps) != len(refs):
        raise EvaluateError(f"{hyp_path} has {len(hyps)} lines but {ref_path} has {len(refs)}")
    return score_lines(hyps, refs, sep)


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


def parse_years(text):
    """'2010-2016' or '2014,2016' -> years."""
    years = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        years.extend(range(int(first), int(last or first) + 1))
    return years


def add_arguments(parser):
    parser.add_argument("--hyp", required=True, help="hypothesis file; '{year}' stands for each year")
    parser.add_argument("--ref", required=True, help="raw reference file; '{year}' stands for each year")
    parser.add_argument("--years", type=parse_years, default=list(YEARS),
                        help="years for '{year}', e.g. 2010-2016 or 2014,2016 (default: 2010-2016)")
    parser.add_argument("--sep", default=DEFAULT_SEP, help="INTERPOLATE separator token (default: %(default)s)")


def main(args):
    per_year = "{year}" in args.hyp or "{year}" in args.ref
    scores, signature = {}, None
    try:
        if not per_year:
            score, signature = score_files(args.hyp, args.ref, args.sep)
            print(score.format(signature=str(signature)))
            return 0
        for year in args.years:
            score, signature = score_files(args.hyp.format(year=year), args.ref.format(year=year), args.sep)
            scores[year] = score.score
    except (EvaluateError, OSError) as error:
        print(f"onmt-posenc evaluate: error: {error}", file=sys.stderr)
        return 2
    print(table(scores))
    print(f"\nsacreBLEU signature: {signature}")
    return 0
