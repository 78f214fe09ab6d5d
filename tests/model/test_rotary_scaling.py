"""Rotary positions rescaled at inference (onmt_translate's rotary_scaling): position
interpolation, NTK-aware scaling and YaRN against their formulas written out plane by plane,
in the attention layer (whole sequence and step by step), and through onmt_train (which
records the longest training source) and onmt_translate."""
import math
import re

import onmt  # noqa: F401  (activates the extension)
import pytest
import torch
from conftest import TOY_ENDE, build_tiny_vocab, command, head, run, train_tiny
from onmt.modules.multi_headed_attn import rotaryembeddings
from rounding import assert_matches
from test_relative_attention import decoder_mask, encoder_mask, inputs, randomized

from onmt_posenc.core.text import read_lines, write_lines
from onmt_posenc.model.attention.rotary import RotaryAttention
from onmt_posenc.model.attention.rotary_scaling import RotaryScaling, rotation_table

HEADS, DIM, BASE = 4, 32, 10000.0


def yarn_frequency(i, dim, base, s, training_length):
    """Peng et al. (2023), one plane written out: theta = base^(-2i/d), its wavelength
    2 pi / theta, r = L / wavelength, gamma = 0 below alpha = 1, 1 above beta = 32, linear
    between; (1 - gamma) theta / s + gamma theta."""
    theta = base ** (-2 * i / dim)
    r = training_length / (2 * math.pi / theta)
    gamma = 0.0 if r < 1 else 1.0 if r > 32 else (r - 1) / 31
    return (1 - gamma) * theta / s + gamma * theta


def test_the_factor_is_the_inputs_length_against_the_longest_training_source():
    assert RotaryScaling.for_input("yarn", 30, 45).factor == 1.0
    assert RotaryScaling.for_input("yarn", 45, 45).factor == 1.0
    assert RotaryScaling.for_input("ntk", 90, 45).factor == 2.0
    assert RotaryScaling.for_input("interpolation", 160, 45).factor == pytest.approx(160 / 45)


@pytest.mark.parametrize("dim", [16, 64])
def test_frequencies_match_each_papers_formula(dim):
    s, length = 3.0, 400
    theta = torch.tensor([BASE ** (-2 * i / dim) for i in range(dim // 2)], dtype=torch.float64)
    # position interpolation: position m at m / s, so m theta / s
    interpolation = RotaryScaling("interpolation", s, length).frequencies(dim, BASE)
    torch.testing.assert_close(interpolation, theta / s, rtol=1e-12, atol=0)
    # NTK-aware: the base times s^(d / (d - 2)): the highest frequency kept, the lowest divided by s
    ntk = RotaryScaling("ntk", s, length).frequencies(dim, BASE)
    scaled_base = BASE * s ** (dim / (dim - 2))
    torch.testing.assert_close(ntk, torch.tensor([scaled_base ** (-2 * i / dim) for i in range(dim // 2)],
                                                 dtype=torch.float64), rtol=1e-12, atol=0)
    assert ntk[0] == theta[0] and ntk[-1].item() == pytest.approx(theta[-1].item() / s, rel=1e-12)
    # YaRN: kept, ramped and interpolated planes all occur at L = 400
    yarn = RotaryScaling("yarn", s, length).frequencies(dim, BASE)
    expected = torch.tensor([yarn_frequency(i, dim, BASE, s, length) for i in range(dim // 2)], dtype=torch.float64)
    torch.testing.assert_close(yarn, expected, rtol=1e-12, atol=0)
    assert yarn[0] == theta[0] and (yarn == theta / s).any() and ((yarn != theta) & (yarn != theta / s)).any()


def test_yarn_divides_the_logits_by_its_temperature():
    """sqrt(1/t) = 0.1 ln s + 1 on q and k: every rotation of the table has that magnitude."""
    for s in (1.0, 2.0, 3.5):
        scaling = RotaryScaling("yarn", s, 45)
        table = rotation_table(scaling, 16, 50, BASE)
        assert_matches(table.abs(), torch.full((50, 16), 0.1 * math.log(s) + 1))
        assert scaling.magnitude() ** -2 == pytest.approx(1 / (0.1 * math.log(s) + 1) ** 2)
    assert RotaryScaling("ntk", 3.0, 45).magnitude() == RotaryScaling("interpolation", 3.0, 45).magnitude() == 1


@pytest.mark.parametrize("method", ["interpolation", "ntk", "yarn"])
def test_the_table_at_factor_one_is_opennmts(method):
    table = rotation_table(RotaryScaling(method, 1.0, 45), 16, 60, BASE)
    assert_matches(table.real, rotaryembeddings(16, maxseqlen=60, base=BASE)[0].real)
    assert_matches(table.imag, rotaryembeddings(16, maxseqlen=60, base=BASE)[0].imag)


def rotated_directly(x, frequencies, magnitude, interleave):
    """x (batch, heads, L, d): plane i of position m turned by m theta'_i and scaled by the
    magnitude; the planes are (2i, 2i + 1) interleaved, else (i, i + d/2), as OpenNMT-py's
    rotary_interleave has them."""
    out = torch.empty_like(x)
    half = x.size(-1) // 2
    for m in range(x.size(2)):
        for i in range(half):
            a, b = (2 * i, 2 * i + 1) if interleave else (i, i + half)
            angle = m * frequencies[i].item()
            cos, sin = math.cos(angle) * magnitude, math.sin(angle) * magnitude
            out[:, :, m, a] = x[:, :, m, a] * cos - x[:, :, m, b] * sin
            out[:, :, m, b] = x[:, :, m, a] * sin + x[:, :, m, b] * cos
    return out


@pytest.mark.parametrize("interleave", [True, False])
@pytest.mark.parametrize("method", ["interpolation", "ntk", "yarn"])
@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_rescaled_attention_matches_the_formula(method, side, interleave):
    """A batch whose longest source is 3.2 times the training length: softmax(rotated q .
    rotated k / sqrt(d)) v with the rotation written out."""
    is_decoder = side == "decoder"
    module = randomized(RotaryAttention(HEADS, DIM, DIM // HEADS, rotary_interleave=interleave, rotary_theta=BASE,
                                        dropout=0.0, is_decoder=is_decoder)).eval()
    lengths = [16, 11]
    module.scaling_rule = (method, 5)
    module.scale_for_input(max(lengths))
    assert module.scaling == RotaryScaling(method, 3.2, 5)
    x = inputs(lengths)
    mask = (decoder_mask if is_decoder else encoder_mask)(lengths)
    d = DIM // HEADS

    def split(linear):
        return linear(x).view(x.size(0), x.size(1), HEADS, d).transpose(1, 2)

    frequencies, magnitude = module.scaling.frequencies(d, BASE), module.scaling.magnitude()
    q = rotated_directly(split(module.linear_query), frequencies, magnitude, interleave)
    k = rotated_directly(split(module.linear_keys), frequencies, magnitude, interleave)
    weights = (q @ k.transpose(-1, -2) / math.sqrt(d)).masked_fill(mask, float("-inf")).softmax(-1)
    expected = module.final_linear((weights @ split(module.linear_values)).transpose(1, 2).reshape(x.shape))
    assert_matches(module(x, x, x, mask=mask)[0], expected)


def test_rescaled_decoding_step_by_step_matches_the_whole_sequence():
    module = randomized(RotaryAttention(HEADS, DIM, DIM // HEADS, rotary_interleave=True, rotary_theta=BASE,
                                        dropout=0.0)).eval()
    module.scaling_rule = ("yarn", 4)
    module.scale_for_input(10)
    x = inputs([12, 12])
    full, _ = module(x, x, x, mask=decoder_mask([12, 12]))
    module.layer_cache = (True, {"keys": torch.tensor([]), "values": torch.tensor([])})
    steps = [module(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], step=t)[0] for t in range(12)]
    assert_matches(torch.cat(steps, dim=1), full)


def test_inputs_within_the_training_length_keep_the_models_rotation():
    module = randomized(RotaryAttention(HEADS, DIM, DIM // HEADS, rotary_interleave=False, rotary_theta=BASE,
                                        dropout=0.0)).eval()
    x, mask = inputs([9, 7]), decoder_mask([9, 7])
    plain, _ = module(x, x, x, mask=mask)
    module.scaling_rule = ("yarn", 9)
    module.scale_for_input(9)
    assert torch.equal(module(x, x, x, mask=mask)[0], plain)
    module.scale_for_input(18)
    assert not torch.allclose(module(x, x, x, mask=mask)[0], plain)


# --- the stock commands ----------------------------------------------------------

STEPS = 20


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A rotary model trained on 60 pairs for 20 updates of up to 1,024 tokens (every pair
    read several times), and sources of 1 to 4 test sentences joined per line."""
    workdir = build_tiny_vocab(tmp_path_factory.mktemp("rotary_scaling"))
    src, tgt = head(TOY_ENDE / "src-train.txt", workdir / "small.src", 60), head(TOY_ENDE / "tgt-train.txt",
                                                                                workdir / "small.tgt", 60)
    train_tiny(workdir, "rotary", train_steps=STEPS, report_every=10, position_encoding=False,
               max_relative_positions=-1, data={"corpus_1": {"path_src": str(src), "path_tgt": str(tgt)}})
    train_tiny(workdir, "ape", train_steps=STEPS, report_every=10,
               data={"corpus_1": {"path_src": str(src), "path_tgt": str(tgt)}})
    test = read_lines(TOY_ENDE / "src-test.txt")[:12]
    write_lines(workdir / "long.src", [*test[:3], " ".join(test[3:5]), " ".join(test[5:8]), " ".join(test[8:12])])
    return workdir, max(len(line.split()) for line in read_lines(src))


def translate(workdir, model, *options, expect_ok=True):
    output = workdir / f"{model}{'_'.join(options)}.hyp"
    result = run([command("onmt_translate"), "-model", workdir / f"{model}_step_{STEPS}.pt", "-src",
                  workdir / "long.src", "-output", output, "-beam_size", "2", "-max_length", "60", "-batch_size", "1",
                  *options], expect_ok=expect_ok)
    return result, (read_lines(output) if expect_ok else None)


def test_onmt_train_records_the_longest_training_source(trained):
    workdir, longest = trained
    assert torch.load(workdir / f"rotary_step_{STEPS}.pt")["opt"].longest_training_source == longest


@pytest.mark.parametrize("method", ["interpolation", "ntk", "yarn"])
def test_onmt_translate_rescales_long_inputs_only(trained, method):
    """With -batch_size 1 each sentence gets its own factor, max(1, its length / the longest
    training source), which the log says where it changes (batches in order of length)."""
    workdir, longest = trained
    _, plain = translate(workdir, "rotary")
    result, scaled = translate(workdir, "rotary", "-rotary_scaling", method)
    assert f"rotary positions rescaled ({method}) for sources longer than {longest} tokens" in result.stderr
    lengths = [len(line.split()) for line in read_lines(workdir / "long.src")]
    assert any(n > longest for n in lengths) and any(n <= longest for n in lengths)
    said = re.findall(rf"rescaled by s = (\S+) \({method}\) for a batch of sources up to (\d+) tokens", result.stderr)
    assert [(float(s), int(n)) for s, n in said] == [(float(f"{n / longest:.3g}"), n) for n in sorted(lengths)
                                                     if n > longest]
    assert len(scaled) == len(plain) == len(lengths)


def test_rotary_scaling_errors_name_the_model_and_the_option(trained, tmp_path):
    workdir, _ = trained
    result, _ = translate(workdir, "ape", "-rotary_scaling", "yarn", expect_ok=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "-rotary_scaling yarn, model" in result.stderr and "has no rotary positions" in result.stderr
    checkpoint = torch.load(workdir / f"rotary_step_{STEPS}.pt")
    del checkpoint["opt"].longest_training_source  # a checkpoint made before onmt_train recorded it
    torch.save(checkpoint, workdir / f"old_step_{STEPS}.pt")
    result, _ = translate(workdir, "old", "-rotary_scaling", "ntk", expect_ok=False)
    assert "records no longest training source" in result.stderr and "-rotary_training_length" in result.stderr
    result, _ = translate(workdir, "old", "-rotary_scaling", "ntk", "-rotary_training_length", "20")
    assert "for sources longer than 20 tokens" in result.stderr
