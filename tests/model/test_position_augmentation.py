"""Randomized positions (Ruoss et al. 2023) and CAPE (Likhomanenko et al. 2021):
their sampling rules, the settings that are APE bit for bit, incremental decoding,
and a tiny model of each through the stock onmt_train / onmt_translate."""
import itertools
import math
from fractions import Fraction

import onmt  # noqa: F401  (activates the extension)
import pytest
import torch
from conftest import TOY_ENDE, build_tiny_vocab, command, head, run, step_by_step_and_whole, train_tiny
from onmt.modules.embeddings import PositionalEncoding, SequenceTooLongError
from rounding import assert_matches

from onmt_posenc.model import export
from onmt_posenc.model import options
from onmt_posenc.model.positions import sinusoid_frequencies, sinusoids
from onmt_posenc.model.positions.cape import ContinuousAugmentedSinusoidalEncoding
from onmt_posenc.model.positions.randomized import RandomizedSinusoidalEncoding

DIM = 16
ENC_TYPES = ["SinusoidalInterleaved", "SinusoidalConcat"]


def same_draws_as_forward(module, emb, seed):
    """The module's output and, replayed from the same seed, the positions it drew."""
    torch.manual_seed(seed)
    out = module(emb)
    torch.manual_seed(seed)
    return out, module.positions(emb.size(0), emb.size(1), emb.device)


# Randomized positions


def randomized(max_position, eval_length=None, **kwargs):
    """Randomized positions; M = L (evaluation at 0..n-1) unless eval_length is given."""
    return RandomizedSinusoidalEncoding(DIM, kwargs.pop("enc_type", "SinusoidalInterleaved"), max_position=max_position,
                                        eval_length=eval_length or max_position, **kwargs)  # fmt: skip


def test_randomized_positions_sorted_distinct_within_range_per_sequence():
    module = randomized(64).train()
    emb = torch.randn(32, 20, DIM)
    out, positions = same_draws_as_forward(module, emb, seed=0)
    assert torch.equal(out, emb * math.sqrt(DIM) + module.pe[positions, 0])
    assert positions.dtype == torch.long and positions.shape == (32, 20)
    assert (positions[:, 1:] > positions[:, :-1]).all(), "not sorted or not distinct"
    assert positions.min() >= 0 and positions.max() < 64
    assert len({tuple(row) for row in positions.tolist()}) == 32, "sequences must draw their own subsets"
    assert not torch.equal(positions, module.positions(32, 20, emb.device)), "one draw per pass"


def test_randomized_per_batch_draw_is_shared():
    module = randomized(64, draw="batch").train()
    emb = torch.randn(8, 10, DIM)
    out, positions = same_draws_as_forward(module, emb, seed=1)
    assert torch.equal(out, emb * math.sqrt(DIM) + module.pe[positions, 0])
    assert (positions == positions[:1]).all()
    assert (positions[0, 1:] > positions[0, :-1]).all() and positions.max() < 64
    assert not torch.equal(positions, module.positions(8, 10, emb.device))


@pytest.mark.parametrize("draw", ["sequence", "batch"])
def test_randomized_subsets_uniform(draw):
    """Every 3-subset of {0..5} equally likely (20 of them)."""
    torch.manual_seed(2)
    module = randomized(6, draw=draw).train()
    subsets = list(itertools.combinations(range(6), 3))
    rows = [module.positions(50, 3, "cpu")[0 if draw == "batch" else slice(None)] for _ in range(200)]
    draws = torch.cat([r.reshape(-1, 3) for r in rows]).tolist()
    counts = torch.tensor([float(draws.count(list(s))) for s in subsets])
    assert counts.sum() == len(draws), "a draw that is not a sorted 3-subset of 0..5"
    expected = len(draws) / len(subsets)
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 43.82, f"not uniform over subsets (chi2={chi2:.1f}, df=19, p=0.001 bound 43.82)"


def test_randomized_longer_than_range_refused_in_training_only():
    module = randomized(10).train()
    module(torch.zeros(2, 10, DIM))
    with pytest.raises(SequenceTooLongError, match="randomized_max_position is 10"):
        module(torch.zeros(2, 11, DIM))
    module.eval()(torch.zeros(2, 11, DIM))  # evaluation reads 0..n-1 off the table


def test_randomized_table_grows_with_range():
    assert randomized(2048).pe.shape[0] == 5000
    big = randomized(6000)
    assert big.pe.shape[0] == 6000
    assert torch.equal(big.pe, PositionalEncoding(DIM, "SinusoidalInterleaved", max_len=6000).pe)


def test_randomized_range_equal_to_length_is_ape():
    emb = torch.randn(4, 12, DIM)
    module = randomized(12).train()
    assert torch.equal(module(emb), PositionalEncoding(DIM, "SinusoidalInterleaved")(emb))


@pytest.mark.parametrize("length, eval_length", [(48, 48), (26, 26), (12, 48)])
def test_randomized_evaluation_is_mean_of_training_draw(length, eval_length):
    """Evaluation puts token i where a training draw of M tokens puts it on
    average: round((i+1)(L+1)/(M+1)) - 1, checked against the exact formula and
    against the mean of 4,000 draws (a position's sd is at most L / (2 sqrt(M+2)),
    below 25 here, so its mean over 4,000 draws has sd below 0.4: 2.5 leaves over
    5 sd beside the rounding)."""
    module = randomized(256, eval_length=eval_length)
    expected = [int(Fraction((i + 1) * 257, eval_length + 1) + Fraction(1, 2)) - 1 for i in range(length)]
    emb = torch.randn(3, length, DIM)
    out = module.eval()(emb)
    assert torch.equal(out, emb * math.sqrt(DIM) + module.pe[expected, 0].expand(3, length, DIM))
    torch.manual_seed(3)
    draws = module.train().positions(4000, eval_length, "cpu")[:, :length].double().mean(dim=0)
    assert (draws - torch.tensor(expected, dtype=torch.double)).abs().max() < 2.5
    assert expected[-1] <= 255 and (length < eval_length or expected[-1] >= 255 - 257 / (eval_length + 1))


def test_randomized_evaluation_past_the_table():
    """L = 256, M = 16: token i at round((i+1) 257/17) - 1, past the table's 5000 rows from
    token 331 on: the sinusoids there are OpenNMT-py's formula; as many tokens as APE."""
    module = randomized(256, eval_length=16).eval()
    rows = [(2 * k * 257 + 17) // 34 - 1 for k in range(1, 401)]
    assert rows[329] < 5000 <= rows[330]
    emb = torch.randn(2, 400, DIM)
    wide = PositionalEncoding(DIM, "SinusoidalInterleaved", max_len=rows[-1] + 1).pe[:, 0]
    assert torch.equal(module(emb), emb * math.sqrt(DIM) + wide[rows].expand(2, 400, DIM))
    module(torch.zeros(1, 1, DIM), step=4999)
    with pytest.raises(SequenceTooLongError, match="randomized positions evaluate at most 5000 tokens"):
        module(torch.zeros(1, 1, DIM), step=5000)
    with pytest.raises(SequenceTooLongError):
        module(torch.zeros(1, 5001, DIM))


# CAPE


def cape(**bounds):
    args = {"max_global_shift": 0.0, "max_local_shift": 0.0, "max_global_scale": 1.0, **bounds}
    return ContinuousAugmentedSinusoidalEncoding(DIM, "SinusoidalInterleaved", **args).train()


@pytest.mark.parametrize("enc_type", ENC_TYPES)
def test_sinusoid_of_integer_positions_is_onmt_table(enc_type):
    table = PositionalEncoding(DIM, enc_type).pe[:, 0]
    positions = torch.arange(table.size(0), dtype=torch.float)
    assert torch.equal(sinusoids(positions, sinusoid_frequencies(DIM, enc_type), enc_type), table)


@pytest.mark.parametrize("enc_type", ENC_TYPES)
def test_cape_forward_is_sinusoid_of_drawn_positions(enc_type):
    module = ContinuousAugmentedSinusoidalEncoding(DIM, enc_type).train()  # the text recipe
    emb = torch.randn(6, 9, DIM)
    out, x = same_draws_as_forward(module, emb, seed=3)
    expected = emb * math.sqrt(DIM) + sinusoids(x, sinusoid_frequencies(DIM, enc_type), enc_type)
    assert torch.equal(out, expected)
    assert not torch.equal(x, module.positions(6, 9, "cpu")), "one draw per pass"


def test_cape_global_shift_per_sequence_within_bounds():
    torch.manual_seed(4)
    delta = cape(max_global_shift=5.0).positions(2000, 7, "cpu") - torch.arange(7.0)
    # (i + Δ) - i is Δ up to float32 rounding.
    torch.testing.assert_close(delta, delta[:, :1].expand_as(delta), rtol=0, atol=1e-5)  # one per sequence
    assert delta.min() >= -5 and delta.max() <= 5
    assert delta.min() < -4.9 and delta.max() > 4.9 and delta.mean().abs() < 0.3  # U(-5, 5), negative too


def test_cape_local_shift_per_token_within_bounds_keeps_order():
    torch.manual_seed(5)
    epsilon = cape(max_local_shift=0.5).positions(500, 40, "cpu") - torch.arange(40.0)
    assert epsilon.min() >= -0.5 and epsilon.max() <= 0.5
    assert epsilon.min() < -0.49 and epsilon.max() > 0.49
    assert (epsilon[:, 1:] != epsilon[:, :-1]).all(), "one shift per token"
    # All three at once, the text recipe: the tokens stay in order.
    x = cape(max_global_shift=5.0, max_local_shift=0.5, max_global_scale=1.03).positions(500, 100, "cpu")
    assert (x[:, 1:] > x[:, :-1]).all()


def test_cape_global_scale_per_sequence_within_bounds():
    torch.manual_seed(6)
    x = cape(max_global_scale=1.03).positions(2000, 6, "cpu")
    scale = x[:, 1:] / torch.arange(1.0, 6.0)
    torch.testing.assert_close(scale, scale[:, :1].expand_as(scale))  # one scale per sequence
    log_scale = scale[:, 0].log()
    bound = math.log(1.03)
    assert log_scale.abs().max() <= bound * (1 + 1e-5)
    assert log_scale.min() < -0.95 * bound and log_scale.max() > 0.95 * bound
    assert (x[:, 0] == 0).all()  # no shift drawn: position 0 scales to 0


@pytest.mark.parametrize("enc_type", ENC_TYPES)
def test_cape_without_augmentation_is_ape_and_draws_nothing(enc_type):
    emb = torch.randn(3, 11, DIM)
    module = ContinuousAugmentedSinusoidalEncoding(
        DIM, enc_type, max_global_shift=0.0, max_local_shift=0.0, max_global_scale=1.0
    ).train()
    state = torch.get_rng_state()
    out = module(emb)
    assert torch.equal(torch.get_rng_state(), state), "Δmax=0, εmax=0, s=1 must not draw"
    assert torch.equal(out, PositionalEncoding(DIM, enc_type)(emb))


def test_cape_has_ape_state_dict():
    """`pe` alone: OpenNMT-py's checkpoint loader wants every buffer in the checkpoint."""
    stock = PositionalEncoding(DIM, "SinusoidalInterleaved").state_dict()
    module = ContinuousAugmentedSinusoidalEncoding(DIM, "SinusoidalInterleaved")
    assert module.state_dict().keys() == stock.keys() and torch.equal(module.state_dict()["pe"], stock["pe"])
    assert [name for name, _ in module.named_buffers()] == ["pe"]


# Both: evaluation is APE, incremental decoding is the full forward


MODULES = {
    "randomized": lambda enc_type: randomized(2048, enc_type=enc_type),
    "randomized_batch": lambda enc_type: randomized(2048, enc_type=enc_type, draw="batch"),
    "cape": lambda enc_type: ContinuousAugmentedSinusoidalEncoding(DIM, enc_type),
}


@pytest.mark.parametrize("enc_type", ENC_TYPES)
@pytest.mark.parametrize("name", MODULES)
def test_eval_is_ape_and_stepwise_is_full_forward(name, enc_type):
    torch.manual_seed(7)
    emb = torch.randn(5, 8, DIM)
    module = MODULES[name](enc_type).eval()
    stock = PositionalEncoding(DIM, enc_type).eval()
    assert torch.equal(module(emb), stock(emb))
    steps = torch.cat([module(emb[:, i : i + 1], step=i) for i in range(8)], dim=1)
    assert torch.equal(steps, module(emb))
    # In training the full forward augments; a decoding step still reads the table.
    module.train()
    assert not torch.equal(module(emb), stock(emb))
    assert torch.equal(module(emb[:, :1], step=3), stock(emb[:, :1], step=3))


def test_randomized_spread_evaluation_stepwise_is_full_forward():
    emb = torch.randn(5, 30, DIM)
    module = randomized(256, eval_length=20).eval()
    steps = torch.cat([module(emb[:, i : i + 1], step=i) for i in range(30)], dim=1)
    assert torch.equal(steps, module(emb))
    assert not torch.equal(module(emb), PositionalEncoding(DIM, "SinusoidalInterleaved")(emb))


# Options


def parse_model_options(*args):
    from onmt import opts
    from onmt.utils.parse import ArgumentParser

    parser = ArgumentParser()
    opts.model_opts(parser)
    return options.resolve_position_options(parser.parse_args(["-position_encoding", *args]))


def test_option_defaults():
    opt = parse_model_options("-src_position_encoding", "randomized", "-tgt_position_encoding", "cape",
                              "-randomized_max_position", "512", "-randomized_eval_length", "64")  # fmt: skip
    assert (opt.src_position_encoding, opt.tgt_position_encoding) == ("randomized", "cape")
    assert (opt.randomized_max_position, opt.randomized_eval_length, opt.randomized_draw) == (512, 64, "sequence")
    assert (opt.cape_max_global_shift, opt.cape_max_local_shift, opt.cape_max_global_scale) == (5.0, 0.5, 1.03)
    # Resolving again (every checkpoint load does) changes nothing.
    assert vars(options.resolve_position_options(opt)) == vars(opt)
    plain = parse_model_options()
    assert plain.randomized_draw is None and plain.cape_max_global_shift is None


@pytest.mark.parametrize(
    "args, message",
    [
        (["-src_position_encoding", "randomized"], "needs randomized_max_position"),
        (["-src_position_encoding", "randomized", "-randomized_max_position", "0"], "must be >= 1, got 0"),
        (["-src_position_encoding", "randomized", "-randomized_max_position", "64"], "needs randomized_eval_length"),
        (["-src_position_encoding", "randomized", "-randomized_max_position", "64", "-randomized_eval_length", "65"],
         "randomized_eval_length must be between 1 and randomized_max_position \\(64\\), got 65"),
        (["-src_position_encoding", "randomized", "-randomized_max_position", "64", "-randomized_eval_length", "0"],
         "got 0"),
        (["-randomized_eval_length", "64"], "neither src_position_encoding nor tgt_position_encoding is 'randomized'"),
        (["-randomized_max_position", "64"], "neither src_position_encoding nor tgt_position_encoding is 'randomized'"),
        (["-randomized_draw", "batch"], "randomized_draw is set"),
        (["-cape_max_local_shift", "0.3"], "neither src_position_encoding nor tgt_position_encoding is 'cape'"),
        (["-tgt_position_encoding", "cape", "-cape_max_global_shift", "-1"],
         "cape_max_global_shift must be a finite number >= 0, got -1.0"),
        (["-tgt_position_encoding", "cape", "-cape_max_global_scale", "0.9"],
         "cape_max_global_scale must be a finite number >= 1, got 0.9"),
        # nan would train without the shift (every comparison with nan is false), inf fails at step 1
        (["-tgt_position_encoding", "cape", "-cape_max_global_shift", "nan"], "cape_max_global_shift must be a finite"),
        (["-tgt_position_encoding", "cape", "-cape_max_global_scale", "inf"], "cape_max_global_scale must be a finite"),
    ],
)
def test_inconsistent_options_refused(args, message):
    with pytest.raises(ValueError, match=message):
        parse_model_options(*args)


# Through the stock commands

METHODS = {
    "randomized": {"src_position_encoding": "randomized", "tgt_position_encoding": "randomized",
                   "randomized_max_position": 256, "randomized_eval_length": 256},
    "cape": {"src_position_encoding": "cape", "tgt_position_encoding": "cape"},
}  # fmt: skip
STEPS = 6


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny model of each method, a few steps of the real onmt_train."""
    workdir = build_tiny_vocab(tmp_path_factory.mktemp("augmentation"))
    for name, extra in METHODS.items():
        train_tiny(workdir, name, train_steps=STEPS, **extra)
    return workdir


@pytest.mark.parametrize("name", METHODS)
def test_train_and_translate_with_stock_commands(trained, name):
    checkpoint = torch.load(trained / f"{name}_step_{STEPS}.pt")
    assert checkpoint["opt"].src_position_encoding == checkpoint["opt"].tgt_position_encoding == name
    # An APE model of the same options has the same parameter and buffer names and shapes.
    from onmt.inputters.inputter import dict_to_vocabs
    from onmt.model_builder import build_base_model

    ape_opt = type(checkpoint["opt"])(**vars(checkpoint["opt"]))
    ape_opt.src_position_encoding = ape_opt.tgt_position_encoding = "sinusoidal"
    ape = build_base_model(ape_opt, dict_to_vocabs(checkpoint["vocab"])).state_dict()
    ape = {key: value.shape for key, value in ape.items() if not key.startswith("generator")}
    assert {key: value.shape for key, value in checkpoint["model"].items()} == ape

    src = head(TOY_ENDE / "src-test.txt", trained / "test.src", 10)
    hyp = trained / f"{name}.hyp"
    run([command("onmt_translate"), "-model", trained / f"{name}_step_{STEPS}.pt", "-src", src, "-output", hyp,
         "-beam_size", "2", "-max_length", "20"])  # fmt: skip
    assert len(hyp.read_text(encoding="utf-8").splitlines()) == 10


def test_checkpoint_from_before_the_evaluation_rule_refused_in_one_line(trained, tmp_path):
    """A randomized checkpoint whose options lack randomized_eval_length (made before it
    existed): onmt_translate says what to set, in one line, and writes nothing."""
    checkpoint = torch.load(trained / f"randomized_step_{STEPS}.pt")
    delattr(checkpoint["opt"], "randomized_eval_length")
    torch.save(checkpoint, tmp_path / "old.pt")
    hyp = tmp_path / "old.hyp"
    result = run([command("onmt_translate"), "-model", tmp_path / "old.pt", "-src", TOY_ENDE / "src-test.txt",
                  "-output", hyp], expect_ok=False)  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("onmt_translate: error: src/tgt_position_encoding "
                                                            "'randomized' needs randomized_eval_length (M)")
    assert "set randomized_eval_length in its 'opt'" in result.stderr and not hyp.exists()


@pytest.mark.parametrize("name", METHODS)
def test_incremental_decoding_matches_full_forward(trained, name):
    from onmt import opts
    from onmt.model_builder import load_test_model
    from onmt.translate.translator import build_translator  # noqa: F401  (import order as translate)
    from onmt.utils.parse import ArgumentParser

    parser = ArgumentParser()
    opts.translate_opts(parser)
    opt = parser.parse_args(["-model", str(trained / f"{name}_step_{STEPS}.pt"), "-src", "unused"])
    vocabs, model, _ = load_test_model(opt)
    expected = RandomizedSinusoidalEncoding if name == "randomized" else ContinuousAugmentedSinusoidalEncoding
    assert isinstance(model.encoder.embeddings.make_embedding.pe, expected)
    assert isinstance(model.decoder.embeddings.make_embedding.pe, expected)
    assert_matches(*step_by_step_and_whole(model, vocabs))


@pytest.mark.parametrize("name", METHODS)
def test_exported_like_sinusoidal_ape(trained, name):
    """CTranslate2 gets OpenNMT-py's sinusoid table and sqrt(d) scale on both sides."""
    checkpoint = torch.load(trained / f"{name}_step_{STEPS}.pt")
    model_opt = export.model_options(checkpoint["opt"])
    table = PositionalEncoding(64, "SinusoidalInterleaved").pe[:, 0]
    for side in ("src", "tgt"):
        term = export.position_term(model_opt, checkpoint["model"], side)
        assert torch.equal(term.table, table) and term.scale == 8.0
    output = trained / f"ct2_{name}"
    run([command("onmt_release_model"), "--model", trained / f"{name}_step_{STEPS}.pt", "--output", output,
         "--format", "ctranslate2"])  # fmt: skip
    assert (output / "model.bin").exists()
    assert export.read_metadata(output) == {"src_position_encoding": name, "tgt_position_encoding": name}
