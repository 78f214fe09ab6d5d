"""BLEU and the gain over a baseline by source length (SHAPE paper, Sec. 5.3, Fig. 4).

Sentences are bucketed by source length in tokens (1-10, 11-20, ...); each
bucket gets its own corpus BLEU per model, its hypothesis/reference length
ratio (below 1: the model stops early; above 1: it runs on), and each model's
gain over the baseline (APE) in that bucket. Buckets holding lengths that no training
example had are marked "unseen": that is where EXTRAPOLATE separates methods.

    onmt-posenc length-buckets --src test.src --ref test.tgt \\
        --hyp ape=ape.hyp --hyp shape=shape.hyp --baseline ape --train-src train.src --plot buckets.png
"""
import json
import math

from onmt_posenc.analysis import AnalysisError, check_outputs, labelled, plots, read_texts
from onmt_posenc.core.arguments import positive_int
from onmt_posenc.core.scoring import corpus_bleu


def bucket_edges(lengths, width, max_train_length=None):
    """[(first, last)] inclusive length ranges of width `width` covering all lengths,
    one of them ending at `max_train_length`, so that no bucket holds both lengths
    seen in training and longer ones (the first bucket may be narrower)."""
    if width < 1:  # the loop below would never end
        raise ValueError(f"the bucket width must be >= 1, got {width}")
    longest = max(lengths)
    last = (max_train_length or 0) % width or width
    edges = [(1, last)]
    while edges[-1][1] < longest:
        edges.append((edges[-1][1] + 1, edges[-1][1] + width))
    return edges


def relative_edges(lengths, multiples, max_train_length):
    """[(first, last, label)]: inclusive length ranges ending at floor(m * max_train_length) for
    each multiple m, labelled by the multiples ('0-1x', '1-1.5x'), and one beyond the last
    ('>4x') where a length is longer; a range empty at this length (two multiples within one
    token) left out."""
    edges, first, previous = [], 1, 0
    for multiple in multiples:
        last = math.floor(multiple * max_train_length)
        if last >= first:
            edges.append((first, last, f"{previous:g}-{multiple:g}x"))
            first, previous = last + 1, multiple
    if max(lengths) >= first:
        edges.append((first, max(lengths), f">{previous:g}x"))
    return edges


def unseen(buckets, max_train_length):
    """Per bucket ("first-last"): does it hold only lengths longer than any training source?"""
    return [max_train_length is not None and int(bucket.split("-")[0]) > max_train_length for bucket in buckets]


def bucket_scores(src_lines, ref_lines, hyp_lines, width=10, max_train_length=None, nlls=None, split_at=None,
                  relative=None):
    """One model's scores per bucket of source length: BLEU with its brevity penalty and
    n-gram precisions, chrF, the hypothesis/reference length ratio and, given `nlls` (per
    sentence, the teacher-forced NLL of each gold token: token_nll.token_nlls), the mean NLL
    of a gold token. The length ratio says where a model stops, the NLL how well it writes
    what it writes (Varis and Bojar 2021: the drop on unseen lengths follows the hypothesis's).
    A bucket ends at `split_at` (default: `max_train_length`, the longest training source), and
    the sentences up to it and those beyond it are also scored as one corpus each ("split"):
    runs trained on other lengths (a size-matched control) are split where the capped ones
    are, so that their buckets and splits compare. Buckets beyond `max_train_length` are
    marked unseen.

    With `relative` (increasing multiples of `max_train_length`, 1 among them: the report's
    relative buckets), the buckets end at those multiples instead (relative_edges; the split at
    max_train_length), each labelled by its multiples too ("multiples")."""
    lengths = [len(line.split()) for line in src_lines]
    if len(hyp_lines) != len(src_lines):
        raise ValueError(f"{len(hyp_lines)} translations for {len(src_lines)} source lines")
    if relative is not None and (max_train_length is None or split_at is not None or 1 not in relative):
        raise ValueError("relative buckets need the longest training source, 1 among their multiples and no other "
                         f"split (got max_train_length {max_train_length}, split_at {split_at}, multiples {relative})")
    split_at = split_at or max_train_length
    edges = (relative_edges(lengths, relative, max_train_length) if relative is not None else
             [(first, last, None) for first, last in bucket_edges(lengths, width, split_at)])
    members = [[i for i, n in enumerate(lengths) if first <= n <= last] for first, last, _ in edges]
    kept = [k for k, m in enumerate(members) if m]
    groups = [members[k] for k in kept]
    buckets = [f"{edges[k][0]}-{edges[k][1]}" for k in kept]
    result = {"buckets": buckets, "counts": [len(group) for group in groups], "max_train_length": max_train_length,
              "unseen": unseen(buckets, max_train_length),
              **({"multiples": [edges[k][2] for k in kept]} if relative is not None else {}),
              **group_scores(groups, hyp_lines, ref_lines, nlls)}
    if nlls is not None:
        result["nll_all"] = mean_token_nll(nlls)
    if split_at is not None:
        parts = {name: lines for name, lines in (("up_to", [i for i, n in enumerate(lengths) if n <= split_at]),
                                                 ("beyond", [i for i, n in enumerate(lengths) if n > split_at]))
                 if lines}
        pooled = group_scores(list(parts.values()), hyp_lines, ref_lines, nlls)
        result["split"] = {"at": split_at, **{name: {"count": len(lines), **{key: values[j] for key, values in
                                                                             pooled.items()}}
                                              for j, (name, lines) in enumerate(parts.items())}}
    return result


def group_scores(groups, hyp_lines, ref_lines, nlls=None):
    """{score: [one value per group of sentence numbers]}: each group scored as one corpus."""
    scores = [corpus_bleu([hyp_lines[i] for i in group], [ref_lines[i] for i in group]) for group in groups]
    values = {"bleu": [score.score for score in scores],
              "length_ratio": [score.length_ratio for score in scores],
              "brevity_penalty": [score.brevity_penalty for score in scores],
              "precisions": [list(score.precisions) for score in scores],
              "chrf": [score.chrf for score in scores]}
    if nlls is not None:
        values["nll"] = [mean_token_nll(nlls[i] for i in group) for group in groups]
    return values


def mean_token_nll(per_sentence):
    """The mean NLL of a gold token over sentences' per-token NLLs (sentences the model could
    not score, None, left out)."""
    total = count = 0
    for nll in per_sentence:
        if nll is not None:
            total, count = total + sum(nll), count + len(nll)
    return total / count if count else None


# the scores bucket_scores gives each bucket, as (key, what it is)
PER_BUCKET_SCORES = {"bleu": "BLEU", "brevity_penalty": "BLEU's brevity penalty", "chrf": "chrF",
                     "length_ratio": "hypothesis/reference length", "nll": "NLL of a gold token"}


def compare(per_model, baseline=None):
    """The bucket_scores of several models of one set side by side, and each one's gain over `baseline`."""
    first = next(iter(per_model.values()))
    for label, result in per_model.items():
        if result["buckets"] != first["buckets"]:
            raise ValueError(f"{label} was bucketed on other source sentences than {next(iter(per_model))}")
    merged = {key: first[key] for key in ("buckets", "counts", "max_train_length", "multiples") if key in first}
    merged["unseen"] = unseen(first["buckets"], first["max_train_length"])
    # each score every model has (records made before issue 59 hold BLEU and the length ratio only)
    for key in PER_BUCKET_SCORES:
        if all(key in result for result in per_model.values()):
            merged[key] = {label: result[key] for label, result in per_model.items()}
    if baseline is not None:
        base = merged["bleu"][baseline]
        merged["baseline"] = baseline
        merged["gain"] = {label: [b - a for a, b in zip(base, scores)]
                          for label, scores in merged["bleu"].items() if label != baseline}
    return merged


def max_length(path):
    return max(len(line.split()) for line in read_texts([path])[0])


def bucket_names(result):
    """Each bucket as the tables and plots name it: its lengths, and its multiples of the longest
    training source where the buckets are relative ('1-1.5x: 46-67')."""
    if "multiples" not in result:
        return list(result["buckets"])
    return [f"{multiple}: {bucket}" for multiple, bucket in zip(result["multiples"], result["buckets"])]


def plot(result, path, title):
    """BLEU per bucket, gain over the baseline, and hypothesis/reference length; unseen lengths shaded."""
    # a gain panel only with a model beside the baseline (a baseline alone has no gain to draw)
    panels = [("bleu", "BLEU")] + ([("gain", f"BLEU gain over {result['baseline']}")] if result.get("gain") else [])
    panels.append(("length_ratio", "hypothesis / reference length"))
    fig, axes = plots.plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    x = range(len(result["buckets"]))
    colors = {label: f"C{i}" for i, label in enumerate(result["bleu"])}  # one color per model in every panel
    for ax, (key, ylabel) in zip(axes[0], panels):
        for k, unseen in enumerate(result["unseen"]):
            if unseen:
                ax.axvspan(k - 0.5, k + 0.5, color="0.88", zorder=0)
        series = result[key]
        bar_width = 0.8 / max(len(series), 1)
        for j, (label, values) in enumerate(series.items()):
            offsets = [k - 0.4 + bar_width * (j + 0.5) for k in x]
            ax.bar(offsets, values, width=bar_width, label=label, color=colors[label])
        if key != "bleu":  # the line of no gain, of the reference's length
            ax.axhline(0 if key == "gain" else 1, color="black", linewidth=0.8)
        ax.set_xticks(list(x), [f"{b}\n(n={c})" for b, c in zip(bucket_names(result), result["counts"])], fontsize=8)
        ax.set_xlabel("source length (tokens); shaded: longer than any training example")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    return plots.save(fig, path)


def plot_seeds(per_method, path, title):
    """BLEU and the hypothesis/reference length against source length: one line per method
    (the mean over its seeds, `per_method`: {label: [bucket_scores of each seed]}, all on the
    same buckets) in the band from its lowest to its highest seed; the longest training
    source marked. Relative buckets: against the length in multiples of it."""
    first = next(iter(per_method.values()))[0]
    relative = "multiples" in first
    unit = first["max_train_length"] if relative else 1
    mids = [sum(int(end) for end in bucket.split("-")) / 2 / unit for bucket in first["buckets"]]
    fig, axes = plots.plt.subplots(1, 2, figsize=(11, 4), squeeze=False)
    for ax, (key, ylabel) in zip(axes[0], (("bleu", "BLEU"), ("length_ratio", "hypothesis / reference length"))):
        for i, (label, seeds) in enumerate(per_method.items()):
            if any(result["buckets"] != first["buckets"] for result in seeds):
                raise ValueError(f"{label} was bucketed on other source sentences")
            columns = list(zip(*(result[key] for result in seeds)))
            mean = [sum(column) / len(column) for column in columns]
            many = "s" if len(seeds) > 1 else ""
            ax.plot(mids, mean, marker="o", markersize=3, color=f"C{i}", label=f"{label} ({len(seeds)} seed{many})")
            if len(seeds) > 1:
                ax.fill_between(mids, [min(c) for c in columns], [max(c) for c in columns], color=f"C{i}", alpha=0.2)
        if first["max_train_length"] is not None:
            ax.axvline(1 if relative else first["max_train_length"] + 0.5, color="black", linestyle="--",
                       linewidth=0.8, label=f"longest training source ({first['max_train_length']})")
        if key == "length_ratio":
            ax.axhline(1, color="0.5", linewidth=0.8)
        ax.set_xlabel("source length / longest training source (bucket middle)" if relative else
                      "source length (tokens, bucket middle)")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
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
    length.add_argument("--max-train-length", type=positive_int, help="longest training source length")
    parser.add_argument("--width", type=positive_int, default=10, help="bucket width in tokens (default: %(default)s)")
    parser.add_argument("--plot", help="write the figure to this PNG")
    parser.add_argument("--json", help="write the result to this JSON file")


def main(args):
    hyp_files = labelled(args.hyp, "hyp", "FILE")
    if args.baseline is not None and args.baseline not in hyp_files:
        raise AnalysisError(f"--baseline {args.baseline!r} is not one of the --hyp labels {sorted(hyp_files)}")
    check_outputs(args, "plot", "json")
    src, ref, *hyps = read_texts([args.src, args.ref, *hyp_files.values()])
    longest = max_length(args.train_src) if args.train_src else args.max_train_length
    result = compare({label: bucket_scores(src, ref, lines, args.width, longest)
                      for label, lines in zip(hyp_files, hyps)}, args.baseline)
    print("bucket".ljust(12) + "n".rjust(6) + "".join(f"{label} BLEU".rjust(14) for label in result["bleu"])
          + "".join(f"{label} len".rjust(12) for label in result["bleu"]))
    for k, bucket in enumerate(result["buckets"]):
        mark = " *" if result["unseen"][k] else ""
        print((bucket + mark).ljust(12) + str(result["counts"][k]).rjust(6)
              + "".join(f"{scores[k]:14.2f}" for scores in result["bleu"].values())
              + "".join(f"{ratios[k]:12.2f}" for ratios in result["length_ratio"].values()))
    if longest is not None:
        print(f"* holds lengths above the longest training source ({longest})")
    if args.plot:
        plot(result, args.plot, "BLEU by source length")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
