"""How much a trained model relies on its position encoding (seed 003's checks).

The model reads the same sentences by teacher forcing, as trained and in each
condition below, with the absolute position encoding of a side removed (the
embeddings keep their scale, sqrt(d) or word_embedding_scale's, so only the position term goes):

    encoder        no positions in the encoder (seed 003's BERT check)
    decoder        no positions in the decoder (its GPT-2 check)
    decoder+decay  no positions in the decoder, and its self-attention weights
                   multiplied by the decaying mask (seed 003's linear ramp from 1 at
                   the current token to 0.1 at the first, onmt_posenc.model.attention.decay),
                   with no training: the slides' third row
    both           no positions on either side

For each: the mean cosine similarity of encoder and decoder output features with
the model as trained (per token, padding excluded), and the perplexity of the gold
translations. Two yardsticks for how high a similarity is, both measured, not
assumed: the cosine of random vectors drawn from N(0, I) in the model's dimension
(the slides' baseline; its mean is 0 with spread about 1/sqrt(d)), and the cosine
between the model's own features of two different tokens (a random pairing of the
kept features), which is far from 0 in a trained model. A side without absolute
positions (relative attention only) has no condition: nothing would change.

Also here: the sinusoid matrix PE(i, m) drawn as a heatmap (positions x dims).

    onmt-posenc position-ablation --model model.pt --src valid.src --tgt valid.tgt --sinusoid-plot pe.png
"""
import contextlib
import json
import math

import torch

from onmt_posenc.analysis import check_outputs, models, plots
from onmt_posenc.core.arguments import positive_int


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


# Pairs of random vectors drawn for the N(0, I) yardstick, and its seed
RANDOM_PAIRS, RANDOM_SEED = 10000, 0


@contextlib.contextmanager
def _condition(model, removed, decay):
    """Inside the block: no absolute positions on the sides `removed`; with `decay`, the
    decoder's self-attention is the decaying mask with the model's own projections."""
    from onmt_posenc.model.attention import replacement_for
    from onmt_posenc.model.attention.decaying_mask import DecayingMaskAttention
    from onmt_posenc.model.positions.none import NoPositionEncoding

    with contextlib.ExitStack() as stack:
        for side in removed:
            trained = models.position_module(model, side)
            kept_scale = NoPositionEncoding(trained.dim)
            kept_scale.embedding_scale = trained.embedding_scale
            stack.enter_context(models.position_module_replaced(model, side, kept_scale))
        if decay:
            for layer in model.decoder.transformer_layers:
                stack.enter_context(models.attribute_replaced(
                    layer, "self_attn", replacement_for(layer.self_attn, "scaled-dot", DecayingMaskAttention.name).eval()))
        yield model


def conditions(model):
    """{name: (sides without positions, decaying mask in the decoder)} of this model."""
    sides = [side for side in ("src", "tgt") if models.has_absolute_positions(model, side)]
    found = {}
    if "src" in sides:
        found["encoder"] = (["src"], False)
    if "tgt" in sides:
        found["decoder"] = (["tgt"], False)
        found["decoder+decay"] = (["tgt"], True)
    if len(sides) == 2:
        found["both"] = (sides, False)
    return sides, found


def cosine(a, b):
    return torch.cosine_similarity(a, b, dim=-1).mean().item()


def random_cosine(dim, pairs=RANDOM_PAIRS, seed=RANDOM_SEED):
    """(mean, standard deviation) of the cosine of `pairs` pairs of N(0, I) vectors in `dim` dimensions."""
    generator = torch.Generator().manual_seed(seed)
    a, b = torch.randn(2, pairs, dim, generator=generator)
    values = torch.cosine_similarity(a, b, dim=-1)
    return values.mean().item(), values.std().item()


def other_token_cosine(features, seed=RANDOM_SEED):
    """Mean cosine between each feature vector and that of another token (a random pairing)."""
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(features.size(0), generator=generator)
    moved = order == torch.arange(features.size(0))
    order[moved] = (order[moved] + 1) % features.size(0)  # never a token with itself
    return cosine(features, features[order])


def ablate(loaded, src_lines, tgt_lines, max_tokens=4096):
    sides, found = conditions(loaded.model)
    enc, dec, nll, count = _features(loaded, src_lines, tgt_lines, max_tokens)
    measured = {}
    for name, (removed, decay) in found.items():
        with _condition(loaded.model, removed, decay):
            enc_removed, dec_removed, nll_removed, _ = _features(loaded, src_lines, tgt_lines, max_tokens)
        measured[name] = {"encoder_cosine": cosine(enc, enc_removed), "decoder_cosine": cosine(dec, dec_removed),
                          "perplexity": math.exp(nll_removed / count)}
    removed_both = measured.get("both") or next(iter(measured.values()), None)
    mean, spread = random_cosine(enc.size(-1))
    return {
        "removed_from": sides,
        # as trained against without any absolute positions (both sides, or the one that has them)
        "encoder_cosine": removed_both["encoder_cosine"] if removed_both else 1.0,
        "decoder_cosine": removed_both["decoder_cosine"] if removed_both else 1.0,
        "perplexity_kept": math.exp(nll / count),
        "perplexity_removed": removed_both["perplexity"] if removed_both else math.exp(nll / count),
        "conditions": measured,
        "yardsticks": {"random_mean": mean, "random_std": spread, "random_pairs": RANDOM_PAIRS, "dim": enc.size(-1),
                       "encoder_other_token": other_token_cosine(enc), "decoder_other_token": other_token_cosine(dec)},
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
    if not result["removed_from"]:
        print("no absolute positions on either side: nothing to remove")
    print(f"{'positions removed from':<24} {'encoder cosine':>14} {'decoder cosine':>14} {'perplexity':>12}")
    print(f"{'none (as trained)':<24} {'1 (itself)':>14} {'1 (itself)':>14} {result['perplexity_kept']:>12.3f}")
    for name, row in result["conditions"].items():
        print(f"{name:<24} {row['encoder_cosine']:>14.4f} {row['decoder_cosine']:>14.4f} {row['perplexity']:>12.3f}")
    sticks = result["yardsticks"]
    print(f"yardsticks: cosine of N(0, I) vectors in {sticks['dim']} dimensions {sticks['random_mean']:.4f} "
          f"(std {sticks['random_std']:.4f}, {sticks['random_pairs']} pairs drawn); of two different tokens' "
          f"features as trained: encoder {sticks['encoder_other_token']:.4f}, decoder "
          f"{sticks['decoder_other_token']:.4f} ({result['tokens']} gold tokens)")
    if args.sinusoid_plot:
        plot_sinusoids(loaded.opt.src_word_vec_size, args.sinusoid_plot, enc_type=loaded.opt.position_encoding_type)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
