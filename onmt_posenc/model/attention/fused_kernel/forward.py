"""The forward kernel: online softmax (FlashAttention) over key blocks, with the relative
terms of `tiles`, and Shaw's value term from the weights summed per bucket."""
import triton
import triton.language as tl

from onmt_posenc.model.attention.fused_kernel.tiles import (UNSPECIALIZED, dropout_keep, edge_sums, inside_buckets,
                                                            last_key_block_end, tile_factor, tile_logits,
                                                            tile_reaches_inside)


@triton.jit
def forward_tile(q, m_i, l_i, acc, lower, upper, start, first, b, h, bh, rows, dims, Lq, Lk,
                 K, V, VALUES_TABLE, TABLE, BUCKET, SLOPES, PAD, LENGTHS, skb, skh, skj, svb, svh, svj,
                 n_buckets, lo, hi, seed, dropout_p, farthest_weight,
                 D: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, ROW_TABLE: tl.constexpr,
                 SHARED_TABLE: tl.constexpr, ALIBI: tl.constexpr, HAS_PAD: tl.constexpr, RAMP: tl.constexpr,
                 DROPOUT: tl.constexpr, VALUES: tl.constexpr, WINDOW: tl.constexpr, PRECISION: tl.constexpr):
    """One key block of the online softmax: with m_i the running maximum and l_i = sum_j
    exp(s_ij - m_i), the running sums are rescaled by exp(m_old - m_new) (Milakov and
    Gimelshein 2018; Dao et al. 2022). With VALUES, acc also takes sum_c W[i, c] R_V[c] for
    the buckets strictly inside the clipping (the tile's weights gathered per bucket, WINDOW of
    them, times those rows of R_V) and `lower`, `upper` the edge buckets' weights (times R_V's
    first and last row at the end)."""
    cols = first + tl.arange(0, BLOCK_N)
    k = tl.load(K + b * skb + h * skh + cols[:, None] * skj + dims[None, :], mask=cols[:, None] < Lk, other=0.0)
    v = tl.load(V + b * svb + h * svh + cols[:, None] * svj + dims[None, :], mask=cols[:, None] < Lk, other=0.0)
    s, _, distance = tile_logits(q, k, b, h, bh, rows, cols, Lq, Lk, TABLE, BUCKET, SLOPES, PAD, n_buckets, lo, hi,
                                 CAUSAL, ROW_TABLE, SHARED_TABLE, ALIBI, HAS_PAD, PRECISION)
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    rescale = tl.exp(m_i - m_new)
    p = tl.exp(s - m_new[:, None])
    l_i = l_i * rescale + tl.sum(p, axis=1)
    weighted = p * tile_factor(b, bh, rows, cols, Lq, Lk, LENGTHS, seed, dropout_p, farthest_weight,
                               RAMP, DROPOUT, p.shape[0], BLOCK_N)
    acc = acc * rescale[:, None] + tl.dot(weighted.to(v.dtype), v, input_precision=PRECISION).to(tl.float32)
    if VALUES:
        below, above = edge_sums(weighted, distance, lo, hi)
        lower = lower * rescale + below
        upper = upper * rescale + above
        if tile_reaches_inside(start, first, Lq, Lk, lo, hi, p.shape[0], BLOCK_N):
            per_bucket, first_bucket = inside_buckets(weighted, start, first, Lq, Lk, lo, hi, WINDOW)
            buckets = first_bucket + tl.arange(0, WINDOW)
            r_v = tl.load(VALUES_TABLE + buckets[:, None] * D + dims[None, :], mask=buckets[:, None] < n_buckets,
                          other=0.0)
            acc += tl.dot(per_bucket.to(r_v.dtype), r_v, input_precision=PRECISION).to(tl.float32)
    return m_new, l_i, acc, lower, upper


@triton.jit(do_not_specialize=UNSPECIALIZED)
def attention_forward(
    Q, K, V, O, ROW_MAX, ROW_LOG_SUM, TABLE, BUCKET, SLOPES, PAD, FIRST_KEY, LENGTHS, VALUES_TABLE,
    sqb, sqh, sqi, skb, skh, skj, svb, svh, svj, sob, soh, soi,
    H, Lq, Lk, n_buckets, lo, hi, seed, dropout_p, farthest_weight,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
    ROW_TABLE: tl.constexpr, SHARED_TABLE: tl.constexpr, ALIBI: tl.constexpr, HAS_PAD: tl.constexpr,
    RAMP: tl.constexpr, DROPOUT: tl.constexpr, VALUES: tl.constexpr, WINDOW: tl.constexpr, PRECISION: tl.constexpr,
):
    """One block of BLOCK_M queries of one (batch, head): O_i = sum_j f_ij exp(s_ij - m_i)
    (v_j + R_V[c_ij]) / l_i; the row's maximum m_i and log l_i are kept for the backward.

    A row whose keys are all hidden (m_i = MASKED) averages over all Lk keys, as the
    reference path does (the causal loop then takes every key block). Its m_i and log l_i
    are kept apart because m_i + log l_i would round to m_i."""
    start = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    rows = start + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D)
    q = tl.load(Q + b * sqb + h * sqh + rows[:, None] * sqi + dims[None, :], mask=rows[:, None] < Lq, other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    lower = tl.zeros((BLOCK_M,), tl.float32)
    upper = tl.zeros((BLOCK_M,), tl.float32)
    end = Lk
    if CAUSAL:  # no key block after the block's last query, but for rows that see no key
        end = last_key_block_end(start, FIRST_KEY, b, Lq, Lk, BLOCK_M, HAS_PAD)
    for first in range(0, end, BLOCK_N):
        m_i, l_i, acc, lower, upper = forward_tile(
            q, m_i, l_i, acc, lower, upper, start, first, b, h, bh, rows, dims, Lq, Lk, K, V, VALUES_TABLE, TABLE,
            BUCKET, SLOPES, PAD, LENGTHS, skb, skh, skj, svb, svh, svj, n_buckets, lo, hi, seed, dropout_p,
            farthest_weight, D, BLOCK_N, CAUSAL, ROW_TABLE, SHARED_TABLE, ALIBI, HAS_PAD, RAMP, DROPOUT, VALUES,
            WINDOW, PRECISION)
    if VALUES:  # the edge buckets' weights times R_V's first and last row
        r_first = tl.load(VALUES_TABLE + dims).to(tl.float32)
        r_last = tl.load(VALUES_TABLE + (n_buckets - 1) * D + dims).to(tl.float32)
        acc += lower[:, None] * r_first[None, :] + upper[:, None] * r_last[None, :]
    inside = rows < Lq
    tl.store(O + b * sob + h * soh + rows[:, None] * soi + dims[None, :], (acc / l_i[:, None]).to(O.dtype.element_ty),
             mask=inside[:, None])
    tl.store(ROW_MAX + bh * Lq + rows, m_i, mask=inside)
    tl.store(ROW_LOG_SUM + bh * Lq + rows, tl.log(l_i), mask=inside)


@triton.jit(do_not_specialize=UNSPECIALIZED)
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
