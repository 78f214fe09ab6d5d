"""The methods proposed for length generalization since 2022: FIRE and KERPLE-log against
their papers' formulas written out pair by pair (outputs and gradients), in OpenNMT-py's
builder, and through onmt_train and onmt_translate."""
import math

import onmt  # noqa: F401  (activates the extension)
import built_models
import pyonmttok
import pytest
import torch
from onmt.constants import DefaultTokens
from conftest import TOY_ENDE, build_tiny_vocab, command, head, run, train_tiny
from rounding import assert_matches
from test_relative_attention import LENGTHS, SIDES, inputs

from onmt_posenc.model.attention.fire import EPS, FireAttention
from onmt_posenc.model.attention.kerple import SMALLEST_PARAMETER, KerpleLogAttention

HEADS, DIM = 4, 32
SPECIALS = [DefaultTokens.UNK, DefaultTokens.PAD, DefaultTokens.BOS, DefaultTokens.EOS]


def split_heads(module, x, linear):
    return linear(x).view(x.size(0), x.size(1), -1, module.dim_per_head).transpose(1, 2)


def attention_with_bias(module, x, mask, bias):
    """softmax(q k^T / sqrt(d) + bias) v through the module's projections; bias (heads, L, L)."""
    q, k, v = (split_heads(module, x, linear) for linear in (module.linear_query, module.linear_keys,
                                                             module.linear_values))
    scores = (q @ k.transpose(-1, -2) / math.sqrt(module.dim_per_head) + bias[None]).masked_fill(mask, float("-inf"))
    context = scores.softmax(-1) @ v
    return module.final_linear(context.transpose(1, 2).reshape(x.shape))


def kerple_bias(r1, r2, length):
    """Chi et al. (2022), eq. 7: -r1 log(1 + r2 |m - n|), for each head and pair, r clamped at 0.01."""
    r1, r2 = r1.clamp(min=SMALLEST_PARAMETER), r2.clamp(min=SMALLEST_PARAMETER)
    return torch.stack([torch.stack([torch.stack([-r1[h] * torch.log(1 + r2[h] * abs(m - n)) for n in range(length)])
                                     for m in range(length)]) for h in range(len(r1))])


def fire_input(c, threshold, i, j):
    """Li et al. (2024): psi(i - j) / psi(max(L, i)), psi(x) = log(c x + 1), for a key at or
    before the query; the encoder's signed form, normalized by max(L, i, j), for one after it."""
    psi = lambda x: torch.log(torch.abs(c * x) + 1)  # noqa: E731
    if j <= i:
        return psi(torch.tensor(float(i - j))) / (psi(torch.maximum(threshold, torch.tensor(float(i)))) + EPS)
    return -psi(torch.tensor(float(j - i))) / (psi(torch.maximum(threshold, torch.tensor(float(j)))) + EPS)


def fire_bias(module, length):
    """f_theta of every pair's input, the MLP written out: W2 relu(W1 x + b1) + b2, (heads, L, L)."""
    first, second = module.fire_mlp[0], module.fire_mlp[2]
    threshold = torch.abs(module.fire_threshold_scale * 512)
    rows = []
    for i in range(length):
        row = []
        for j in range(length):
            x = fire_input(module.fire_c, threshold, i, j)
            hidden = torch.relu(first.weight[:, 0] * x + first.bias)
            row.append(second.weight @ hidden + second.bias)
        rows.append(torch.stack(row))
    return torch.stack(rows).permute(2, 0, 1)


def weighted_sum(out):
    return (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum()


def assert_matches_formula(module, x, mask, expected_bias, shift_invariant=()):
    """The module's output and the gradients of every parameter against the formula's.

    `shift_invariant`: parameters that add one constant to every logit of a head (FIRE's last
    bias), under which the softmax does not change: their gradient is 0, and both computations
    give its rounding, at most a few eps of the sum of the |terms| it adds up (the bias's
    gradients per pair)."""
    parameters = dict(module.named_parameters())
    expected = attention_with_bias(module, x, mask, expected_bias)
    expected_grads = torch.autograd.grad(weighted_sum(expected), [*parameters.values(), expected_bias])
    out, _ = module(x, x, x, mask=mask)
    grads = torch.autograd.grad(weighted_sum(out), list(parameters.values()))
    assert_matches(out, expected)
    per_pair = expected_grads[-1].abs().sum((1, 2))  # (heads,)
    for name, grad, expected_grad in zip(parameters, grads, expected_grads):
        if name in shift_invariant:
            bound = 64 * torch.finfo(grad.dtype).eps * per_pair
            assert (grad.abs() <= bound).all() and (expected_grad.abs() <= bound).all(), name
        else:
            assert_matches(grad, expected_grad, msg=name)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("side", sorted(SIDES))
def test_kerple_matches_its_formula(side, fused):
    is_decoder, mask_of = SIDES[side]
    torch.manual_seed(3)
    module = KerpleLogAttention(HEADS, DIM, dropout=0.0, is_decoder=is_decoder, fused=fused).eval()
    with torch.no_grad():  # one head below the paper's floor: read at 0.01
        module.kerple_r2[1] = -0.3
    x, mask = inputs(), mask_of(LENGTHS)
    assert_matches_formula(module, x, mask, kerple_bias(module.kerple_r1, module.kerple_r2, x.size(1)))


def test_kerple_starts_and_stays_positive():
    """The paper's start (r1 in (0, 2), r2 in (0, 1)) and its projection in every training forward."""
    module = KerpleLogAttention(64, 128, dropout=0.0)
    assert 0 < module.kerple_r1.min() and module.kerple_r1.max() < 2 and module.kerple_r1.std() > 0.3
    assert 0 < module.kerple_r2.min() and module.kerple_r2.max() < 1 and module.kerple_r2.std() > 0.15
    with torch.no_grad():
        module.kerple_r1.fill_(-1.0)
    x = torch.randn(1, 5, 128)
    module.eval()(x, x, x)
    assert (module.kerple_r1 == -1.0).all()  # evaluation writes no parameter
    module.train()(x, x, x)
    assert (module.kerple_r1 == SMALLEST_PARAMETER).all()


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("side", sorted(SIDES))
def test_fire_matches_its_formula(side, fused):
    """Outputs and the gradients of the MLP, c and L; L = 10 so that max(L, i) varies with i."""
    is_decoder, mask_of = SIDES[side]
    torch.manual_seed(4)
    module = FireAttention(HEADS, DIM, dropout=0.0, is_decoder=is_decoder, fused=fused).eval()
    with torch.no_grad():
        module.fire_threshold_scale.fill_(10 / 512)
        module.fire_c.fill_(0.7)
    x, mask = inputs(LENGTHS[1:]), mask_of(LENGTHS[1:])
    assert_matches_formula(module, x, mask, fire_bias(module, x.size(1)), shift_invariant={"fire_mlp.2.bias"})


def test_fire_inputs_are_the_papers_in_the_decoder_and_within_one_in_the_encoder():
    module = FireAttention(HEADS, DIM, dropout=0.0, is_decoder=True)
    with torch.no_grad():
        module.fire_threshold_scale.fill_(3 / 512)
    x = module.normalized_distances(20, 20, "cpu")
    c = module.fire_c.item()
    for i in range(20):
        for j in range(i + 1):
            paper = math.log(c * (i - j) + 1) / (math.log(c * max(3, i) + 1) + EPS)
            assert x[i, j].item() == pytest.approx(paper, rel=1e-6, abs=1e-7)
    assert x.abs().max() <= 1 and (x.triu(1) <= 0).all() and (x.tril() >= 0).all()
    # queries after cached keys: the last rows of the whole table
    assert torch.equal(module.normalized_distances(3, 20, "cpu"), x[-3:])


def test_fire_starts_as_the_paper():
    module = FireAttention(HEADS, DIM)
    assert module.fire_c.item() == pytest.approx(0.1)
    assert abs(module.fire_threshold_scale.item() * 512) == 512
    assert [layer.out_features for layer in module.fire_mlp if hasattr(layer, "out_features")] == [32, HEADS]


@pytest.mark.parametrize("init", [["-param_init", "0.1"], ["-param_init", "0", "-param_init_glorot"]])
def test_built_models_start_as_the_papers(init):
    """OpenNMT-py's initialization draws every parameter; the builder then gives these theirs
    (`attention.initialize`), in every layer."""
    vocab = pyonmttok.build_vocab_from_tokens([f"w{i}" for i in range(40)], special_tokens=SPECIALS)
    vocabs = {"src": vocab, "tgt": vocab, "data_task": "seq2seq", "decoder_start_token": DefaultTokens.BOS}
    for method, kind in (("kerple", KerpleLogAttention), ("fire", FireAttention)):
        opt = built_models.model_options("-relative_attention", method, "-position_encoding", "false", *init,
                                         dim=DIM, heads=HEADS)
        attentions = [m for m in built_models.new_model(opt, vocabs).modules() if isinstance(m, kind)]
        assert len(attentions) == 4
        for attention in attentions:
            if kind is KerpleLogAttention:
                assert 0 < attention.kerple_r1.min() and attention.kerple_r1.max() < 2
                assert 0 < attention.kerple_r2.min() and attention.kerple_r2.max() < 1
            else:
                assert attention.fire_c.item() == pytest.approx(0.1)
                assert attention.fire_threshold_scale.item() == 1.0
        if kind is KerpleLogAttention:  # drawn layer after layer
            assert not torch.equal(attentions[0].kerple_r1, attentions[1].kerple_r1)


# --- the stock commands ----------------------------------------------------------

STEPS = 10


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    workdir = build_tiny_vocab(tmp_path_factory.mktemp("length_methods"))
    head(TOY_ENDE / "src-test.txt", workdir / "test.src", 20)
    return workdir


@pytest.mark.parametrize("method, kind, tables", [
    ("kerple", "KerpleLogAttention", {"kerple_r1": (4,), "kerple_r2": (4,)}),
    ("fire", "FireAttention", {"fire_c": (1,), "fire_threshold_scale": (1,), "fire_mlp.2.weight": (4, 32)}),
])
def test_train_and_translate(workdir, method, kind, tables):
    result = train_tiny(workdir, method, train_steps=STEPS, report_every=5, position_encoding=False,
                        relative_attention=method)
    assert kind in result.stdout + result.stderr
    checkpoint = torch.load(workdir / f"{method}_step_{STEPS}.pt")
    assert checkpoint["opt"].relative_attention == method
    for side in ("encoder.transformer.0", "decoder.transformer_layers.1"):
        for name, shape in tables.items():
            assert checkpoint["model"][f"{side}.self_attn.{name}"].shape == shape
    output = workdir / f"{method}.hyp"
    run([command("onmt_translate"), "-model", workdir / f"{method}_step_{STEPS}.pt", "-src", workdir / "test.src",
         "-output", output, "-beam_size", "2", "-max_length", "30"])
    lines = output.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 20 and any(lines)
