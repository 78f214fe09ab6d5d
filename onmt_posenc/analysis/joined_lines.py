"""What a model writes for joined sentences ("X1 <sep> X2 ... <sep> XN"), line by line: how
many separators against the reference's, how long against the reference, and where the
translation of the first sentence lands. A sample to read beside a run's scores, where a
model that fails on joined lines (every separator count wrong) leaves its BLEU unexplained.

    onmt-posenc joined-lines --src test.src --ref test.ref --hyp test.hyp --lines 20 --markdown sample.md

Where X1 lands: the segment of the translation (cut at its own separators) whose chrF against
the reference's first sentence Y1 is highest, and, cutting the whole translation into one
segment per reference sentence by minimum edit distance (core.alignment, as the swapped
evaluation finds X1 without separators), the chrF of the first aligned segment against Y1 and
where that segment ends, as a share of the translation's tokens.
"""
import json
import statistics

from sacrebleu.metrics import CHRF

from onmt_posenc.analysis import check_outputs, read_texts
from onmt_posenc.core.alignment import cuts, units
from onmt_posenc.core.arguments import positive_int
from onmt_posenc.core.joining import DEFAULT_SEP
from onmt_posenc.core.scoring import bleu_tokenizer, hypothesis_segments, reference_segments
from onmt_posenc.core.tokenization import tokenizer


def line_report(src, ref, hyp, detokenizer, tokenize, chrf, sep=DEFAULT_SEP):
    """One joined line: its separators, length ratio and where Y1's translation lands."""
    references = reference_segments(ref, sep)
    segments = hypothesis_segments(hyp, detokenizer, sep)
    first = references[0]
    scores = [chrf.sentence_score(segment, [first]).score for segment in segments]
    tokens = units(" ".join(segments), tokenize)
    bounds, _ = cuts(tokens, [units(sentence, tokenize) for sentence in references])
    aligned = " ".join(tokens[:bounds[0]] if bounds else tokens)
    reference_tokens = sum(len(units(sentence, tokenize)) for sentence in references)
    return {"sentences": len(references), "source_separators": src.split().count(sep),
            "reference_separators": len(references) - 1, "hypothesis_separators": len(segments) - 1,
            "length_ratio": len(tokens) / max(reference_tokens, 1),
            "best_segment": max(range(len(scores)), key=scores.__getitem__) + 1, "best_chrf": max(scores),
            "aligned_chrf": chrf.sentence_score(aligned, [first]).score,
            "aligned_end": (bounds[0] if bounds else len(tokens)) / max(len(tokens), 1),
            "first_reference": first, "hypothesis": " ".join(segments), "first_segment": segments[0]}


def summary(lines):
    right = sum(line["hypothesis_separators"] == line["reference_separators"] for line in lines)
    return {"lines": len(lines), "right_separators": right,
            "mean_length_ratio": statistics.mean(line["length_ratio"] for line in lines),
            "best_segment_first": sum(line["best_segment"] == 1 for line in lines),
            "mean_aligned_chrf": statistics.mean(line["aligned_chrf"] for line in lines),
            "mean_aligned_end": statistics.mean(line["aligned_end"] for line in lines)}


def markdown(result, shown):
    total = result["summary"]
    out = [f"{total['lines']} joined lines: separators as many as the reference's in {total['right_separators']}; "
           f"hypothesis/reference length {total['mean_length_ratio']:.2f} on average; Y1's best match is the first "
           f"segment of the translation in {total['best_segment_first']}; the first aligned segment's chrF against "
           f"Y1 {total['mean_aligned_chrf']:.1f} on average, ending at {total['mean_aligned_end']:.0%} of the "
           "translation.", "",
           "| line | sentences | separators (ref / hyp) | length ratio | Y1 best in segment (chrF) | aligned X1 chrF "
           "(ends at) |", "|---|---|---|---|---|---|"]
    for number, line in enumerate(result["lines"][:shown], 1):
        out.append(f"| {number} | {line['sentences']} | {line['reference_separators']} / "
                   f"{line['hypothesis_separators']} | {line['length_ratio']:.2f} | {line['best_segment']} "
                   f"({line['best_chrf']:.1f}) | {line['aligned_chrf']:.1f} ({line['aligned_end']:.0%}) |")
    out.append("")
    for number, line in enumerate(result["lines"][:shown], 1):
        out += [f"**Line {number}.** Y1: {line['first_reference']}", "",
                f"Translation: {line['hypothesis']}", ""]
    return "\n".join(out) + "\n"


def add_arguments(parser):
    parser.add_argument("--src", required=True, help="the joined source lines that were translated")
    parser.add_argument("--ref", required=True, help="their joined references (raw text, separators kept)")
    parser.add_argument("--hyp", required=True, help="the model's translations")
    parser.add_argument("--lines", type=positive_int, default=20,
                        help="lines shown with their text (default: %(default)s); the summary reads every line")
    parser.add_argument("--language", help="the target's language code (sacreBLEU's tokenizer; default: from the text)")
    parser.add_argument("--markdown", help="write the summary, table and lines to this Markdown file")
    parser.add_argument("--json", help="write every line's figures to this JSON file")


def main(args):
    check_outputs(args, "markdown", "json")
    src, ref, hyp = read_texts([args.src, args.ref, args.hyp])
    detokenizer, chrf = tokenizer(), CHRF()
    tokenize = bleu_tokenizer(ref, args.language)
    lines = [line_report(s, r, h, detokenizer, tokenize, chrf) for s, r, h in zip(src, ref, hyp)]
    result = {"summary": summary(lines), "lines": lines}
    text = markdown(result, args.lines)
    print(text, end="")
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
