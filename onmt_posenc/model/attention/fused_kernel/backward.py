"""The backward kernels (FlashAttention-2's split): one over key blocks for dK and dV, one
over query blocks for dQ and the tables' gradients; both recompute the weights from the
row statistics kept by the forward and draw the same dropout mask again."""
import triton
import triton.language as tl

from onmt_posenc.model.attention.fused_kernel.tiles import (UNSPECIALIZED, add_distance_sums, edge_sums,
                                                            last_key_block_end, row_table_bucket, store_edges,
                                                            store_inside_buckets, tile_factor, tile_logits)


@triton.jit
def pair_gradients(q, k, v, do, row_max, row_log_sum, delta, b, h, bh, rows, cols, Lq, Lk,
                   TABLE, BUCKET, SLOPES, PAD, LENGTHS, G, n_buckets, lo, hi, seed, dropout_p, farthest_weight,
                   CAUSAL: tl.constexpr, ROW_TABLE: tl.constexpr, SHARED_TABLE: tl.constexpr, ALIBI: tl.constexpr,
                   HAS_PAD: tl.constexpr, RAMP: tl.constexpr, DROPOUT: tl.constexpr, VALUES: tl.constexpr,
                   M: tl.constexpr, N: tl.constexpr, PRECISION: tl.constexpr):
    """For z_i = sum_j f_ij a_ij (v_j + R_V[c_ij]), a_ij = exp(s_ij - m_i - log l_i): the
    weights f_ij a_ij that dV takes, dS_ij = a_ij (f_ij dO_i . (v_j + R_V[c_ij]) - D_i) with
    D_i = dO_i . z_i (the softmax's Jacobian; Dao 2023, sec. 3.1.2), 0 at hidden pairs (the
    reference's masked_fill passes no gradient there, which matters in a row whose keys are
    all hidden), and the distances j - i. dO_i . R_V[c] is G[i, c] = (dO R_V^T)[i, c],
    computed before the kernel."""
    s, hidden, distance = tile_logits(q, k, b, h, bh, rows, cols, Lq, Lk, TABLE, BUCKET, SLOPES, PAD, n_buckets,
                                      lo, hi, CAUSAL, ROW_TABLE, SHARED_TABLE, ALIBI, HAS_PAD, PRECISION)
    a = tl.exp((s - row_max[:, None]) - row_log_sum[:, None])
    factor = tile_factor(b, bh, rows, cols, Lq, Lk, LENGTHS, seed, dropout_p, farthest_weight, RAMP, DROPOUT, M, N)
    dp = tl.dot(do, tl.trans(v), input_precision=PRECISION).to(tl.float32)
    if VALUES:
        row = tl.minimum(rows, Lq - 1)
        dp += tl.load(G + (bh * Lq + row[:, None]) * n_buckets + row_table_bucket(distance, lo, hi))
    ds = tl.where(hidden, 0.0, a * (factor * dp - delta[:, None]))
    return a * factor, ds, distance


@triton.jit
def load_rows(X, b, h, rows, dims, sxb, sxh, sxi, Lq):
    return tl.load(X + b * sxb + h * sxh + rows[:, None] * sxi + dims[None, :], mask=rows[:, None] < Lq, other=0.0)


@triton.jit
def load_row_statistics(ROW_MAX, ROW_LOG_SUM, DELTA, bh, rows, Lq):
    valid = rows < Lq
    return (tl.load(ROW_MAX + bh * Lq + rows, mask=valid, other=0.0),
            tl.load(ROW_LOG_SUM + bh * Lq + rows, mask=valid, other=0.0),
            tl.load(DELTA + bh * Lq + rows, mask=valid, other=0.0))


@triton.jit(do_not_specialize=UNSPECIALIZED)
def attention_backward_keys(
    Q, K, V, DO, ROW_MAX, ROW_LOG_SUM, DELTA, DK, DV, TABLE, BUCKET, SLOPES, PAD, FIRST_KEY, LENGTHS, G,
    sqb, sqh, sqi, skb, skh, skj, svb, svh, svj, sob, soh, soi,
    H, Lq, Lk, n_buckets, lo, hi, seed, dropout_p, farthest_weight,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
    ROW_TABLE: tl.constexpr, SHARED_TABLE: tl.constexpr, ALIBI: tl.constexpr, HAS_PAD: tl.constexpr,
    RAMP: tl.constexpr, DROPOUT: tl.constexpr, VALUES: tl.constexpr, PRECISION: tl.constexpr,
):
    """dV_j = sum_i f_ij a_ij dO_i and dK_j = sum_i dS_ij q_i for one block of keys. DK and
    DV are contiguous (batch, heads, Lk, d); DO has O's strides. Causal: no query block
    before the block's first key, unless the first query sees no key (FIRST_KEY[b], the
    first key that is not padding, comes after it): the rows that see none take every key."""
    first_key = tl.program_id(0) * BLOCK_N
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    cols = first_key + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, D)
    inside = cols[:, None] < Lk
    k = tl.load(K + b * skb + h * skh + cols[:, None] * skj + dims[None, :], mask=inside, other=0.0)
    v = tl.load(V + b * svb + h * svh + cols[:, None] * svj + dims[None, :], mask=inside, other=0.0)
    dk = tl.zeros((BLOCK_N, D), tl.float32)
    dv = tl.zeros((BLOCK_N, D), tl.float32)
    begin = 0
    if CAUSAL:
        begin = tl.maximum(first_key - (Lk - Lq), 0) // BLOCK_M * BLOCK_M
        if HAS_PAD:
            begin = tl.where(Lk - Lq < tl.load(FIRST_KEY + b), 0, begin)
    for start in range(begin, Lq, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        valid = rows < Lq
        q = load_rows(Q, b, h, rows, dims, sqb, sqh, sqi, Lq)
        do = load_rows(DO, b, h, rows, dims, sob, soh, soi, Lq)
        row_max, row_log_sum, delta = load_row_statistics(ROW_MAX, ROW_LOG_SUM, DELTA, bh, rows, Lq)
        weights, ds, _ = pair_gradients(q, k, v, do, row_max, row_log_sum, delta, b, h, bh, rows, cols, Lq, Lk,
                                        TABLE, BUCKET, SLOPES, PAD, LENGTHS, G, n_buckets, lo, hi, seed, dropout_p,
                                        farthest_weight, CAUSAL, ROW_TABLE, SHARED_TABLE, ALIBI, HAS_PAD, RAMP,
                                        DROPOUT, VALUES, BLOCK_M, BLOCK_N, PRECISION)
        weights = tl.where(valid[:, None], weights, 0.0)
        ds = tl.where(valid[:, None], ds, 0.0)
        dv += tl.dot(tl.trans(weights.to(do.dtype)), do, input_precision=PRECISION).to(tl.float32)
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=PRECISION).to(tl.float32)
    out = (bh * Lk + cols[:, None]) * D + dims[None, :]
    tl.store(DK + out, dk.to(DK.dtype.element_ty), mask=inside)
    tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=inside)


@triton.jit(do_not_specialize=UNSPECIALIZED)
def attention_backward_queries(
    Q, K, V, DO, ROW_MAX, ROW_LOG_SUM, DELTA, DQ, DTABLE, W, TABLE, BUCKET, SLOPES, PAD, FIRST_KEY, LENGTHS, G,
    sqb, sqh, sqi, skb, skh, skj, svb, svh, svj, sob, soh, soi,
    H, Lq, Lk, n_buckets, lo, hi, seed, dropout_p, farthest_weight,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
    ROW_TABLE: tl.constexpr, SHARED_TABLE: tl.constexpr, ALIBI: tl.constexpr, HAS_PAD: tl.constexpr,
    RAMP: tl.constexpr, DROPOUT: tl.constexpr, VALUES: tl.constexpr, PRECISION: tl.constexpr,
):
    """dQ_i = sum_j dS_ij k_j for one block of queries, and the sums per bucket that the
    tables' gradients take (`function.py` multiplies them out):
    - ROW_TABLE: dT[i, c] = sum of dS_ij over bucket c, into DTABLE (batch * heads, Lq,
      n_buckets) float32 zeros;
    - SHARED_TABLE: the sums of dS_ij per distance j - i, added into DTABLE (batch * heads,
      Lq + Lk - 1) float32 zeros (T5's buckets are then summed from them);
    - VALUES: W[i, c] = sum of f_ij a_ij over bucket c into W, as DTABLE, for dR_V = W^T dO.
    Causal: a block holding a row that sees no key takes every key (`last_key_block_end`)."""
    start = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    rows = start + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D)
    valid = rows < Lq
    q = load_rows(Q, b, h, rows, dims, sqb, sqh, sqi, Lq)
    do = load_rows(DO, b, h, rows, dims, sob, soh, soi, Lq)
    row_max, row_log_sum, delta = load_row_statistics(ROW_MAX, ROW_LOG_SUM, DELTA, bh, rows, Lq)
    dq = tl.zeros((BLOCK_M, D), tl.float32)
    table_lower = tl.zeros((BLOCK_M,), tl.float32)
    table_upper = tl.zeros((BLOCK_M,), tl.float32)
    weight_lower = tl.zeros((BLOCK_M,), tl.float32)
    weight_upper = tl.zeros((BLOCK_M,), tl.float32)
    end = Lk
    if CAUSAL:
        end = last_key_block_end(start, FIRST_KEY, b, Lq, Lk, BLOCK_M, HAS_PAD)
    for first in range(0, end, BLOCK_N):
        cols = first + tl.arange(0, BLOCK_N)
        k = tl.load(K + b * skb + h * skh + cols[:, None] * skj + dims[None, :], mask=cols[:, None] < Lk, other=0.0)
        v = tl.load(V + b * svb + h * svh + cols[:, None] * svj + dims[None, :], mask=cols[:, None] < Lk, other=0.0)
        weights, ds, distance = pair_gradients(q, k, v, do, row_max, row_log_sum, delta, b, h, bh, rows, cols, Lq,
                                               Lk, TABLE, BUCKET, SLOPES, PAD, LENGTHS, G, n_buckets, lo, hi, seed,
                                               dropout_p, farthest_weight, CAUSAL, ROW_TABLE, SHARED_TABLE, ALIBI,
                                               HAS_PAD, RAMP, DROPOUT, VALUES, BLOCK_M, BLOCK_N, PRECISION)
        ds = tl.where(valid[:, None] & (cols[None, :] < Lk), ds, 0.0)
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION).to(tl.float32)
        if ROW_TABLE:
            below, above = edge_sums(ds, distance, lo, hi)
            table_lower += below
            table_upper += above
            store_inside_buckets(DTABLE, ds, bh, rows, Lq, Lk, cols, distance, n_buckets, lo, hi)
        if SHARED_TABLE:
            add_distance_sums(DTABLE, ds, bh, start, first, Lq, Lk)
        if VALUES:
            below, above = edge_sums(weights, distance, lo, hi)
            weight_lower += below
            weight_upper += above
            store_inside_buckets(W, weights, bh, rows, Lq, Lk, cols, distance, n_buckets, lo, hi)
    tl.store(DQ + (bh * Lq + rows[:, None]) * D + dims[None, :], dq.to(DQ.dtype.element_ty), mask=valid[:, None])
    if ROW_TABLE:
        store_edges(DTABLE, table_lower, table_upper, bh, rows, Lq, n_buckets)
    if VALUES:
        store_edges(W, weight_lower, weight_upper, bh, rows, Lq, n_buckets)
