"""Fast Shaw and Music Transformer relative attention, fused attention for absolute
positions: against OpenNMT-py's own MultiHeadedAttention, against direct O(L^2 d)
computations, in incremental decoding, and through the stock onmt_* commands."""
import functools
import importlib.util
import itertools
import math
import re
import sys
import types

import onmt  # noqa: F401  (activates the extension)
import pyonmttok
import pytest
import torch
import built_models
from built_models import new_model
from conftest import REPO, TOY_ENDE, build_tiny_vocab, command, head, run, train_tiny
from onmt import model_builder
from onmt.bin.train import _get_parser
from onmt.constants import DefaultTokens
from onmt.decoders.transformer import TransformerDecoderLayer
from onmt.modules.multi_headed_attn import MultiHeadedAttention
from onmt.utils.misc import sequence_mask
from rounding import assert_matches

from onmt_posenc.model.options import resolve_attention_options
from onmt_posenc.model.attention import replacement_for
from onmt_posenc.model.attention.alibi import AlibiAttention
from onmt_posenc.model.attention.decaying_mask import DecayingMaskAttention
from onmt_posenc.model.attention.distance_tables import distance_sums
from onmt_posenc.model.attention.fire import FireAttention
from onmt_posenc.model.attention.kerple import KerpleLogAttention
from onmt_posenc.model.attention.music import MusicRelativeAttention, skew
from onmt_posenc.model.attention.rotary import RotaryAttention
from onmt_posenc.model.attention.self_attention import SelfAttention
from onmt_posenc.model.attention.shaw import ShawRelativeAttention
from onmt_posenc.model.attention.t5_buckets import T5BucketAttention

HEADS, DIM, FAR = 4, 32, 16
LENGTHS = [40, 27, 9]  # the longest is beyond FAR in both directions: clipping happens


def encoder_mask(lengths):
    """The mask TransformerEncoder gives its layers: padded keys hidden."""
    lengths = torch.tensor(lengths)
    mask = sequence_mask(lengths).unsqueeze(1).unsqueeze(1)
    return mask.expand(-1, -1, mask.size(3), -1)


def decoder_mask(lengths):
    """The mask TransformerDecoderLayer gives its self-attention: future and padding."""
    lengths = torch.tensor(lengths)
    tgt_pad_mask = sequence_mask(lengths).unsqueeze(1)
    layer = types.SimpleNamespace(sliding_window=0)
    mask = TransformerDecoderLayer._compute_dec_mask(layer, tgt_pad_mask, future=False).unsqueeze(1)
    return mask.expand(-1, -1, mask.size(3), -1)


SIDES = {"encoder": (False, encoder_mask), "decoder": (True, decoder_mask)}


def randomized(module, seed=0):
    """Non-trivial parameters (OpenNMT-py's skip_init leaves them uninitialized)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    return module


def forward_backward(module, x, mask, seed=1):
    """Output, attention, and the gradients of the input and of every parameter."""
    torch.manual_seed(seed)  # the same attention-dropout draws for every module
    x = x.clone().requires_grad_()
    out, attn = module(x, x, x, mask=mask)
    weights = torch.linspace(-1, 1, out.numel()).view_as(out)
    (out * weights).sum().backward()
    grads = {name: p.grad.clone() for name, p in module.named_parameters()}
    module.zero_grad()
    return out, attn, x.grad, grads


def assert_same(expected, actual):
    out_e, attn_e, dx_e, grads_e = expected
    out_a, attn_a, dx_a, grads_a = actual
    assert_matches(out_a, out_e)
    if attn_e is not None and attn_a is not None:
        assert_matches(attn_a, attn_e)
    assert_matches(dx_a, dx_e)
    assert grads_a.keys() == grads_e.keys()
    for name in grads_e:
        assert_matches(grads_a[name], grads_e[name], msg=name)


def inputs(lengths=LENGTHS, seed=2):
    return torch.randn(len(lengths), max(lengths), DIM, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("dropout", [0.0, 0.1])
@pytest.mark.parametrize("side", sorted(SIDES))
def test_shaw_matches_openmt_builtin(side, dropout):
    """Same parameters (names included: strict load) -> same outputs, attention
    weights and gradients as OpenNMT-py's (L, L, d) implementation."""
    is_decoder, mask_of = SIDES[side]
    stock = randomized(MultiHeadedAttention(HEADS, DIM, dropout=dropout, is_decoder=is_decoder,
                                            max_relative_positions=FAR, attn_type="self"))
    ours = ShawRelativeAttention(HEADS, DIM, FAR, dropout=dropout, is_decoder=is_decoder)
    ours.load_state_dict(stock.state_dict())
    x, mask = inputs(), mask_of(LENGTHS)
    assert_same(forward_backward(stock, x, mask), forward_backward(ours, x, mask))


# OpenNMT-py's own position schemes inside its attention: MultiHeadedAttention's options.
STOCK_SCHEMES = {
    "absolute": {},
    "rotary": {"max_relative_positions": -1},
    "rotary-halves": {"max_relative_positions": -1, "rotary_interleave": False},
    "rotary-partial": {"max_relative_positions": -1, "rotary_interleave": False, "rotary_dim": 4},
    "alibi": {"max_relative_positions": -2},
    "t5": {"max_relative_positions": 20, "relative_positions_buckets": 16},  # LENGTHS reach beyond 20
}


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("scheme", sorted(STOCK_SCHEMES))
@pytest.mark.parametrize("side", sorted(SIDES))
def test_stock_position_schemes_match_openmt(side, scheme, fused):
    """The module `install` puts in place of OpenNMT-py's (fused SDPA or plain path)
    computes OpenNMT-py's outputs and gradients for absolute positions, rotary,
    ALiBi and T5 buckets, with its parameters (names included: strict load)."""
    is_decoder, mask_of = SIDES[side]
    stock = randomized(MultiHeadedAttention(HEADS, DIM, dropout=0.0, is_decoder=is_decoder, attn_type="self",
                                            **STOCK_SCHEMES[scheme]))
    ours = replacement_for(stock, "scaled-dot-flash" if fused else "scaled-dot")
    assert type(ours) is not MultiHeadedAttention and ours.fused == fused
    ours.load_state_dict(stock.state_dict(), strict=True)
    x, mask = inputs(), mask_of(LENGTHS)
    assert_same(forward_backward(stock, x, mask), forward_backward(ours, x, mask))


def direct_attention(module, x, mask, key_term=None, value_term=None):
    """Attention written out pair by pair, O(L^2 d) memory.

    key_term / value_term: (heads or 1, L, L, d) relative embeddings a_ij per pair."""
    d = module.dim_per_head

    def split(linear):
        return linear(x).view(x.size(0), x.size(1), -1, d).transpose(1, 2)

    q, k, v = split(module.linear_query), split(module.linear_keys), split(module.linear_values)
    scores = q @ k.transpose(-1, -2)
    if key_term is not None:
        scores = scores + torch.einsum("bhid,hijd->bhij", q, key_term)
    scores = (scores / math.sqrt(d)).masked_fill(mask, float("-inf"))
    attn = scores.softmax(-1)
    context = attn @ v
    if value_term is not None:
        context = context + torch.einsum("bhij,hijd->bhid", attn, value_term)
    return module.final_linear(context.transpose(1, 2).reshape(x.shape))


def pair_distances(length):
    positions = torch.arange(length)
    return positions[None, :] - positions[:, None]  # j - i


@pytest.mark.parametrize("side", sorted(SIDES))
def test_shaw_separate_tables_match_direct_computation(side):
    is_decoder, mask_of = SIDES[side]
    module = randomized(ShawRelativeAttention(HEADS, DIM, FAR, dropout=0.0, is_decoder=is_decoder,
                                              values="separate"))
    x, mask = inputs(), mask_of(LENGTHS)
    bucket = pair_distances(x.size(1)).clamp(-FAR, FAR) + FAR
    a_k = module.relative_keys_embeddings.weight[bucket][None]
    a_v = module.relative_values_embeddings.weight[bucket][None]
    expected = direct_attention(module, x, mask, key_term=a_k, value_term=a_v)
    assert_matches(module(x, x, x, mask=mask)[0], expected)


@pytest.mark.parametrize("side", sorted(SIDES))
def test_shaw_keys_only_matches_direct_computation(side):
    """relative_values none: Shaw's key term, no value term (the perSPE paper's RPE)."""
    is_decoder, mask_of = SIDES[side]
    module = randomized(ShawRelativeAttention(HEADS, DIM, FAR, dropout=0.0, is_decoder=is_decoder, values="none"))
    assert [n for n, _ in module.named_parameters() if n.startswith("relative")] == ["relative_keys_embeddings.weight"]
    x, mask = inputs(), mask_of(LENGTHS)
    bucket = pair_distances(x.size(1)).clamp(-FAR, FAR) + FAR
    expected = direct_attention(module, x, mask, key_term=module.relative_keys_embeddings.weight[bucket][None])
    assert_matches(module(x, x, x, mask=mask)[0], expected)


def decaying_ramp(length, n, i, j, causal):
    """Seed 003's ramp for one pair, written out: 1 at the query's own token, 0.1 at the
    farthest token it sees (causal: the first; else either end of the n tokens), 0 unseen."""
    if causal:
        return 0.0 if j > i else 1.0 if i == 0 else 0.1 + 0.9 * j / i
    return 0.0 if j >= n else 1 - 0.9 * abs(i - j) / max(i, n - 1 - i, 1)


@pytest.mark.parametrize("side", sorted(SIDES))
def test_decaying_mask_matches_direct_computation(side):
    """softmax weights times the ramp, not renormalized; the mask row of the slides."""
    is_decoder, mask_of = SIDES[side]
    module = randomized(DecayingMaskAttention(HEADS, DIM, dropout=0.0, is_decoder=is_decoder))
    x, mask = inputs(), mask_of(LENGTHS)
    length = x.size(1)
    ramps = torch.tensor([[[decaying_ramp(length, n, i, j, is_decoder) for j in range(length)]
                           for i in range(length)] for n in LENGTHS])[:, None]
    d = module.dim_per_head

    def split(linear):
        return linear(x).view(x.size(0), length, -1, d).transpose(1, 2)

    q, k, v = split(module.linear_query), split(module.linear_keys), split(module.linear_values)
    weights = (q @ k.transpose(-1, -2) / math.sqrt(d)).masked_fill(mask, float("-inf")).softmax(-1)
    context = (weights * ramps) @ v
    expected = module.final_linear(context.transpose(1, 2).reshape(x.shape))
    out, attn = module(x, x, x, mask=mask)
    assert_matches(out, expected)
    if is_decoder:  # the third token's row: [0.1, 0.55, 1, 0, ...] of its weights
        assert ramps[0, 0, 2, :4].tolist() == pytest.approx([0.1, 0.55, 1.0, 0.0])
        assert_matches(attn[0, :, 2, :3], weights[0, :, 2, :3] * torch.tensor([0.1, 0.55, 1.0]))


@pytest.mark.parametrize("far", [FAR, 64])  # clipped, and every distance its own embedding
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("side", sorted(SIDES))
def test_music_matches_direct_computation(side, fused, far):
    """Skewed Q E^T (2L-1 form in the encoder, causal form in the decoder) equals
    q_i . E[j - i] computed for every pair; so do the gradients of E."""
    is_decoder, mask_of = SIDES[side]
    module = randomized(MusicRelativeAttention(HEADS, DIM, far, dropout=0.0, is_decoder=is_decoder, fused=fused))
    x, mask = inputs(), mask_of(LENGTHS)
    table = module.relative_key_embeddings  # (heads, distances, d), row r = distance r - far
    assert table.shape == (HEADS, far + 1 + (0 if is_decoder else far), DIM // HEADS)
    # Future distances are masked in the decoder; clipping them to 0 is harmless.
    distance = pair_distances(x.size(1)).clamp(-far, 0 if is_decoder else far)
    expected = direct_attention(module, x, mask, key_term=table[:, distance + far])
    weights = torch.linspace(-1, 1, expected.numel()).view_as(expected)
    (expected_table_grad,) = torch.autograd.grad((expected * weights).sum(), table)
    out, attn = module(x, x, x, mask=mask)
    (table_grad,) = torch.autograd.grad((out * weights).sum(), table)
    assert_matches(out, expected)
    assert_matches(table_grad, expected_table_grad)
    assert (attn is None) == fused


def test_music_single_position():
    """One target position: a single distance (0) in the causal form."""
    module = randomized(MusicRelativeAttention(HEADS, DIM, FAR, dropout=0.0))
    x, mask = inputs([1]), decoder_mask([1])
    table = module.relative_key_embeddings
    expected = direct_attention(module, x, mask, key_term=table[:, FAR : FAR + 1, None])
    out, _ = module(x, x, x, mask=mask)
    assert_matches(out, expected)
    grads = [torch.autograd.grad(y.sum(), table)[0] for y in (out, expected)]
    assert_matches(grads[0], grads[1])


@pytest.mark.parametrize("query_len, key_len, causal", [(5, 5, True), (5, 5, False), (1, 7, True), (3, 7, True)])
def test_skew_places_distance_columns(query_len, key_len, causal):
    """Entry (i, j) of the skewed logits is the column of distance j - i, queries
    being the last query_len of key_len positions."""
    width = key_len if causal else key_len + query_len - 1
    logits = torch.randn(2, query_len, width)  # column c: distance c - (key_len - 1)
    padded = torch.cat([torch.full((2, query_len, 1), float("nan")), logits], dim=-1)
    skewed = skew(padded, key_len)
    assert skewed.shape == (2, query_len, key_len)
    for i in range(query_len):
        for j in range(key_len):
            distance = j - (key_len - query_len + i)
            if causal and distance > 0:
                continue  # the future: masked by the decoder
            assert torch.equal(skewed[:, i, j], logits[:, i, distance + key_len - 1])


@pytest.mark.parametrize("query_len, key_len, lo, hi", [
    (40, 40, -16, 16), (7, 7, -16, 16), (1, 50, -16, 16), (3, 50, -16, 0), (30, 30, -29, 29), (1, 1, 0, 0),
])
def test_distance_sums_match_scatter(query_len, key_len, lo, hi):
    """Per-distance sums (Shaw's value term, and the adjoint of the key term)
    equal a plain scatter-add over every pair."""
    pairs = torch.rand(2, 3, query_len, key_len, dtype=torch.float64)
    distance = (torch.arange(key_len)[None, :] - torch.arange(key_len - query_len, key_len)[:, None]).clamp(lo, hi)
    expected = pairs.new_zeros(2, 3, query_len, hi - lo + 1).scatter_add_(-1, (distance - lo).expand_as(pairs), pairs)
    torch.testing.assert_close(distance_sums(pairs, lo, hi), expected)


@pytest.mark.parametrize("name", ["shaw", "shaw-separate", "music-fused", "music-plain"])
def test_mixed_precision(name):
    """Under autocast (bfloat16 on CPU, as float16 on a GPU) the tables stay
    float32, get float32 gradients, and the result follows float32's."""
    module = randomized(DECODERS[name]())
    x, mask = inputs(), decoder_mask(LENGTHS)
    expected = module(x, x, x, mask=mask)[0]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = module(x, x, x, mask=mask)[0]
    assert out.dtype == torch.bfloat16
    out.float().sum().backward()
    for name, parameter in module.named_parameters():
        assert parameter.grad.dtype == torch.float32 and parameter.grad.isfinite().all(), name
    assert_matches(out.float(), expected, rounding=torch.bfloat16, eps_multiple=8)


DECODERS = {
    "fused": lambda: SelfAttention(HEADS, DIM, dropout=0.0, fused=True),
    "plain": lambda: SelfAttention(HEADS, DIM, dropout=0.0, fused=False),
    "shaw": lambda: ShawRelativeAttention(HEADS, DIM, FAR, dropout=0.0),
    "shaw-separate": lambda: ShawRelativeAttention(HEADS, DIM, FAR, dropout=0.0, values="separate"),
    "shaw-keys": lambda: ShawRelativeAttention(HEADS, DIM, FAR, dropout=0.0, values="none"),
    "decay": lambda: DecayingMaskAttention(HEADS, DIM, dropout=0.0),
    "music-fused": lambda: MusicRelativeAttention(HEADS, DIM, FAR, dropout=0.0, fused=True),
    "music-plain": lambda: MusicRelativeAttention(HEADS, DIM, FAR, dropout=0.0, fused=False),
    "rotary": lambda: RotaryAttention(HEADS, DIM, DIM // HEADS, rotary_interleave=True, rotary_theta=1e4, dropout=0.0),
    "alibi": lambda: AlibiAttention(HEADS, DIM, dropout=0.0),
    "t5": lambda: T5BucketAttention(HEADS, DIM, buckets=16, max_distance=FAR, dropout=0.0),
    "kerple": lambda: KerpleLogAttention(HEADS, DIM, dropout=0.0),
    "fire": lambda: FireAttention(HEADS, DIM, dropout=0.0),
}


@pytest.mark.parametrize("name", sorted(DECODERS))
def test_incremental_decoding_matches_full_forward(name):
    """Step by step with the layer cache (as onmt_translate decodes) equals one
    causal forward pass, also beyond the clipping distance."""
    module = randomized(DECODERS[name]()).eval()
    length = FAR + 8
    x = inputs([length, length])
    full, _ = module(x, x, x, mask=decoder_mask([length, length]))
    module.layer_cache = (True, {"keys": torch.tensor([]), "values": torch.tensor([])})
    steps = [module(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], step=t)[0] for t in range(length)]
    assert_matches(torch.cat(steps, dim=1), full)
    assert module.layer_cache[1]["keys"].shape == (2, HEADS, length, DIM // HEADS)


model_options = functools.partial(built_models.model_options, dim=DIM, heads=HEADS)


@pytest.fixture(scope="module")
def vocabs():
    specials = [DefaultTokens.UNK, DefaultTokens.PAD, DefaultTokens.BOS, DefaultTokens.EOS]
    vocab = pyonmttok.build_vocab_from_tokens([f"w{i}" for i in range(40)], special_tokens=specials)
    return {"src": vocab, "tgt": vocab, "data_task": "seq2seq", "decoder_start_token": DefaultTokens.BOS}


def self_attentions(model):
    return [layer.self_attn for layer in list(model.encoder.transformer) + list(model.decoder.transformer_layers)]


def stock_model(opt, vocabs):
    """The model OpenNMT-py alone builds from these options."""
    return model_builder.build_task_specific_model.__wrapped__(opt, vocabs)


def test_built_model_keeps_openmt_parameters_and_outputs(vocabs):
    """onmt's model builder now makes our Shaw attention, with OpenNMT-py's parameter
    names, shapes and order; loaded with the stock model's weights it computes
    the stock model's output."""
    opt = model_options("-max_relative_positions", str(FAR))
    ours = model_builder.build_base_model(opt, vocabs)
    del ours.generator
    stock = randomized(stock_model(opt, vocabs))
    assert all(type(a) is ShawRelativeAttention for a in self_attentions(ours))
    assert all(type(layer.context_attn) is MultiHeadedAttention for layer in ours.decoder.transformer_layers)
    assert [(n, p.shape) for n, p in ours.named_parameters()] == [(n, p.shape) for n, p in stock.named_parameters()]
    # OpenNMT-py's checkpoint loader, strict: every name must match both ways
    ours.load_state_dict({"model": dict(stock.state_dict()), "generator": {}}, strict=True)
    lengths = torch.tensor([30, 21])
    src = torch.randint(4, 40, (2, 30, 1), generator=torch.Generator().manual_seed(0))
    tgt = torch.randint(4, 40, (2, 25, 1), generator=torch.Generator().manual_seed(1))
    stock.eval(), ours.eval()
    expected, _ = stock(src, tgt, lengths)
    actual, _ = ours(src, tgt, lengths)
    assert_matches(actual, expected)


def test_same_seed_initializes_like_openmt(vocabs, monkeypatch):
    """Swapping attention draws no random numbers: a seeded build initializes every
    parameter as OpenNMT-py alone does, so training runs are comparable."""
    opt = model_options("-max_relative_positions", str(FAR), "-param_init", "0.1")
    ours = new_model(opt, vocabs)
    monkeypatch.setattr(model_builder, "build_task_specific_model", model_builder.build_task_specific_model.__wrapped__)
    stock = new_model(opt, vocabs)
    assert type(self_attentions(stock)[0]) is MultiHeadedAttention
    for (name, expected), (_, actual) in zip(stock.named_parameters(), ours.named_parameters()):
        assert torch.equal(actual, expected), name


def music_tables(state):
    return {name: tensor for name, tensor in state.items() if name.endswith("relative_key_embeddings")}


def assert_drawn_per_layer(tables, d_head):
    """The 2 + 2 layers' Music distance tables: each its own draw, at the reference
    std d_head**-0.5, whatever OpenNMT-py's param_init (a few training steps leave both visible)."""
    assert len(tables) == 4
    for name, table in tables.items():
        assert table.std().item() == pytest.approx(d_head**-0.5, rel=0.1), name
    for (name_a, a), (name_b, b) in itertools.combinations(tables.items(), 2):
        # Same draws (or a copy trained a few steps) correlate near 1, independent draws near 0.
        n = min(a.numel(), b.numel())
        correlation = torch.corrcoef(torch.stack((a.flatten()[:n], b.flatten()[:n])))[0, 1]
        assert abs(correlation) < 0.3, (name_a, name_b)


@pytest.mark.parametrize("init", [["-param_init", "0.1"], ["-param_init", "0", "-param_init_glorot"]])
def test_music_tables_initialized_per_layer(vocabs, init):
    opt = model_options("-max_relative_positions", str(FAR), "-relative_attention", "music", *init)
    assert_drawn_per_layer(music_tables(new_model(opt, vocabs).state_dict()), DIM // HEADS)


@pytest.mark.parametrize(
    "args, kind, names",
    [
        ([], SelfAttention, []),
        (["-max_relative_positions", "8", "-relative_values", "separate"], ShawRelativeAttention,
         ["relative_keys_embeddings.weight", "relative_values_embeddings.weight"]),
        (["-max_relative_positions", "8", "-relative_attention", "music"], MusicRelativeAttention,
         ["relative_key_embeddings"]),
        (["-max_relative_positions", "-1"], RotaryAttention, []),
        (["-max_relative_positions", "-2"], AlibiAttention, []),
        (["-max_relative_positions", "32", "-relative_positions_buckets", "8"], T5BucketAttention,
         ["relative_attention_bias.weight"]),
        (["-max_relative_positions", "8", "-relative_values", "none"], ShawRelativeAttention,
         ["relative_keys_embeddings.weight"]),
        (["-relative_attention", "decay"], DecayingMaskAttention, []),
        (["-relative_attention", "kerple"], KerpleLogAttention, ["kerple_r1", "kerple_r2"]),
        (["-relative_attention", "fire"], FireAttention, ["fire_c", "fire_threshold_scale", "fire_mlp.0.weight",
                                                          "fire_mlp.0.bias", "fire_mlp.2.weight", "fire_mlp.2.bias"]),
    ],
)
def test_builder_installs_the_chosen_attention(vocabs, args, kind, names):
    model = model_builder.build_base_model(model_options(*args), vocabs)
    for attention in self_attentions(model):
        assert type(attention) is kind
        own = [n for n, _ in attention.named_parameters() if not n.startswith(("linear_", "final_linear"))]
        assert own == names
        # Shaw's value term and the decaying mask need the weights: the plain path
        assert attention.fused == (kind not in (ShawRelativeAttention, DecayingMaskAttention))


@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_relative_attention_on_one_side_matches_openmt_on_each_side(vocabs, side):
    """relative_positions_side: the chosen side computes OpenNMT-py's Shaw attention, the
    other OpenNMT-py's attention without positions, each with the stock model's weights."""
    shaw_opt = model_options("-max_relative_positions", str(FAR))
    plain_opt = model_options()
    ours = model_builder.build_base_model(model_options(
        "-max_relative_positions", str(FAR), "-relative_positions_side", side), vocabs)
    encoder_kind, decoder_kind = ((ShawRelativeAttention, SelfAttention) if side == "encoder"
                                  else (SelfAttention, ShawRelativeAttention))
    assert all(type(layer.self_attn) is encoder_kind for layer in ours.encoder.transformer)
    assert all(type(layer.self_attn) is decoder_kind for layer in ours.decoder.transformer_layers)
    stock_shaw, stock_plain = randomized(stock_model(shaw_opt, vocabs)), randomized(stock_model(plain_opt, vocabs), 1)
    encoder_from, decoder_from = (stock_shaw, stock_plain) if side == "encoder" else (stock_plain, stock_shaw)
    ours.encoder.load_state_dict(encoder_from.encoder.state_dict(), strict=True)
    ours.decoder.load_state_dict(decoder_from.decoder.state_dict(), strict=True)
    for model in (ours, stock_shaw, stock_plain):
        model.eval()
    src = torch.randint(4, 40, (2, 30, 1), generator=torch.Generator().manual_seed(0))
    tgt = torch.randint(4, 40, (2, 25, 1), generator=torch.Generator().manual_seed(1))
    lengths = torch.tensor([30, 21])
    with torch.no_grad():
        enc_out, enc_final, _ = ours.encoder(src, lengths)
        assert_matches(enc_out, encoder_from.encoder(src, lengths)[0])
        ours.decoder.init_state(src, enc_out, enc_final)
        decoder_from.decoder.init_state(src, enc_out, enc_final)
        assert_matches(ours.decoder(tgt, enc_out, src_len=lengths)[0],
                       decoder_from.decoder(tgt, enc_out, src_len=lengths)[0])


def test_plain_path_follows_self_attn_type(vocabs):
    model = model_builder.build_base_model(model_options("-self_attn_type", "scaled-dot"), vocabs)
    assert not any(attention.fused for attention in self_attentions(model))


def test_unsupported_configuration_keeps_stock_or_fails_clearly(vocabs):
    shaw = model_builder.build_base_model(model_options("-max_relative_positions", "8", "-num_kv", "2"), vocabs)
    assert all(type(a) is MultiHeadedAttention for a in self_attentions(shaw))  # correct, only slower
    with pytest.raises(ValueError, match="num_kv"):
        model_builder.build_base_model(
            model_options("-max_relative_positions", "8", "-relative_attention", "music", "-num_kv", "2"), vocabs
        )


def options(**values):
    defaults = dict(max_relative_positions=0, relative_attention=None, relative_values=None,
                    full_context_alignment=False)
    return types.SimpleNamespace(**{**defaults, **values})


def test_option_defaults():
    assert resolve_attention_options(options(max_relative_positions=16)).relative_attention == "shaw"
    assert resolve_attention_options(options(max_relative_positions=16)).relative_values == "shared"
    music = resolve_attention_options(options(max_relative_positions=16, relative_attention="music"))
    assert music.relative_values is None
    assert resolve_attention_options(options()).relative_attention is None
    # T5 buckets: max_relative_positions is their max distance, not Shaw's clipping; Shaw's
    # options, which OpenNMT-py ignores under T5 (and T5 checkpoints made here before
    # 2026-11-24 carry as defaults), are cleared
    for shaw in ({}, dict(relative_attention="shaw", relative_values="shared")):
        t5 = resolve_attention_options(options(max_relative_positions=128, relative_positions_buckets=32, **shaw))
        assert t5.relative_attention is None and t5.relative_values is None
    # heads must divide the model dimension of a Transformer side only (RNNs have no heads)
    rnn = dict(encoder_type="rnn", decoder_type="rnn", hidden_size=-1, enc_hid_size=500, dec_hid_size=500, heads=8)
    assert resolve_attention_options(options(**rnn))


@pytest.mark.parametrize(
    "values, message",
    [
        (dict(relative_attention="music"), "relative_attention music needs max_relative_positions > 0, the distance"),
        (dict(relative_values="separate"), "relative_values is set but max_relative_positions"),
        (dict(max_relative_positions=16, relative_attention="music", relative_values="shared"),
         "relative_values applies to relative_attention shaw only"),
        (dict(max_relative_positions=16, relative_attention="music", full_context_alignment=True),
         "full_context_alignment"),
        (dict(max_relative_positions=128, relative_positions_buckets=32, relative_attention="music"),
         "relative_attention music is set but relative_positions_buckets chooses T5's bias"),
        (dict(max_relative_positions=-1, relative_positions_buckets=32),
         "relative_positions_buckets needs max_relative_positions >= 0, T5's max distance"),
        (dict(max_relative_positions=-3), "max_relative_positions must be >= -2"),
        (dict(relative_positions_side="encoder"), "relative_positions_side encoder is set but no positions"),
        (dict(relative_attention="decay", max_relative_positions=8), "relative_attention decay takes no distance"),
        (dict(relative_attention="decay", relative_values="none"), "relative_values applies to relative_attention"),
        (dict(relative_attention="decay", relative_positions_side="decoder", tgt_position_encoding="sinusoidal"),
         "decay on the decoder with tgt_position_encoding sinusoidal: the decaying mask stands in for positions"),
        (dict(encoder_type="transformer", decoder_type="rnn", hidden_size=-1, enc_hid_size=500, heads=8),
         "heads 8 does not divide enc_hid_size 500: each head takes enc_hid_size / heads"),
    ],
)
def test_option_errors(values, message):
    with pytest.raises(ValueError, match=message):
        resolve_attention_options(options(**values))


@pytest.mark.parametrize("recipe, values", [
    ("music.yaml", dict(relative_attention="music", max_relative_positions=16, position_encoding=False)),
    ("rpe_separate.yaml", dict(relative_values="separate", max_relative_positions=16, position_encoding=False)),
])
def test_recipes(recipe, values):
    opt, _ = _get_parser().parse_known_args(["-config", str(REPO / "recipes" / recipe)])
    for key, value in values.items():
        assert getattr(opt, key) == value
    assert opt.save_model == f"runs/{recipe[:-5]}/model"


# --- the stock commands ----------------------------------------------------------

STEPS = 10


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    workdir = build_tiny_vocab(tmp_path_factory.mktemp("relative"))
    head(TOY_ENDE / "src-test.txt", workdir / "test.src", 20)
    return workdir


def train(workdir, name, env=None, **overrides):
    settings = dict(train_steps=STEPS, report_every=5, position_encoding=False, max_relative_positions=FAR)
    result = train_tiny(workdir, name, env, **{**settings, **overrides})
    return workdir / f"{name}_step_{STEPS}.pt", result.stdout + result.stderr


def translate(workdir, model):
    output = workdir / f"{model.stem}.hyp"
    run([command("onmt_translate"), "-model", model, "-src", workdir / "test.src", "-output", output,
         "-beam_size", "2", "-max_length", "30"])
    lines = output.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 20 and any(lines)
    return lines


@pytest.fixture(scope="module")
def stock_shaw(workdir):
    """OpenNMT-py's own Shaw RPE training, the extension switched off."""
    return train(workdir, "stock", env={"ONMT_POSENC": "off"})


@pytest.fixture(scope="module")
def our_shaw(workdir):
    return train(workdir, "shaw")


def logged_losses(log):
    return [float(x) for x in re.findall(r"xent: ([0-9.]+)", log)]


def test_train_and_translate_shaw(workdir, our_shaw):
    checkpoint, log = our_shaw
    assert "ShawRelativeAttention" in log
    model = torch.load(checkpoint)["model"]
    assert "encoder.transformer.0.self_attn.relative_positions_embeddings.weight" in model
    translate(workdir, checkpoint)


def test_openmt_shaw_checkpoint_translates_with_extension(workdir, stock_shaw):
    """A checkpoint trained by OpenNMT-py alone loads into our attention as is."""
    checkpoint, log = stock_shaw
    assert "ShawRelativeAttention" not in log
    translate(workdir, checkpoint)


def test_training_with_our_shaw_reproduces_openmt(stock_shaw, our_shaw):
    """Same seed and data: our attention (which draws the same dropout masks)
    follows OpenNMT-py's training to the logged precision."""
    expected, actual = logged_losses(stock_shaw[1]), logged_losses(our_shaw[1])
    assert len(expected) == STEPS // 5
    assert actual == expected


STOCK_COMMAND_SCHEMES = {
    "rotary": ("RotaryAttention", {"max_relative_positions": -1}),
    "alibi": ("AlibiAttention", {"max_relative_positions": -2}),
    "t5": ("T5BucketAttention", {"max_relative_positions": 32, "relative_positions_buckets": 16}),
}


@pytest.mark.parametrize("scheme", sorted(STOCK_COMMAND_SCHEMES))
def test_training_with_fast_stock_schemes_reproduces_openmt(workdir, scheme):
    """onmt_train with rotary, ALiBi or T5 buckets: our fused layers follow OpenNMT-py's
    training to the logged precision (no attention dropout: SDPA draws its own
    masks), and the checkpoint translates."""
    kind, values = STOCK_COMMAND_SCHEMES[scheme]
    settings = dict(values, attention_dropout=[0.0])
    stock_checkpoint, stock_log = train(workdir, f"stock_{scheme}", env={"ONMT_POSENC": "off"}, **settings)
    checkpoint, log = train(workdir, scheme, **settings)
    assert kind in log and kind not in stock_log
    assert logged_losses(log) == logged_losses(stock_log)
    assert translate(workdir, checkpoint) == translate(workdir, stock_checkpoint)


def test_train_and_translate_music(workdir):
    checkpoint, log = train(workdir, "music", relative_attention="music")
    assert "MusicRelativeAttention" in log
    model = torch.load(checkpoint)["model"]
    assert model["decoder.transformer_layers.0.self_attn.relative_key_embeddings"].shape == (HEADS, FAR + 1, 16)
    assert model["encoder.transformer.0.self_attn.relative_key_embeddings"].shape == (HEADS, 2 * FAR + 1, 16)
    assert torch.load(checkpoint)["opt"].relative_attention == "music"
    translate(workdir, checkpoint)


@pytest.mark.parametrize("name, keys, kinds", [
    # SPE in the encoder, the decaying mask without positions in the decoder (seed 003)
    ("decay_decoder", dict(position_encoding=True, max_relative_positions=0, relative_attention="decay",
                           relative_positions_side="decoder", tgt_position_encoding="none"),
     ("DecayingMaskAttention", "SelfAttention")),
    # the perSPE paper's RPE (keys only) in the encoder, nothing in the decoder (Table 1's RPE/none)
    ("rpe_keys_encoder", dict(relative_values="none", relative_positions_side="encoder"),
     ("ShawRelativeAttention", "SelfAttention")),
])
def test_train_and_translate_with_positions_in_one_side(workdir, name, keys, kinds):
    checkpoint, log = train(workdir, name, **keys)
    for kind in kinds:
        assert kind in log
    opt = torch.load(checkpoint)["opt"]
    assert opt.relative_positions_side == keys["relative_positions_side"]
    translate(workdir, checkpoint)


def test_train_initializes_music_tables_per_layer(workdir):
    """With the recipes' initialization: glorot, which OpenNMT-py applies to `weight`s only."""
    checkpoint, _ = train(workdir, "music_glorot", relative_attention="music", param_init=0, param_init_glorot=True)
    assert_drawn_per_layer(music_tables(torch.load(checkpoint)["model"]), d_head=16)


# --- the benchmark script --------------------------------------------------------

def test_benchmark_runs_and_prints_ratio_tables(tmp_path):
    result = run([sys.executable, REPO / "tools" / "benchmark_attention.py", "--parts", "layer", "model",
                  "--lengths", "8", "24", "--tokens", "48", "--d-model", "32", "--heads", "4", "--model-dim", "32",
                  "--model-layers", "1", "--model-heads", "4", "--vocab", "50", "--repeats", "1", "--threads", "1"])
    tables = result.stdout
    for title in ("Layer, fp32, fastest path: ms", "Layer, fp32, plain path: peak MiB", "Model, fp32, plain path: ms"):
        assert title in tables

    def first_row(name):  # (ms, ratio) per length, from the first table (layer, fastest path: ms)
        row = re.search(rf"^\| {re.escape(name)} \| (.*) \|$", tables, re.M).group(1)
        return [tuple(map(float, re.fullmatch(r"([0-9.]+) \(x([0-9.]+)\)", cell).groups())) for cell in row.split(" | ")]

    # A speed ratio is APE's time over the row's, both printed rounded (0.05 ms, 0.005).
    for (ape_ms, _), (ms, ratio) in zip(first_row("APE / SHAPE / none"), first_row("our shaw"), strict=True):
        assert abs(ratio * ms - ape_ms) <= 0.05 * (1 + ratio) + 0.005 * ms


def test_benchmark_joins_ten_pairs_like_interpolate():
    spec = importlib.util.spec_from_file_location("benchmark_attention", REPO / "tools" / "benchmark_attention.py")
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    src = (TOY_ENDE / "src-train.txt").read_text(encoding="utf-8").split("\n")[:20]
    tgt = (TOY_ENDE / "tgt-train.txt").read_text(encoding="utf-8").split("\n")[:20]
    joined = benchmark.join_pairs(src, tgt)
    assert len(joined) == 2
    for (joined_src, joined_tgt), start in zip(joined, (0, 10)):
        for line, sentences in ((joined_src, src), (joined_tgt, tgt)):
            assert "  " not in line  # line 5 of the source is empty: still no empty token
            parts = " ".join(line.split(" ")).replace("<sep>", "\n").split("\n")
            assert [part.split() for part in parts] == [s.split() for s in sentences[start : start + 10]]


def test_a_decoders_causal_flag_computes_its_rows_that_are_not_padding_alike():
    """On CUDA a decoder's whole-sequence mask becomes SDPA's causal flag (`sdpa_mask`, for its
    flash backend): right padding comes after every token, so a row that is not padding sees
    exactly its past either way. Checked here on the CPU's SDPA, every row of every sequence."""
    q, k, v = (torch.randn(3, HEADS, max(LENGTHS), DIM // HEADS, generator=torch.Generator().manual_seed(i))
               for i in range(3))
    hidden = decoder_mask(LENGTHS)
    masked = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=~hidden)
    causal = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    for sequence, length in enumerate(LENGTHS):
        torch.testing.assert_close(causal[sequence, :, :length], masked[sequence, :, :length])
    assert not torch.allclose(causal[2, :, LENGTHS[2]:], masked[2, :, LENGTHS[2]:])  # padding rows differ


def test_sdpa_says_its_backend_once_a_kind(caplog, monkeypatch):
    """The log says which backend PyTorch's SDPA takes, once for each kind of call (side,
    queries, dtype, device, head size, mask, dropout); where PyTorch's private choice function
    fails, it says so and the forward goes on."""
    from onmt_posenc.model.attention import self_attention

    monkeypatch.setattr(self_attention, "SDPA_LOGGED", set())
    stock = randomized(MultiHeadedAttention(HEADS, DIM, dropout=0.0, is_decoder=False, attn_type="self"))
    ours = replacement_for(stock, "scaled-dot-flash")
    q, k, v = (torch.randn(3, HEADS, max(LENGTHS), DIM // HEADS) for _ in range(3))
    with caplog.at_level("INFO"):
        for _ in range(2):
            ours.attend(q, k, v, encoder_mask(LENGTHS), return_attn=False)
        ours.attend(q[:, :, :1], k, v, None, return_attn=False)
    said = [record.getMessage() for record in caplog.records if "PyTorch's SDPA" in record.getMessage()]
    assert len(said) == 2, said
    assert re.fullmatch(r"onmt-posenc self-attention on PyTorch's SDPA \(encoder, whole sequence, float32, cpu, "
                        rf"d_head {DIM // HEADS}, boolean mask\): \w+ backend", said[0]), said[0]
    assert "(encoder, one query, float32, cpu" in said[1] and "no mask" in said[1]

    def failing(*args, **kwargs):
        raise RuntimeError("changed in this release")

    monkeypatch.setattr(torch, "_fused_sdp_choice", failing)
    monkeypatch.setattr(self_attention, "SDPA_LOGGED", set())
    caplog.clear()
    with caplog.at_level("INFO"):
        context, _ = ours.attend(q, k, v, encoder_mask(LENGTHS), return_attn=False)
    assert context.shape == q.shape
    assert any("not known (RuntimeError from torch._fused_sdp_choice) backend" in r.getMessage() for r in caplog.records)
