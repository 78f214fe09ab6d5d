"""The backward kernels (FlashAttention-2's split): one over key blocks for dK and dV, one
over query blocks for dQ and the table's gradient; both recompute the weights from the
saved log-sum-exp and draw the same dropout mask again."""
import triton
import triton.language as tl

from onmt_posenc.model.attention.fused_kernel.tiles import add_bucket_sums, tile_factor, tile_logits


@triton.jit
def pair_gradients(q, k, v, do, lse, delta, b, h, bh, rows, cols, Lq, Lk,
                   TABLE, stb, sth, sti, BUCKET, SLOPES, PAD, LENGTHS, G, seed, dropout_p, farthest_weight,
                   CAUSAL: tl.constexpr, HAS_TABLE: tl.constexpr, ALIBI: tl.constexpr, HAS_PAD: tl.constexpr,
                   RAMP: tl.constexpr, DROPOUT: tl.constexpr, VALUES: tl.constexpr, NB_PAD: tl.constexpr,
                   M: tl.constexpr, N: tl.constexpr, PRECISION: tl.constexpr):
    """For z_i = sum_j f_ij a_ij (v_j + R_V[c_ij]), a_ij = exp(s_ij - LSE_i): the weights
    f_ij a_ij that dV takes, dS_ij = a_ij (f_ij dO_i . (v_j + R_V[c_ij]) - D_i) with
    D_i = dO_i . z_i (the softmax's Jacobian; Dao 2023, eq. in sec. 3.1.2), and the buckets.
    dO_i . R_V[c] is G[i, c] = (dO R_V^T)[i, c], computed before the kernel."""
    s, bucket = tile_logits(q, k, b, h, rows, cols, Lq, Lk, TABLE, stb, sth, sti, BUCKET, SLOPES, PAD,
                            CAUSAL, HAS_TABLE, ALIBI, HAS_PAD, PRECISION)
    a = tl.exp(s - lse[:, None])
    factor = tile_factor(b, bh, rows, cols, Lq, Lk, LENGTHS, seed, dropout_p, farthest_weight, RAMP, DROPOUT, M, N)
    dp = tl.dot(do, tl.trans(v), input_precision=PRECISION).to(tl.float32)
    if VALUES:
        row = tl.minimum(rows, Lq - 1)
        dp += tl.load(G + (bh * Lq + row[:, None]) * NB_PAD + bucket)
    ds = a * (factor * dp - delta[:, None])
    return a * factor, ds, bucket


@triton.jit
def attention_backward_keys(
    Q, K, V, DO, LSE, DELTA, DK, DV, TABLE, BUCKET, SLOPES, PAD, LENGTHS, G,
    sqb, sqh, sqi, skb, skh, skj, svb, svh, svj, sob, soh, soi, stb, sth, sti,
    H, Lq, Lk, seed, dropout_p, farthest_weight,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
    HAS_TABLE: tl.constexpr, ALIBI: tl.constexpr, HAS_PAD: tl.constexpr, RAMP: tl.constexpr,
    DROPOUT: tl.constexpr, VALUES: tl.constexpr, NB_PAD: tl.constexpr, PRECISION: tl.constexpr,
):
    """dV_j = sum_i f_ij a_ij dO_i and dK_j = sum_i dS_ij q_i for one block of keys. DK and
    DV are contiguous (batch, heads, Lk, d); DO has O's strides."""
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
    if CAUSAL:  # no query block before the block's first key
        begin = tl.maximum(first_key - (Lk - Lq), 0) // BLOCK_M * BLOCK_M
    for start in range(begin, Lq, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        valid = rows < Lq
        q = tl.load(Q + b * sqb + h * sqh + rows[:, None] * sqi + dims[None, :], mask=valid[:, None], other=0.0)
        do = tl.load(DO + b * sob + h * soh + rows[:, None] * soi + dims[None, :], mask=valid[:, None], other=0.0)
        lse = tl.load(LSE + bh * Lq + rows, mask=valid, other=0.0)
        delta = tl.load(DELTA + bh * Lq + rows, mask=valid, other=0.0)
        weights, ds, _ = pair_gradients(q, k, v, do, lse, delta, b, h, bh, rows, cols, Lq, Lk, TABLE, stb, sth, sti,
                                        BUCKET, SLOPES, PAD, LENGTHS, G, seed, dropout_p, farthest_weight, CAUSAL,
                                        HAS_TABLE, ALIBI, HAS_PAD, RAMP, DROPOUT, VALUES, NB_PAD, BLOCK_M, BLOCK_N,
                                        PRECISION)
        weights = tl.where(valid[:, None], weights, 0.0)
        ds = tl.where(valid[:, None], ds, 0.0)
        dv += tl.dot(tl.trans(weights.to(do.dtype)), do, input_precision=PRECISION).to(tl.float32)
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=PRECISION).to(tl.float32)
    out = (bh * Lk + cols[:, None]) * D + dims[None, :]
    tl.store(DK + out, dk.to(DK.dtype.element_ty), mask=inside)
    tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=inside)


@triton.jit
def attention_backward_queries(
    Q, K, V, DO, LSE, DELTA, DQ, DTABLE, TABLE, BUCKET, SLOPES, PAD, LENGTHS, G,
    sqb, sqh, sqi, skb, skh, skj, svb, svh, svj, sob, soh, soi, stb, sth, sti,
    H, Lq, Lk, seed, dropout_p, farthest_weight,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
    HAS_TABLE: tl.constexpr, ALIBI: tl.constexpr, HAS_PAD: tl.constexpr, RAMP: tl.constexpr,
    DROPOUT: tl.constexpr, VALUES: tl.constexpr, NB_PAD: tl.constexpr, ROW_TABLE: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """dQ_i = sum_j dS_ij k_j for one block of queries, and the table's gradient
    dT[i, c] = sum of dS_ij over bucket c: stored per row for a table of one row per query
    (ROW_TABLE: Shaw's, Music's Q R^T), else summed over the rows and added atomically
    into (batch, heads, NB_PAD) float32 (T5's bias, shared by all rows)."""
    start = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    rows = start + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D)
    valid = rows < Lq
    q = tl.load(Q + b * sqb + h * sqh + rows[:, None] * sqi + dims[None, :], mask=valid[:, None], other=0.0)
    do = tl.load(DO + b * sob + h * soh + rows[:, None] * soi + dims[None, :], mask=valid[:, None], other=0.0)
    lse = tl.load(LSE + bh * Lq + rows, mask=valid, other=0.0)
    delta = tl.load(DELTA + bh * Lq + rows, mask=valid, other=0.0)
    dq = tl.zeros((BLOCK_M, D), tl.float32)
    dtable = tl.zeros((BLOCK_M, NB_PAD), tl.float32)
    end = Lk
    if CAUSAL:
        end = tl.minimum(Lk, start + BLOCK_M + Lk - Lq)
    for first in range(0, end, BLOCK_N):
        cols = first + tl.arange(0, BLOCK_N)
        k = tl.load(K + b * skb + h * skh + cols[:, None] * skj + dims[None, :], mask=cols[:, None] < Lk, other=0.0)
        v = tl.load(V + b * svb + h * svh + cols[:, None] * svj + dims[None, :], mask=cols[:, None] < Lk, other=0.0)
        _, ds, bucket = pair_gradients(q, k, v, do, lse, delta, b, h, bh, rows, cols, Lq, Lk, TABLE, stb, sth, sti,
                                       BUCKET, SLOPES, PAD, LENGTHS, G, seed, dropout_p, farthest_weight, CAUSAL,
                                       HAS_TABLE, ALIBI, HAS_PAD, RAMP, DROPOUT, VALUES, NB_PAD, BLOCK_M, BLOCK_N,
                                        PRECISION)
        ds = tl.where(valid[:, None] & (cols[None, :] < Lk), ds, 0.0)
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION).to(tl.float32)
        if HAS_TABLE:
            dtable = add_bucket_sums(dtable, ds, bucket, NB_PAD)
    tl.store(DQ + (bh * Lq + rows[:, None]) * D + dims[None, :], dq.to(DQ.dtype.element_ty), mask=valid[:, None])
    if HAS_TABLE:
        slots = tl.arange(0, NB_PAD)
        if ROW_TABLE:
            tl.store(DTABLE + (bh * Lq + rows[:, None]) * NB_PAD + slots[None, :], dtable, mask=valid[:, None])
        else:
            tl.atomic_add(DTABLE + bh * NB_PAD + slots, tl.sum(dtable, axis=0))
