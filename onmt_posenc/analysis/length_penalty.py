"""How much of a BLEU difference is length: a model decoded with each of OpenNMT-py's
length penalties, the penalty chosen on the validation set, then scored on the test set.

    onmt-posenc length-penalty --model model.pt --valid-src valid.src --valid-ref valid.ref \\
        --test-src test.src --test-ref test.ref --penalties none avg wu:0.6 wu:1.0

Beam search without a penalty favours short translations (every token lowers the
score). OpenNMT-py's `length_penalty` divides a hypothesis's score by its length
(`avg`) or by Wu et al.'s ((5 + |Y|) / 6)^alpha (`wu`, with `alpha`). For each
penalty the command translates both sets with the same model and reports BLEU,
its brevity penalty, the length ratio and chrF; the penalty with the best
validation BLEU is the one a user would pick, and its test scores are the ones
to compare across models. A model whose translations are short because its
scores favour stopping gains from a penalty; one that translates too little for
other reasons does not.
"""
import itertools
import json
import sys
from pathlib import Path

import yaml

from onmt_posenc.hooks import stock
from onmt_posenc.analysis import AnalysisError, check_outputs, models, not_a_folder, read_texts
from onmt_posenc.core.arguments import positive_int
from onmt_posenc.core.scoring import corpus_bleu

PENALTIES = ("none", "avg", "wu:0.6", "wu:1.0")


def penalty(text):
    """'none', 'avg' or 'wu:ALPHA' -> onmt_translate options (argparse type)."""
    import argparse

    name, _, alpha = text.partition(":")
    if name in ("none", "avg") and not alpha:
        return {"length_penalty": name}
    if name == "wu" and alpha:
        try:
            return {"length_penalty": "wu", "alpha": float(alpha)}
        except ValueError:
            pass
    raise argparse.ArgumentTypeError(f"expects none, avg or wu:ALPHA (e.g. wu:0.6), got {text!r}")


def label(options):
    return options["length_penalty"] + (f":{options['alpha']:g}" if "alpha" in options else "")


def decode_with_penalties(model, sets, penalties, workdir, base_options=None, language=None):
    """{penalty: {set: scores}} of `model` on `sets` ({name: (src, ref)}), each penalty in
    `penalties` (onmt_translate options), the other options from `base_options`."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    results, decodes = {}, itertools.count(1)
    for options in penalties:
        name = label(options)
        config = workdir / f"translate_{name}.yaml"
        config.write_text(yaml.safe_dump({**(base_options or {}), **options}), encoding="utf-8")
        results[name] = {}
        for set_name, (src, ref) in sets.items():
            output = workdir / f"{set_name}.{name}.hyp"
            # a decode of a whole set takes minutes on a CPU: say which one is under way
            print(f"[{next(decodes)}/{len(penalties) * len(sets)}] length penalty {name}: translate {set_name}",
                  file=sys.stderr, flush=True)
            stock.translate(model, src, output, workdir / f"{set_name}.{name}.log", config)
            bleu = corpus_bleu(read_texts([output])[0], read_texts([ref])[0], language=language)
            results[name][set_name] = {"bleu": bleu.score, "brevity_penalty": bleu.brevity_penalty,
                                       "length_ratio": bleu.length_ratio, "chrf": bleu.chrf}
            signature = bleu.signature
    chosen = max(results, key=lambda name: results[name]["valid"]["bleu"])
    return {"penalties": results, "chosen_on_valid": chosen, "signature": signature}


def add_arguments(parser):
    parser.add_argument("--model", required=True, help="an OpenNMT-py checkpoint")
    for name in ("valid", "test"):
        parser.add_argument(f"--{name}-src", required=True, help=f"{name} source, as the model reads it")
        parser.add_argument(f"--{name}-ref", required=True, help=f"{name} references, raw text")
    parser.add_argument("--penalties", nargs="+", type=penalty, default=[penalty(p) for p in PENALTIES],
                        help="length penalties to try: none, avg, wu:ALPHA (default: %s)" % " ".join(PENALTIES))
    parser.add_argument("--sentences", type=positive_int, help="the first N lines of each set only")
    parser.add_argument("--beam-size", type=positive_int, default=4, help="beam size (default: %(default)s)")
    parser.add_argument("--max-length", type=positive_int, default=250,
                        help="longest translation in tokens (default: %(default)s)")
    parser.add_argument("--target-language", metavar="LANG", help="the references' language (see evaluate)")
    parser.add_argument("--workdir", required=True, help="folder for the translations and logs")
    parser.add_argument("--json", help="write the result to this JSON file")


def main(args):
    models.check_model(args.model)
    sets = {}
    for name in ("valid", "test"):
        src, ref = getattr(args, f"{name}_src"), getattr(args, f"{name}_ref")
        read_texts([src, ref], args.sentences)  # present, UTF-8, paired line by line
        sets[name] = (src, ref)
    workdir = Path(args.workdir)
    problem = not_a_folder(workdir)
    if problem is not None:
        raise AnalysisError(f"--workdir {workdir} {problem}")
    workdir.mkdir(parents=True, exist_ok=True)
    check_outputs(args, "json")
    if args.sentences:  # the first N lines of each set, beside the translations
        cut = {}
        for name, paths in sets.items():
            cut[name] = tuple(workdir / f"{name}.first{args.sentences}.{kind}" for kind in ("src", "ref"))
            for path, lines in zip(cut[name], read_texts(paths, args.sentences)):
                path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        sets = cut
    result = decode_with_penalties(args.model, sets, args.penalties, workdir,
                                   {"beam_size": args.beam_size, "max_length": args.max_length}, args.target_language)
    print(f"{'length penalty':<16} {'valid BLEU':>10} {'BP':>6} {'test BLEU':>10} {'BP':>6} {'ratio':>6} "
          f"{'chrF':>6}")
    for name, scores in result["penalties"].items():
        valid, test = scores["valid"], scores["test"]
        mark = " <- chosen on valid" if name == result["chosen_on_valid"] else ""
        print(f"{name:<16} {valid['bleu']:>10.2f} {valid['brevity_penalty']:>6.3f} {test['bleu']:>10.2f} "
              f"{test['brevity_penalty']:>6.3f} {test['length_ratio']:>6.3f} {test['chrf']:>6.2f}{mark}")
    print(result["signature"])
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0
