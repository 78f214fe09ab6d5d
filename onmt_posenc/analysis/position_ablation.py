"""How much a trained model relies on its position encoding (seed 003's checks).

The model reads the same sentences twice by teacher forcing: as trained, and
with the absolute position encoding of both sides removed (the embeddings keep
their sqrt(d) scale, so only the position term goes). Reported: the mean
cosine similarity of encoder and decoder output features between the two
(per token, padding excluded), and the perplexity of the gold translations
with and without positions. A model without absolute positions (relative
attention only) is unchanged: similarity 1, equal perplexity.

Also here: the sinusoid matrix PE(i, m) drawn as a heatmap (positions x dims).

    onmt-posenc position-ablation --model model.pt --src valid.src --tgt valid.tgt --sinusoid-plot pe.png
"""
import contextlib
import json
import math

import torch

from onmt_posenc.analysis import check_outputs, models, plots
from onmt_posenc.arguments import positive_int


def _features(loaded, src_lines, tgt_lines, max_tokens):
    """Encoder and decoder features (tokens x d, padding dropped) and the summed gold NLL and its count."""
    enc, dec, nll, count = [], [], 0.0, 0
    with torch.no_grad():
        for batch in models.batches(loaded.vocabs, src_lines, tgt_lines, max_tokens=max_tokens):
            enc_out, dec_out, gold_log_probs = models.teacher_forced(loaded.model, batch)
            for row, (i, length) in enumerate(zip(batch["index"], batch["srclen"].tolist())):
                enc.append(enc_out[row, :length].float())
                dec.append(dec_out[row, : len(tgt_lines[i]) + 1].float())
                count += len(tgt_lines[i]) + 1
            nll -= gold_log_probs.sum().item()
    return torch.cat(enc), torch.cat(dec), nll, count


def ablate(loaded, src_lines, tgt_lines, max_tokens=4096):
    from onmt_posenc.positions.none import NoPositionEncoding

    sides = [side for side in ("src", "tgt") if models.has_absolute_positions(loaded.model, side)]
    enc, dec, nll, count = _features(loaded, src_lines, tgt_lines, max_tokens)
    with contextlib.ExitStack() as stack:
        for side in sides:
            dim = models.position_module(loaded.model, side).dim
            stack.enter_context(models.position_module_replaced(loaded.model, side, NoPositionEncoding(dim)))
        enc_removed, dec_removed, nll_removed, _ = _features(loaded, src_lines, tgt_lines, max_tokens)
    return {
        "removed_from": sides,
        "encoder_cosine": torch.cosine_similarity(enc, enc_removed, dim=-1).mean().item(),
        "decoder_cosine": torch.cosine_similarity(dec, dec_removed, dim=-1).mean().item(),
        "perplexity_kept": math.exp(nll / count),
        "perplexity_removed": math.exp(nll_removed / count),
        "tokens": count,
    }


def plot_sinusoids(dim, path, positions=100, enc_type="SinusoidalInterleaved"):
    """PE(i, m) for i < positions, all m: the table OpenNMT-py adds to the embeddings."""
    from onmt.modules.embeddings import PositionalEncoding

    table = PositionalEncoding(dim, enc_type, max_len=positions).pe[:, 0].numpy()
    fig, ax = plots.figure(8, 4.2)
    image = ax.imshow(table, cmap="RdBu", aspect="auto", vmin=-1, vmax=1, interpolation="nearest")
    ax.set_xlabel("dimension m")
    ax.set_ylabel("position i")
    ax.set_title(f"Sinusoidal position encoding ({enc_type}, d={dim}, first {positions} positions)", fontsize=10)
    fig.colorbar(image, ax=ax)
    return plots.save(fig, path)


def add_arguments(parser):
    parser.add_argument("--model", required=True, help="an OpenNMT-py checkpoint")
    parser.add_argument("--src", required=True, help="source sentences")
    parser.add_argument("--tgt", required=True, help="their gold translations")
    parser.add_argument("--max-sentences", type=positive_int, help="use the first N lines")
    parser.add_argument("--sinusoid-plot", help="write the model's sinusoid matrix heatmap to this PNG")
    parser.add_argument("--json", help="write the result to this JSON file")


def main(args):
    check_outputs(args, "sinusoid_plot", "json")
    src, tgt = models.read_tokens([args.src, args.tgt], args.max_sentences)
    loaded = models.load_model(args.model)
    models.warn_unknown_tokens("position-ablation", loaded, [("src", args.src, src), ("tgt", args.tgt, tgt)])
    result = ablate(loaded, src, tgt)
    where = " and ".join(result["removed_from"]) or "nowhere (no absolute positions)"
    print(f"position encoding removed from: {where}")
    print(f"mean cosine similarity of features, kept vs removed: encoder {result['encoder_cosine']:.4f}, "
          f"decoder {result['decoder_cosine']:.4f}")
    print(f"perplexity: kept {result['perplexity_kept']:.3f}, removed {result['perplexity_removed']:.3f} "
          f"({result['tokens']} gold tokens)")
    if args.sinusoid_plot:
        plot_sinusoids(loaded.opt.src_word_vec_size, args.sinusoid_plot, enc_type=loaded.opt.position_encoding_type)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
