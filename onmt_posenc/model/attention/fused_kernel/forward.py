"""The forward kernel: online softmax (FlashAttention) over key blocks, with the relative
terms of `tiles`, and Shaw's value term as per-row bucket sums of the weights."""
import triton
import triton.language as tl

from onmt_posenc.model.attention.fused_kernel.tiles import add_bucket_sums, dropout_keep, tile_factor, tile_logits


@triton.jit
def attention_forward(
    Q, K, V, O, LSE, W, TABLE, BUCKET, SLOPES, PAD, LENGTHS,
    sqb, sqh, sqi, skb, skh, skj, svb, svh, svj, sob, soh, soi, stb, sth, sti,
    H, Lq, Lk, seed, dropout_p, farthest_weight,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
    HAS_TABLE: tl.constexpr, ALIBI: tl.constexpr, HAS_PAD: tl.constexpr, RAMP: tl.constexpr,
    DROPOUT: tl.constexpr, VALUES: tl.constexpr, NB_PAD: tl.constexpr, PRECISION: tl.constexpr,
):
    """One block of BLOCK_M queries of one (batch, head). With m_i the running maximum and
    l_i = sum_j exp(s_ij - m_i), each key block rescales the running sums by
    exp(m_old - m_new) (Milakov and Gimelshein 2018; Dao et al. 2022):
    O_i = sum_j f_ij exp(s_ij - m_i) v_j / l_i, LSE_i = m_i + log l_i, and with VALUES
    W[i, c] = sum over bucket c of f_ij exp(s_ij - m_i) / l_i, whose product with R_V is
    Shaw's value term (added outside: `function.py`)."""
    start = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    rows = start + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D)
    q = tl.load(Q + b * sqb + h * sqh + rows[:, None] * sqi + dims[None, :], mask=rows[:, None] < Lq, other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    weights_per_bucket = tl.zeros((BLOCK_M, NB_PAD), tl.float32)
    end = Lk
    if CAUSAL:  # no key block after the block's last query
        end = tl.minimum(Lk, start + BLOCK_M + Lk - Lq)
    for first in range(0, end, BLOCK_N):
        cols = first + tl.arange(0, BLOCK_N)
        k = tl.load(K + b * skb + h * skh + cols[:, None] * skj + dims[None, :], mask=cols[:, None] < Lk, other=0.0)
        v = tl.load(V + b * svb + h * svh + cols[:, None] * svj + dims[None, :], mask=cols[:, None] < Lk, other=0.0)
        s, bucket = tile_logits(q, k, b, h, rows, cols, Lq, Lk, TABLE, stb, sth, sti, BUCKET, SLOPES, PAD,
                                CAUSAL, HAS_TABLE, ALIBI, HAS_PAD, PRECISION)
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        rescale = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * rescale + tl.sum(p, axis=1)
        weighted = p * tile_factor(b, bh, rows, cols, Lq, Lk, LENGTHS, seed, dropout_p, farthest_weight,
                                   RAMP, DROPOUT, BLOCK_M, BLOCK_N)
        acc = acc * rescale[:, None] + tl.dot(weighted.to(v.dtype), v, input_precision=PRECISION).to(tl.float32)
        if VALUES:
            weights_per_bucket = add_bucket_sums(weights_per_bucket * rescale[:, None], weighted, bucket, NB_PAD)
        m_i = m_new
    inside = rows < Lq
    tl.store(O + b * sob + h * soh + rows[:, None] * soi + dims[None, :], (acc / l_i[:, None]).to(O.dtype.element_ty),
             mask=inside[:, None])
    tl.store(LSE + bh * Lq + rows, m_i + tl.log(l_i), mask=inside)
    if VALUES:
        slots = tl.arange(0, NB_PAD)
        tl.store(W + (bh * Lq + rows[:, None]) * NB_PAD + slots[None, :], weights_per_bucket / l_i[:, None],
                 mask=inside[:, None])


@triton.jit
def keep_mask(KEEP, Lq, Lk, seed, dropout_p, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The dropout mask the kernels draw for `seed`, written out as (batch * heads, Lq, Lk)
    int8 (1: kept), for the parity tests."""
    bh = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    for first in range(0, Lk, BLOCK_N):
        cols = first + tl.arange(0, BLOCK_N)
        keep = dropout_keep(seed, bh, rows, cols, Lq, Lk, dropout_p)
        tl.store(KEEP + (bh * Lq + rows[:, None]) * Lk + cols[None, :], keep.to(tl.int8),
                 mask=(rows[:, None] < Lq) & (cols[None, :] < Lk))
