"""Shift invariance of the encoder (SHAPE paper, Sec. 5.2, Fig. 3).

The same sentences are encoded with their absolute positions offset by k, for
each k in a set of offsets ({0, 100, 250, 500} in the paper); for two offsets
a and b the cosine similarity of the encoder's hidden states at each token is
averaged over all tokens. A shift-invariant encoder gives 1.0 everywhere.

The offset replaces the model's own evaluation offset by `own + k` (own = 0
for APE and paper-style SHAPE); randomized positions, which evaluate at their
own spread positions rather than 0..n-1, have each of those moved by k. A model
without absolute positions on the
source side (relative attention only) is shift-invariant by construction; its
matrix is all ones.

    onmt-posenc shift-invariance --model model.pt --src valid.src --plot shift.png
"""
import contextlib
import json
import sys

import torch

from onmt_posenc.analysis import check_outputs, models, plots
from onmt_posenc.core.arguments import non_negative_int, positive_int

DEFAULT_OFFSETS = (0, 100, 250, 500)


class MovedEvaluationPositions(torch.nn.Module):
    """A position module whose evaluation positions are its own (`evaluation_positions`,
    randomized positions'), each moved by `offset`."""

    def __init__(self, module, offset):
        super().__init__()
        self.module, self.offset = module, offset

    def forward(self, emb, step=None):
        positions = self.module.evaluation_positions(step or 0, emb.size(1), emb.device) + self.offset
        return self.module.embed_at_real(emb, positions.float())


def offset_encoding(loaded, offset):
    """The source position module of a model, with every position moved by `offset`."""
    from onmt_posenc.model.positions.shifted import ShiftedSinusoidalEncoding

    current = models.position_module(loaded.model, "src")
    if hasattr(current, "evaluation_positions"):
        return MovedEvaluationPositions(current, offset).eval()
    own = getattr(current, "inference_offset", 0)
    shifted = ShiftedSinusoidalEncoding(current.dim, loaded.opt.position_encoding_type,
                                        max_shift=0, inference_offset=own + offset)
    shifted.embedding_scale = current.embedding_scale
    rows = min(len(shifted.pe), len(current.pe))
    if not torch.allclose(shifted.pe[:rows], current.pe[:rows].float(), atol=1e-6):
        raise ValueError("the model's sinusoid table differs from OpenNMT-py's; cannot shift it")
    return shifted.to(current.pe.device).eval()


def encoder_states(loaded, src_lines, offset, max_tokens):
    """Per sentence, the encoder states (length, d) with positions offset by `offset`."""
    states = [None] * len(src_lines)
    context = (models.position_module_replaced(loaded.model, "src", offset_encoding(loaded, offset))
               if models.has_absolute_positions(loaded.model, "src") else contextlib.nullcontext())
    with context, torch.no_grad():
        for batch in models.batches(loaded.vocabs, src_lines, max_tokens=max_tokens):
            enc_out = models.encode(loaded.model, batch)
            for row, (i, length) in enumerate(zip(batch["index"], batch["srclen"].tolist())):
                states[i] = enc_out[row, :length].float()
    return [s for s in states if s is not None]


def similarity_matrix(loaded, src_lines, offsets=DEFAULT_OFFSETS, max_tokens=4096):
    """offsets x offsets matrix of mean token-level cosine similarity of encoder states."""
    states = {k: torch.cat(encoder_states(loaded, src_lines, k, max_tokens)) for k in offsets}
    return [[torch.cosine_similarity(states[a], states[b], dim=-1).mean().item() for b in offsets]
            for a in offsets]


def mean_off_diagonal(matrix):
    n = len(matrix)
    return sum(matrix[i][j] for i in range(n) for j in range(n) if i != j) / max(n * n - n, 1)


def measure(loaded, src_lines, offsets=DEFAULT_OFFSETS):
    matrix = similarity_matrix(loaded, src_lines, offsets)
    return {"offsets": list(offsets), "matrix": matrix, "mean_off_diagonal": mean_off_diagonal(matrix),
            "absolute_positions": models.has_absolute_positions(loaded.model, "src")}


def plot(result, path, title):
    labels = [str(k) for k in result["offsets"]]
    plots.heatmap(result["matrix"], labels, labels, path, title=title, xlabel="offset k",
                  ylabel="offset k", vmin=min(0.0, min(map(min, result["matrix"]))), vmax=1.0,
                  cbar_label="mean cosine similarity")


def add_arguments(parser):
    parser.add_argument("--model", required=True, help="an OpenNMT-py checkpoint")
    parser.add_argument("--src", required=True, help="source sentences (tokenized as in training)")
    parser.add_argument("--offsets", type=non_negative_int, nargs="+", default=list(DEFAULT_OFFSETS),
                        help="position offsets to compare (default: %(default)s)")
    parser.add_argument("--max-sentences", type=positive_int, default=200,
                        help="use the first N lines (default: %(default)s)")
    parser.add_argument("--plot", help="write the heatmap to this PNG")
    parser.add_argument("--json", help="write the result to this JSON file")


def main(args):
    if len(set(args.offsets)) < 2:  # one offset has no pair to compare: the mean would be of nothing
        print(f"onmt-posenc shift-invariance: error: argument --offsets: needs two or more different offsets, "
              f"got {' '.join(map(str, args.offsets))}", file=sys.stderr)
        return 2
    check_outputs(args, "plot", "json")
    src = models.read_tokens([args.src], args.max_sentences)[0]
    loaded = models.load_model(args.model)
    models.warn_unknown_tokens("shift-invariance", loaded, [("src", args.src, src)])
    result = measure(loaded, src, args.offsets)
    width = max(len(str(k)) for k in args.offsets) + 6
    print("offset".rjust(width) + "".join(str(k).rjust(width) for k in args.offsets))
    for k, row in zip(args.offsets, result["matrix"]):
        print(str(k).rjust(width) + "".join(f"{v:{width}.4f}" for v in row))
    print(f"mean off-diagonal similarity: {result['mean_off_diagonal']:.4f}")
    if not result["absolute_positions"]:
        print("(the encoder has no absolute positions: shift-invariant by construction)", file=sys.stderr)
    if args.plot:
        plot(result, args.plot, f"Encoder shift invariance: {args.model}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
