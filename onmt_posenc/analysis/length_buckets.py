"""BLEU and the gain over a baseline by source length (SHAPE paper, Sec. 5.3, Fig. 4).

Sentences are bucketed by source length in tokens (1-10, 11-20, ...); each
bucket gets its own corpus BLEU per model, and each model's gain over the
baseline (APE) in that bucket. Buckets holding lengths that no training
example had are marked "unseen": that is where EXTRAPOLATE separates methods.

    onmt-posenc length-buckets --src test.src --ref test.tgt \\
        --hyp ape=ape.hyp --hyp shape=shape.hyp --baseline ape --train-src train.src --plot buckets.png
"""
import json

from onmt_posenc.analysis import labelled, plots
from onmt_posenc.analysis.bleu import corpus_bleu
from onmt_posenc.interpolate import read_lines


def bucket_edges(lengths, width):
    """[(first, last)] inclusive length ranges of width `width` covering all lengths."""
    longest = max(lengths)
    return [(start + 1, start + width) for start in range(0, longest, width)]


def bucket_bleu(src_lines, ref_lines, hyps, width=10, max_train_length=None, baseline=None):
    """Per-bucket BLEU of each model in `hyps` ({label: lines}) and gain over `baseline`."""
    lengths = [len(line.split()) for line in src_lines]
    for label, lines in hyps.items():
        if len(lines) != len(src_lines):
            raise ValueError(f"{label}: {len(lines)} translations for {len(src_lines)} source lines")
    edges = bucket_edges(lengths, width)
    members = [[i for i, n in enumerate(lengths) if first <= n <= last] for first, last in edges]
    kept = [k for k, m in enumerate(members) if m]
    result = {
        "buckets": [f"{edges[k][0]}-{edges[k][1]}" for k in kept],
        "counts": [len(members[k]) for k in kept],
        "max_train_length": max_train_length,
        "unseen": [max_train_length is not None and edges[k][1] > max_train_length for k in kept],
        "bleu": {},
    }
    for label, lines in hyps.items():
        result["bleu"][label] = [
            corpus_bleu([lines[i] for i in members[k]], [ref_lines[i] for i in members[k]])[0] for k in kept
        ]
    if baseline is not None:
        base = result["bleu"][baseline]
        result["baseline"] = baseline
        result["gain"] = {label: [b - a for a, b in zip(base, scores)]
                          for label, scores in result["bleu"].items() if label != baseline}
    return result


def max_length(path):
    return max(len(line.split()) for line in read_lines(path))


def plot(result, path, title):
    """BLEU per bucket (left) and gain over the baseline (right); unseen lengths shaded."""
    fig, axes = plots.plt.subplots(1, 2 if "gain" in result else 1, figsize=(11, 4), squeeze=False)
    x = range(len(result["buckets"]))
    colors = {label: f"C{i}" for i, label in enumerate(result["bleu"])}  # one color per model in both panels
    panels = [("bleu", "BLEU")] + ([("gain", f"BLEU gain over {result.get('baseline')}")] if "gain" in result else [])
    for ax, (key, ylabel) in zip(axes[0], panels):
        for k, unseen in enumerate(result["unseen"]):
            if unseen:
                ax.axvspan(k - 0.5, k + 0.5, color="0.88", zorder=0)
        series = result[key]
        bar_width = 0.8 / max(len(series), 1)
        for j, (label, values) in enumerate(series.items()):
            offsets = [k - 0.4 + bar_width * (j + 0.5) for k in x]
            ax.bar(offsets, values, width=bar_width, label=label, color=colors[label])
        if key == "gain":
            ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xticks(list(x), [f"{b}\n(n={c})" for b, c in zip(result["buckets"], result["counts"])], fontsize=8)
        ax.set_xlabel("source length (tokens); shaded: longer than any training example")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    return plots.save(fig, path)


def add_arguments(parser):
    parser.add_argument("--src", required=True, help="source sentences that were translated")
    parser.add_argument("--ref", required=True, help="reference translations")
    parser.add_argument("--hyp", action="append", required=True, metavar="LABEL=FILE",
                        help="a model's translations (repeat per model)")
    parser.add_argument("--baseline", help="LABEL of the model the gains are measured against")
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--train-src", help="training source file: lengths above its longest line are unseen")
    length.add_argument("--max-train-length", type=int, help="longest training source length")
    parser.add_argument("--width", type=int, default=10, help="bucket width in tokens (default: %(default)s)")
    parser.add_argument("--plot", help="write the figure to this PNG")
    parser.add_argument("--json", help="write the result to this JSON file")


def main(args):
    hyp_files = labelled(args.hyp, "hyp", "FILE")
    if args.baseline is not None and args.baseline not in hyp_files:
        raise SystemExit(f"--baseline {args.baseline!r} is not one of the --hyp labels {sorted(hyp_files)}")
    longest = max_length(args.train_src) if args.train_src else args.max_train_length
    result = bucket_bleu(read_lines(args.src), read_lines(args.ref),
                         {label: read_lines(path) for label, path in hyp_files.items()},
                         args.width, longest, args.baseline)
    print("bucket".ljust(12) + "n".rjust(6) + "".join(label.rjust(12) for label in result["bleu"]))
    for k, bucket in enumerate(result["buckets"]):
        mark = " *" if result["unseen"][k] else ""
        print((bucket + mark).ljust(12) + str(result["counts"][k]).rjust(6)
              + "".join(f"{scores[k]:12.2f}" for scores in result["bleu"].values()))
    if longest is not None:
        print(f"* holds lengths above the longest training source ({longest})")
    if args.plot:
        plot(result, args.plot, "BLEU by source length")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
