"""What the forward and backward kernels compute alike for one (query block, key block)
tile: the logits with every relative term and mask, the per-pair factor on the weights
(the decaying mask's ramp, attention dropout), and per-row sums per distance bucket."""
import triton
import triton.language as tl

# A logit that vanishes in the softmax and stays finite: a fully masked row averages,
# as `self_attention.masked_value` makes the reference path do, instead of giving NaN.
# (A kernel reads a global only as a tl.constexpr.)
MASKED = tl.constexpr(-1.0e30)


@triton.jit
def dropout_keep(seed, bh, rows, cols, Lq, Lk, dropout_p):
    """Which pairs attention dropout keeps, from Philox numbers at the pair's flat index
    (bh, i, j) of the (batch * heads, Lq, Lk) weights: backward draws the same mask again
    (FlashAttention's way), and `keep_mask` writes it out for the parity tests."""
    offsets = (bh * Lq + rows[:, None]) * Lk + cols[None, :]
    return tl.rand(seed, offsets) >= dropout_p


@triton.jit
def tile_logits(q, k, b, h, rows, cols, Lq, Lk,
                TABLE, stb, sth, sti, BUCKET, SLOPES, PAD,
                CAUSAL: tl.constexpr, HAS_TABLE: tl.constexpr, ALIBI: tl.constexpr, HAS_PAD: tl.constexpr,
                PRECISION: tl.constexpr):
    """s_ij = q_i . k_j + T[b, h, i, bucket(j - i)] - m_h |j - i| for the scaled queries
    q (M, d) and keys k (N, d); hidden pairs (padding, the future) get MASKED and keys
    past Lk -inf (no key at all). The queries are the last Lq of Lk positions (decoding
    step by step with the layer cache). Returns the logits (float32) and the bucket of
    each pair (with a table: the distances -(Lk-1)..Lq-1 index BUCKET). PRECISION: that of
    float32 products (`function.dot_precision`)."""
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION).to(tl.float32)
    distance = cols[None, :] - (rows[:, None] + (Lk - Lq))
    bucket = distance
    if HAS_TABLE:
        bucket = tl.load(BUCKET + tl.minimum(tl.maximum(distance + (Lk - 1), 0), Lk + Lq - 2))  # Shaw's and Music's q_i . R[clip(j - i)] (a row per query), T5's bias (rows share it)
        row = tl.minimum(rows, Lq - 1)
        s += tl.load(TABLE + b * stb + h * sth + row[:, None] * sti + bucket).to(tl.float32)
    if ALIBI:
        s -= tl.load(SLOPES + h) * tl.abs(distance).to(tl.float32)
    hidden = rows[:, None] < 0  # all False, of the tile's shape
    if HAS_PAD:
        hidden |= tl.load(PAD + b * Lk + cols, mask=cols < Lk, other=1)[None, :] != 0
    if CAUSAL:
        hidden |= distance > 0
    s = tl.where(hidden, MASKED, s)
    return tl.where(cols[None, :] < Lk, s, float("-inf")), bucket


@triton.jit
def tile_factor(b, bh, rows, cols, Lq, Lk, LENGTHS, seed, dropout_p, farthest_weight,
                RAMP: tl.constexpr, DROPOUT: tl.constexpr, M: tl.constexpr, N: tl.constexpr):
    """f_ij that multiplies the normalized weight a_ij in z_i = sum_j f_ij a_ij v_j:
    the decaying mask's ramp r_ij (RAMP 1 causal: 1 - (1 - w) |j - i| / max(i, 1); RAMP 2
    bidirectional over a sentence of n: 1 - (1 - w) |j - i| / max(i, n - 1 - i, 1), 0 at
    padding; w = farthest_weight, `decaying_mask.ramp`) times keep_ij / (1 - p) for
    dropout. Not renormalized: the softmax's denominator sums the a_ij alone."""
    factor = tl.full((M, N), 1.0, tl.float32)
    if RAMP != 0:
        position = rows[:, None] + (Lk - Lq)
        distance = tl.abs(cols[None, :] - position).to(tl.float32)
        if RAMP == 1:
            farthest = tl.maximum(position, 1)
            factor = 1.0 - (1.0 - farthest_weight) * distance / farthest.to(tl.float32)
        else:
            n = tl.load(LENGTHS + b)
            farthest = tl.maximum(tl.maximum(position, n - 1 - position), 1)
            ramp = 1.0 - (1.0 - farthest_weight) * distance / farthest.to(tl.float32)
            factor = tl.where(cols[None, :] < n, ramp, 0.0)
    if DROPOUT:
        keep = dropout_keep(seed, bh, rows, cols, Lq, Lk, dropout_p)
        factor = tl.where(keep, factor / (1.0 - dropout_p), 0.0)
    return factor


@triton.jit
def add_bucket_sums(acc, x, bucket, NB_PAD: tl.constexpr):
    """acc[i, c] += sum of x[i, j] over the pairs j whose bucket is c, for a tile x
    (M, N) and acc (M, NB_PAD). A tile of one bucket (past Shaw's clipping distance, or
    in one T5 bucket) is a row sum; otherwise one masked row sum per bucket the tile
    holds (a loop, not an (M, N, NB_PAD) comparison: fewer registers, faster to compile)."""
    slots = tl.arange(0, NB_PAD)
    first = tl.min(tl.min(bucket, axis=1), axis=0)
    last = tl.max(tl.max(bucket, axis=1), axis=0)
    for c in range(first, last + 1):
        sums = tl.sum(tl.where(bucket == c, x, 0.0), axis=1)
        acc += tl.where(slots[None, :] == c, sums[:, None], 0.0)
    return acc
