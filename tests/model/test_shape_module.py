"""SHAPE's position module against OpenNMT-py's own sinusoids, and its offset statistics."""
import math

import onmt  # noqa: F401  (activates the extension)
import pytest
import torch
from onmt.modules.embeddings import PositionalEncoding, SequenceTooLongError

from onmt_posenc.model.positions.none import NoPositionEncoding
from onmt_posenc.model.positions.shifted import ShiftedSinusoidalEncoding

DIM = 16


def recovered_offsets(module, batch, length=3):
    """Feed zero embeddings, so the output is PE(k + i); read k back from the table."""
    out = module(torch.zeros(batch, length, DIM))
    table = module.pe[:, 0]  # (rows, dim)
    distances = torch.cdist(out[:, 0], table)  # first position of each sequence
    return distances.argmin(dim=1)


@pytest.mark.parametrize("enc_type", ["SinusoidalInterleaved", "SinusoidalConcat"])
def test_table_is_onmt_table(enc_type):
    stock = PositionalEncoding(DIM, enc_type)
    shape = ShiftedSinusoidalEncoding(DIM, enc_type, max_shift=500)
    assert shape.pe.shape[0] == stock.pe.shape[0] + 500
    torch.testing.assert_close(shape.pe[: stock.pe.shape[0]], stock.pe, rtol=0, atol=0)


def test_eval_equals_stock_ape_plus_fixed_offset():
    torch.manual_seed(0)
    emb = torch.randn(5, 7, DIM)
    stock = PositionalEncoding(DIM, "SinusoidalInterleaved").eval()
    for offset in (0, 4):
        shape = ShiftedSinusoidalEncoding(DIM, "SinusoidalInterleaved", max_shift=9, inference_offset=offset)
        shape.eval()
        expected = emb * math.sqrt(DIM) + stock.pe[offset : offset + 7, 0]
        torch.testing.assert_close(shape(emb), expected, rtol=0, atol=0)
        torch.testing.assert_close(shape(emb), shape(emb), rtol=0, atol=0)  # deterministic
        # stepwise: position step uses row offset + step
        torch.testing.assert_close(shape(emb[:, :1], step=3), emb[:, :1] * math.sqrt(DIM) + stock.pe[offset + 3, 0])


def test_k_zero_is_ape_and_draws_nothing():
    emb = torch.randn(4, 6, DIM)
    stock = PositionalEncoding(DIM, "SinusoidalInterleaved")
    shape = ShiftedSinusoidalEncoding(DIM, "SinusoidalInterleaved", max_shift=0).train()
    state = torch.get_rng_state()
    out = shape(emb)
    assert torch.equal(torch.get_rng_state(), state), "K=0 must not consume random numbers"
    assert torch.equal(out, stock(emb))


@pytest.mark.parametrize("K", [0, 3])
def test_training_draws_from_zero_whatever_the_inference_offset(K):
    """The inference offset is for evaluation only: training draws from 0..K (K = 0: APE)."""
    torch.manual_seed(3)
    module = ShiftedSinusoidalEncoding(DIM, "SinusoidalInterleaved", max_shift=K, inference_offset=7).train()
    draws = recovered_offsets(module, batch=200)
    assert sorted(draws.unique().tolist()) == list(range(K + 1))
    assert recovered_offsets(module.eval(), batch=4).tolist() == [7] * 4


def test_training_offsets_uniform_per_sequence_and_pass():
    torch.manual_seed(1)
    K = 4
    module = ShiftedSinusoidalEncoding(DIM, "SinusoidalInterleaved", max_shift=K).train()
    draws = torch.cat([recovered_offsets(module, batch=500) for _ in range(8)])
    counts = torch.bincount(draws, minlength=K + 1).double()
    assert counts.numel() == K + 1, "offsets outside 0..K"
    expected = draws.numel() / (K + 1)
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 18.47, f"not uniform on 0..K (chi2={chi2:.1f}, df=4, p=0.001 bound 18.47)"
    # per sequence: one batch holds different offsets; per pass: two passes differ
    first, second = recovered_offsets(module, 64), recovered_offsets(module, 64)
    assert first.unique().numel() > 1
    assert not torch.equal(first, second)
    # all positions of one sequence share its offset
    out = module(torch.zeros(32, 5, DIM))
    k = torch.cdist(out[:, 0], module.pe[:, 0]).argmin(1)
    for i in range(5):
        torch.testing.assert_close(out[:, i], module.pe[k + i, 0], rtol=0, atol=0)


def test_source_and_target_offsets_independent():
    torch.manual_seed(2)
    K = 3
    src = ShiftedSinusoidalEncoding(DIM, "SinusoidalInterleaved", max_shift=K).train()
    tgt = ShiftedSinusoidalEncoding(DIM, "SinusoidalInterleaved", max_shift=K).train()
    table = torch.zeros(K + 1, K + 1)
    for _ in range(20):
        ks, kt = recovered_offsets(src, 400), recovered_offsets(tgt, 400)
        table.index_put_((ks, kt), torch.ones(400), accumulate=True)
    expected = table.sum(1, keepdim=True) * table.sum(0, keepdim=True) / table.sum()
    chi2 = float(((table - expected) ** 2 / expected).sum())
    assert chi2 < 27.88, f"source and target offsets look dependent (chi2={chi2:.1f}, df=9, p=0.001 bound 27.88)"


def test_offsets_never_run_past_table():
    module = ShiftedSinusoidalEncoding(DIM, "SinusoidalInterleaved", max_shift=10, max_len=20).train()
    assert module.pe.shape[0] == 30
    for _ in range(50):  # the longest sequence APE's table takes fits whatever k is drawn
        module(torch.zeros(8, 20, DIM))
    with pytest.raises(SequenceTooLongError, match="SHAPE sinusoid table has 30 rows"):
        module(torch.zeros(1, 21, DIM))


def test_no_position_encoding_only_scales():
    emb = torch.randn(2, 3, DIM)
    torch.testing.assert_close(NoPositionEncoding(DIM)(emb, step=5), emb * math.sqrt(DIM))
