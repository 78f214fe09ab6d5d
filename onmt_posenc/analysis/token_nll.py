"""Token-level comparison of two models (SHAPE paper, Sec. 5.4, Fig. 5).

Each model scores the gold translation by teacher forcing; every gold token
(the end-of-sentence token included) gets its negative log-likelihood, the
per-token terms of onmt_translate's GOLD SCORE. For two models A and B the
share of gold tokens where A's NLL is lower than B's is tabulated by decoder
position x frequency of the token in the training targets. Above 0.5: A wins.

    onmt-posenc token-nll --model-a shape.pt --model-b ape.pt --labels shape ape \\
        --src test.src --tgt test.tgt --train-tgt train.tgt --plot tokens.png
"""
import bisect
import json
import math
from collections import Counter

import torch

from onmt_posenc.analysis import AnalysisError, check_outputs, models, plots
from onmt_posenc.core.arguments import positive_int

END_OF_SENTENCE = "</s>"


def token_nlls(loaded, src_lines, tgt_lines, max_tokens=4096):
    """Per sentence, the NLL of each gold token and of the end of sentence. A model loaded with
    rotary rescaling (models.load_model's translate options) is rescaled for each batch by its
    longest source, as onmt_translate rescales each of its batches."""
    from onmt_posenc.model.attention import rotary

    nlls = [None] * len(src_lines)
    with torch.no_grad():
        for batch in models.batches(loaded.vocabs, src_lines, tgt_lines, max_tokens=max_tokens):
            rotary.scale_for_input(loaded.model, int(batch["srclen"].max()))
            _, _, gold_log_probs = models.teacher_forced(loaded.model, batch)
            for row, i in enumerate(batch["index"]):
                nlls[i] = (-gold_log_probs[row, : len(tgt_lines[i]) + 1]).tolist()
    return nlls


def training_frequencies(tgt_path):
    """Occurrences of each token in the training targets; the end of sentence once per line."""
    counts = Counter()
    lines = 0
    with open(tgt_path, encoding="utf-8") as f:
        for line in f:
            counts.update(line.split())
            lines += 1
    counts[END_OF_SENTENCE] = lines
    return counts


def check_training_targets(path):
    """UTF-8 text with lines, checked in one fast pass: the training targets can be too
    large to hold in memory, and training_frequencies reads them only after the models ran."""
    from onmt_posenc.core.text import scan_text

    lines, bad_line, why = scan_text(path)
    if bad_line is not None:
        raise AnalysisError(f"{path}:{bad_line}: not UTF-8 text ({why})")
    if lines == 0:
        raise AnalysisError(f"{path} is empty: no training frequencies")


def frequency_edges(frequencies, bins):
    """Upper bounds splitting the gold tokens into `bins` groups of about equal size;
    fewer where frequencies repeat (no bucket is empty, none holds nothing but the
    frequencies above the largest)."""
    ordered = sorted(frequencies)
    edges = []
    for k in range(1, bins):
        edge = ordered[len(ordered) * k // bins]
        if (not edges or edge > edges[-1]) and edge < ordered[-1]:
            edges.append(edge)
    return edges


def gold_frequencies(tgt_lines, counts):
    """Per sentence, the training frequency of each gold token and of the end of sentence."""
    return [[counts.get(token, 0) for token in line + [END_OF_SENTENCE]] for line in tgt_lines]


def compare(nll_a, nll_b, frequencies, position_width=10, frequency_bins=4):
    """Share of gold tokens where A's NLL < B's, by position bucket x frequency bucket
    (`frequencies`: gold_frequencies of the scored sentences)."""
    tokens = []  # (position, frequency, A wins)
    for a, b, sentence in zip(nll_a, nll_b, frequencies):
        if a is None or b is None:  # an empty source line: never scored
            continue
        for position, (frequency, x, y) in enumerate(zip(sentence, a, b)):
            tokens.append((position, frequency, x < y))
    if not tokens:
        raise ValueError("no gold tokens to compare")
    edges = frequency_edges([f for _, f, _ in tokens], frequency_bins)
    lows = [0] + [e + 1 for e in edges]
    highs = edges + [max(f for _, f, _ in tokens)]
    positions = math.ceil((max(p for p, _, _ in tokens) + 1) / position_width)
    wins = [[0] * len(lows) for _ in range(positions)]
    totals = [[0] * len(lows) for _ in range(positions)]
    for position, frequency, a_wins in tokens:
        row, col = position // position_width, bisect.bisect_left(edges, frequency)
        totals[row][col] += 1
        wins[row][col] += a_wins
    return {
        "share": sum(w for _, _, w in tokens) / len(tokens),
        "tokens": len(tokens),
        "position_buckets": [f"{r * position_width}-{(r + 1) * position_width - 1}" for r in range(positions)],
        "frequency_buckets": [f"{lo}-{hi}" for lo, hi in zip(lows, highs)],
        "shares": [[w / t if t else None for w, t in zip(wr, tr)] for wr, tr in zip(wins, totals)],
        "counts": totals,
    }


def plot(result, path, label_a, label_b):
    plots.heatmap(result["shares"], result["position_buckets"], result["frequency_buckets"], path,
                  title=f"Share of gold tokens where {label_a} has lower NLL than {label_b} "
                        f"(all: {result['share']:.3f})",
                  xlabel="frequency of the token in the training targets",
                  ylabel="decoder position", vmin=0.0, vmax=1.0, cmap="RdBu",
                  cbar_label=f"share where {label_a} wins")


def add_arguments(parser):
    parser.add_argument("--model-a", required=True, help="checkpoint of model A")
    parser.add_argument("--model-b", required=True, help="checkpoint of model B (e.g. the APE baseline)")
    parser.add_argument("--labels", nargs=2, default=["A", "B"], metavar=("A", "B"), help="names in the output")
    parser.add_argument("--src", required=True, help="source sentences")
    parser.add_argument("--tgt", required=True, help="their gold translations")
    parser.add_argument("--train-tgt", required=True, help="training targets, for token frequencies")
    parser.add_argument("--max-sentences", type=positive_int, help="use the first N lines")
    parser.add_argument("--position-width", type=positive_int, default=10,
                        help="decoder positions per row (default: %(default)s)")
    parser.add_argument("--frequency-bins", type=positive_int, default=4,
                        help="frequency columns (default: %(default)s)")
    parser.add_argument("--plot", help="write the heatmap to this PNG")
    parser.add_argument("--json", help="write the result to this JSON file")


def main(args):
    label_a, label_b = args.labels
    if label_a == label_b:
        raise AnalysisError(f"--labels: A and B must differ, got {label_a!r} twice")
    check_outputs(args, "plot", "json")
    src, tgt = models.read_tokens([args.src, args.tgt], args.max_sentences)
    check_training_targets(args.train_tgt)
    models.check_model(args.model_b)  # before model A runs
    model_a = models.load_model(args.model_a)
    models.warn_unknown_tokens("token-nll", model_a, [("src", args.src, src), ("tgt", args.tgt, tgt)])
    nll_a = token_nlls(model_a, src, tgt)
    nll_b = token_nlls(models.load_model(args.model_b), src, tgt)
    result = compare(nll_a, nll_b, gold_frequencies(tgt, training_frequencies(args.train_tgt)),
                     args.position_width, args.frequency_bins)
    print(f"share of {result['tokens']} gold tokens where {label_a} has lower NLL than {label_b}: "
          f"{result['share']:.3f}")
    print("position".ljust(10) + "".join(f.rjust(14) for f in result["frequency_buckets"]))
    for bucket, row in zip(result["position_buckets"], result["shares"]):
        print(bucket.ljust(10) + "".join("-".rjust(14) if v is None else f"{v:14.3f}" for v in row))
    if args.plot:
        plot(result, args.plot, label_a, label_b)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
