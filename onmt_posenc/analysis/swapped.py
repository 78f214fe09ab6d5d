"""Swapped evaluation (SHAPE paper, Sec. 5.1, Table 3).

On INTERPOLATE examples "X1 <sep> X2 ... <sep> XN" the first sentence is moved
to the end ("X2 ... <sep> XN <sep> X1"). Both versions are translated, and the
translation of X1 is scored in each: the first segment of the Original
translation, the last segment of the Swapped one, against Y1. A model that
translates a sentence the same wherever it stands loses nothing; the paper
measured APE 28.81 -> 20.74, SHAPE 28.51 -> 27.06, on 1,000 joined examples
(10k sentence pairs) of the INTERPOLATE *training* data, to keep unseen text
out; the runner scores those (`train_examples`) and a joined test set.
With N = 1 both versions are the same text, so the scores are equal; lines of
one sentence (a document shorter than N, joined within documents) are left out.

X1's translation is found two ways. By the separators: the first (Original) or
last (Swapped) segment; a model that does not write them, or writes too many,
gives segments that are not X1's, so where more than WRONG_SEPARATORS_AT_MOST
of the Original translations, or of the Swapped ones (a separator lost once X1
stands at the end would put other words in the last segment), have another
number of separators than their reference this drop is "not applicable", with
those shares. By alignment, always:
each translation, separators removed, is cut into one segment per reference
sentence by minimum edit distance (onmt_posenc.core.alignment, as IWSLT scores
unsegmented output), on the tokens BLEU counts (ja-mecab's for Japanese), and
the segment aligned to Y1 is X1's translation. With correct separators both
find nearly the same segments.

    onmt-posenc swapped --model model.pt --src concat.src --tgt concat.tgt --workdir swapped/
"""
import json
import os
from pathlib import Path

from configargparse import ConfigFileParserException

from onmt_posenc.hooks import stock
from onmt_posenc.core.arguments import one_token
from onmt_posenc.analysis import AnalysisError, check_outputs, models, not_a_folder, read_texts
from onmt_posenc.config.include import merged_mapping
from onmt_posenc.core.alignment import segment
from onmt_posenc.core.scoring import bleu_tokenizer, corpus_bleu, hypothesis_segments, reference_segments
from onmt_posenc.config.parser_checks import translate_options_problem
from onmt_posenc.core.joining import DEFAULT_SEP, join_segments, split_segments
from onmt_posenc.core.text import read_lines, write_lines
from onmt_posenc.core.tokenization import tokenizer


def swap_first_to_end(line, sep=DEFAULT_SEP):
    """'X1 <sep> X2 ... <sep> XN' -> 'X2 ... <sep> XN <sep> X1' (a single sentence stays as is)."""
    segments = split_segments(line.split(), sep)
    return " ".join(join_segments(segments[1:] + segments[:1], sep))


# Above this share of Original (or Swapped) translations with a wrong number of separators,
# X1's translation cannot be found: the model writes no separator, or too few or too many.
WRONG_SEPARATORS_AT_MOST = 0.1


def separators_why(share, swapped_share=0.0):
    """Why a model's swapped scores are not measured, from its shares of Original and of
    Swapped lines with another number of separators than the reference."""
    which, share = ("Original", share) if share > WRONG_SEPARATORS_AT_MOST else ("Swapped", swapped_share)
    return (f"not applicable: {share:.0%} of the model's {which} translations have another number of "
            f"separators than the reference (none, or too few or too many; at most "
            f"{WRONG_SEPARATORS_AT_MOST:.0%} allowed), so X1's translation cannot be found")


def wrong_separator_share(hyps, references, sep=DEFAULT_SEP):
    """The share of lines whose number of separators differs from their reference's."""
    wrong = sum(hyp.split().count(sep) != ref.split().count(sep) for hyp, ref in zip(hyps, references, strict=True))
    return wrong / max(len(references), 1)


def aligned_first_sentences(hyps, references, last, sep=DEFAULT_SEP, language=None):
    """X1's translation in each hypothesis line, found by alignment: the line (separators
    removed, detokenized) cut into one segment per reference sentence by minimum edit
    distance; the first segment, or the `last` (Swapped: the references are taken in
    the swapped order, Y2 .. YN, Y1)."""
    detokenizer = tokenizer()
    tokenize = bleu_tokenizer(references, language)
    found = []
    for hyp, ref in zip(hyps, references, strict=True):
        sentences = reference_segments(ref, sep)
        if last:
            sentences = sentences[1:] + sentences[:1]
        segments = segment(" ".join(hypothesis_segments(hyp, detokenizer, sep)), sentences, tokenize)
        found.append(segments[-1] if last else segments[0])
    return found


def first_sentence_scores(original_hyps, swapped_hyps, references, sep=DEFAULT_SEP, language=None):
    """BLEU of X1's translation in the Original and in the Swapped order, against Y1: found by
    the separators ("applicable": false, and no scores, for a model that writes the wrong
    number of them) and by alignment ("aligned", always)."""
    # the Swapped lines' references have as many separators as the Original's
    share, swapped_share = (wrong_separator_share(hyps, references, sep) for hyps in (original_hyps, swapped_hyps))
    first_refs = [" ".join(split_segments(ref.split(), sep)[0]) for ref in references]
    result = {"applicable": max(share, swapped_share) <= WRONG_SEPARATORS_AT_MOST, "examples": len(references),
              "wrong_separators": share, "wrong_separators_swapped": swapped_share}
    if result["applicable"]:
        original = [" ".join(split_segments(hyp.split(), sep)[0]) for hyp in original_hyps]
        swapped = [" ".join(split_segments(hyp.split(), sep)[-1]) for hyp in swapped_hyps]
        original_bleu, swapped_bleu = (corpus_bleu(original, first_refs, language=language),
                                       corpus_bleu(swapped, first_refs, language=language))
        result.update(original=original_bleu.score, swapped=swapped_bleu.score,
                      drop=original_bleu.score - swapped_bleu.score)
    else:
        result["why"] = separators_why(share, swapped_share)
    original_bleu, swapped_bleu = (
        corpus_bleu(aligned_first_sentences(original_hyps, references, False, sep, language), first_refs,
                    language=language),
        corpus_bleu(aligned_first_sentences(swapped_hyps, references, True, sep, language), first_refs,
                    language=language))
    result["aligned"] = {"original": original_bleu.score, "swapped": swapped_bleu.score,
                         "drop": original_bleu.score - swapped_bleu.score}
    result["signature"] = original_bleu.signature
    return result


def analyse(src_path, tgt_path, workdir, translate, sep=DEFAULT_SEP, original_hyp=None, language=None):
    """Write the swapped source into `workdir`, translate it with `translate(src, output)`,
    and score. `original_hyp`: an existing translation of `src_path` (else it is made too).
    `language`: the target's (scoring.bleu_tokenizer)."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    if original_hyp is None:
        original_hyp = translate(src_path, workdir / "original.hyp")
    # a line of one sentence (a short document, joined within documents) stays as it is when
    # swapped: it would add a drop of 0 by construction
    references = read_lines(tgt_path)
    joined = [i for i, line in enumerate(references) if sep in line.split()]
    if not joined:
        return {"applicable": False, "examples": 0, "why": "not applicable: no line joins two or more sentences"}
    swapped_src = workdir / "swapped.src"
    sources = read_lines(src_path)
    write_lines(swapped_src, [swap_first_to_end(sources[i], sep) for i in joined])
    swapped_hyp = translate(swapped_src, workdir / "swapped.hyp")
    original = read_lines(original_hyp)
    return first_sentence_scores([original[i] for i in joined], read_lines(swapped_hyp),
                                 [references[i] for i in joined], sep, language)


def training_examples(src_path, tgt_path, count, out_dir, sep=DEFAULT_SEP):
    """The first `count` joined examples of a training corpus as the model saw it (the
    runner's sample/, tokenized), written as a source file and a raw-text reference
    file (joiner marks and BPE undone sentence by sentence, the separators kept) into
    `out_dir`; None if the corpus joins no sentences."""
    pairs = [(src, tgt) for src, tgt in zip(read_lines(src_path), read_lines(tgt_path), strict=True)
             if sep in tgt.split()][:count]
    if not pairs:
        return None
    detokenizer = tokenizer()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_lines(out_dir / "train.src", [src for src, _ in pairs])
    write_lines(out_dir / "train.ref", [" ".join(join_segments(
        [[detokenizer.detokenize(segment)] for segment in split_segments(tgt.split(), sep)], sep)) for _, tgt in pairs])
    return out_dir / "train.src", out_dir / "train.ref"


def add_arguments(parser):
    parser.add_argument("--model", required=True, help="an OpenNMT-py checkpoint")
    parser.add_argument("--src", required=True, help="INTERPOLATE source lines, sentences joined by the separator")
    parser.add_argument("--tgt", required=True, help="their references, joined the same way")
    parser.add_argument("--workdir", required=True, help="folder for the swapped source, translations and logs")
    parser.add_argument("--sep", type=one_token, default=DEFAULT_SEP, help="separator token (default: %(default)s)")
    parser.add_argument("--translate-config", help="onmt_translate options (YAML), e.g. beam_size")
    parser.add_argument("--target-language", metavar="LANG",
                        help="the references' language, which chooses BLEU's and the alignment's tokens (ja: "
                             "ja-mecab; default: ja-mecab for references that look Japanese, else 13a)")
    parser.add_argument("--json", help="write the result to this JSON file")


def check_joined(src_path, tgt_path, sep):
    """Sentences are moved at the separators: source lines without any cannot be swapped
    (the drop would be 0 by construction), and each reference needs as many as its source."""
    src_lines, tgt_lines = read_texts([src_path, tgt_path])
    if not any(sep in line.split() for line in src_lines):
        raise AnalysisError(f"{src_path} has no line with the separator {sep!r}: swapped needs joined "
                            "(INTERPOLATE) lines, as `onmt-posenc interpolate join` writes them")
    for number, (src, tgt) in enumerate(zip(src_lines, tgt_lines), 1):
        if src.split().count(sep) != tgt.split().count(sep):
            raise AnalysisError(f"{tgt_path}:{number}: {tgt.split().count(sep)} separators where "
                                f"{src_path}:{number} has {src.split().count(sep)}")


def check_translate_config(path):
    """The options file onmt_translate gets, through its parser before the first translation."""
    if not os.path.isfile(path):
        raise AnalysisError(f"--translate-config {path} does not exist")
    try:  # with its `include:`s, as onmt_translate reads it (config_include)
        options = merged_mapping(path)
    except ConfigFileParserException as error:
        raise AnalysisError(f"--translate-config {error}") from None
    problem = translate_options_problem(options)
    if problem is not None:
        key, what = problem
        raise AnalysisError(f"--translate-config {path}: {f'{key}: ' if key else ''}{what}")


def main(args):
    # All checks before the first translation.
    check_joined(args.src, args.tgt, args.sep)
    models.check_model(args.model)
    if args.translate_config is not None:
        check_translate_config(args.translate_config)
    workdir = Path(args.workdir)
    problem = not_a_folder(workdir)
    if problem is not None:
        raise AnalysisError(f"--workdir {workdir} {problem}")
    workdir.mkdir(parents=True, exist_ok=True)  # first: --json may name a file in it
    check_outputs(args, "json")

    def translate(src, output):
        log = workdir / f"{Path(output).stem}.translate.log"
        return stock.translate(args.model, src, output, log, args.translate_config)

    result = analyse(args.src, args.tgt, workdir, translate, args.sep, language=args.target_language)
    print(f"BLEU of the first sentence, {result['examples']} examples ({result['signature']}):")
    if not result["applicable"]:
        print(f"  found by the separators: {result['why']}")
    else:
        print(f"  found by the separators: Original {result['original']:.2f}, Swapped {result['swapped']:.2f}, "
              f"drop {result['drop']:.2f}")
    aligned = result["aligned"]
    print(f"  found by alignment: Original {aligned['original']:.2f}, Swapped {aligned['swapped']:.2f}, "
          f"drop {aligned['drop']:.2f} ({result['wrong_separators']:.0%} of the Original translations and "
          f"{result['wrong_separators_swapped']:.0%} of the Swapped have another number of separators than the "
          "reference)")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0
