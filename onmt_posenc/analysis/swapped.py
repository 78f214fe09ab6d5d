"""Swapped evaluation (SHAPE paper, Sec. 5.1, Table 3).

On INTERPOLATE examples "X1 <sep> X2 ... <sep> XN" the first sentence is moved
to the end ("X2 ... <sep> XN <sep> X1"). Both versions are translated, and the
translation of X1 is scored in each: the first segment of the Original
translation, the last segment of the Swapped one, against Y1. A model that
translates a sentence the same wherever it stands loses nothing; the paper
measured APE 28.81 -> 20.74, SHAPE 28.51 -> 27.06. With N = 1 both versions
are the same text, so the scores are equal.

    onmt-posenc swapped --model model.pt --src concat.src --tgt concat.tgt --workdir swapped/
"""
import json
from pathlib import Path

from onmt_posenc import stock
from onmt_posenc.evaluate import corpus_bleu
from onmt_posenc.interpolate import DEFAULT_SEP, join_segments, read_lines, split_segments, write_lines


def swap_first_to_end(line, sep=DEFAULT_SEP):
    """'X1 <sep> X2 ... <sep> XN' -> 'X2 ... <sep> XN <sep> X1' (a single sentence stays as is)."""
    segments = split_segments(line.split(), sep)
    return " ".join(join_segments(segments[1:] + segments[:1], sep))


def first_sentence_scores(original_hyps, swapped_hyps, references, sep=DEFAULT_SEP):
    """BLEU of X1's translation in the Original and in the Swapped order, against Y1."""
    first_refs = [" ".join(split_segments(ref.split(), sep)[0]) for ref in references]
    original = [" ".join(split_segments(hyp.split(), sep)[0]) for hyp in original_hyps]
    swapped = [" ".join(split_segments(hyp.split(), sep)[-1]) for hyp in swapped_hyps]
    original_bleu, swapped_bleu = corpus_bleu(original, first_refs), corpus_bleu(swapped, first_refs)
    return {"original": original_bleu.score, "swapped": swapped_bleu.score,
            "drop": original_bleu.score - swapped_bleu.score, "examples": len(references),
            "signature": original_bleu.signature}


def analyse(src_path, tgt_path, workdir, translate, sep=DEFAULT_SEP, original_hyp=None):
    """Write the swapped source into `workdir`, translate it with `translate(src, output)`,
    and score. `original_hyp`: an existing translation of `src_path` (else it is made too)."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    swapped_src = workdir / "swapped.src"
    write_lines(swapped_src, [swap_first_to_end(line, sep) for line in read_lines(src_path)])
    if original_hyp is None:
        original_hyp = translate(src_path, workdir / "original.hyp")
    swapped_hyp = translate(swapped_src, workdir / "swapped.hyp")
    return first_sentence_scores(read_lines(original_hyp), read_lines(swapped_hyp), read_lines(tgt_path), sep)


def add_arguments(parser):
    parser.add_argument("--model", required=True, help="an OpenNMT-py checkpoint")
    parser.add_argument("--src", required=True, help="INTERPOLATE source lines, sentences joined by the separator")
    parser.add_argument("--tgt", required=True, help="their references, joined the same way")
    parser.add_argument("--workdir", required=True, help="folder for the swapped source, translations and logs")
    parser.add_argument("--sep", default=DEFAULT_SEP, help="separator token (default: %(default)s)")
    parser.add_argument("--translate-config", help="onmt_translate options (YAML), e.g. beam_size")
    parser.add_argument("--json", help="write the result to this JSON file")


def main(args):
    workdir = Path(args.workdir)

    def translate(src, output):
        log = workdir / f"{Path(output).stem}.translate.log"
        return stock.translate(args.model, src, output, log, args.translate_config)

    try:
        result = analyse(args.src, args.tgt, workdir, translate, args.sep)
    except stock.StockCommandError as error:
        print(f"onmt-posenc swapped: error: {error}")
        return 1
    print(f"BLEU of the first sentence: Original {result['original']:.2f}, Swapped {result['swapped']:.2f}, "
          f"drop {result['drop']:.2f} ({result['examples']} examples; {result['signature']})")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0
