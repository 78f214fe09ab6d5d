"""What the forward and backward kernels compute alike for one (query block, key block)
tile: the logits with every relative term and mask, the per-pair factor on the weights
(the decaying mask's ramp, attention dropout), and the per-bucket sums of a tile, each in
O(M N) for a tile of M queries and N keys."""
import triton
import triton.language as tl

# A logit that vanishes in the softmax and stays finite, as `self_attention.masked_value`
# makes the reference path do: a row whose keys are all hidden averages over its keys
# instead of giving NaN. (A kernel reads a global only as a tl.constexpr.)
MASKED = tl.constexpr(-1.0e30)
# The integers the kernels are not compiled apart for (Triton would by their value 1 and their
# divisibility by 16): the lengths, and dropout's seed, new at every call. A kernel then compiles
# once whatever the lengths, and the first-use check (first_use.py) runs the kernel that runs after.
UNSPECIALIZED = ["Lq", "Lk", "seed"]


@triton.jit
def dropout_keep(seed, bh, rows, cols, Lq, Lk, dropout_p):
    """Which pairs attention dropout keeps, from Philox numbers at the pair's flat index
    (bh, i, j) of the (batch * heads, Lq, Lk) weights: backward draws the same mask again
    (FlashAttention's way), and `keep_mask` writes it out for the parity tests."""
    offsets = (bh * Lq + rows[:, None]) * Lk + cols[None, :]
    return tl.rand(seed, offsets) >= dropout_p


@triton.jit
def row_table_bucket(distance, lo, hi):
    """The column of a per-query table (Shaw's and Music's Q R^T) that holds distance
    j - i: clip(j - i, lo, hi) - lo."""
    return tl.minimum(tl.maximum(distance, lo), hi) - lo


@triton.jit
def tile_logits(q, k, b, h, bh, rows, cols, Lq, Lk, TABLE, BUCKET, SLOPES, PAD, n_buckets, lo, hi,
                CAUSAL: tl.constexpr, ROW_TABLE: tl.constexpr, SHARED_TABLE: tl.constexpr, ALIBI: tl.constexpr,
                HAS_PAD: tl.constexpr, PRECISION: tl.constexpr):
    """s_ij = q_i . k_j + T[i, bucket(j - i)] - m_h |j - i| for the scaled queries q (M, d)
    and keys k (N, d), the queries being the last Lq of Lk positions (decoding step by step
    with the layer cache). T: a per-query table (ROW_TABLE: Q R^T, (batch * heads, Lq,
    n_buckets), read at clip(j - i, lo, hi) - lo), or one row per head shared by all queries
    (SHARED_TABLE: T5's bias, (heads, n_buckets), read at BUCKET[j - i + Lk - 1]).
    Returns the logits (float32; MASKED where the pair is hidden: padding, the future; -inf
    past Lk, no key at all), the hidden pairs, and the distances j - i. PRECISION: that of
    float32 products (`function.dot_precision`)."""
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION).to(tl.float32)
    distance = cols[None, :] - (rows[:, None] + (Lk - Lq))
    row = tl.minimum(rows, Lq - 1)[:, None]
    if ROW_TABLE:
        s += tl.load(TABLE + (bh * Lq + row) * n_buckets + row_table_bucket(distance, lo, hi)).to(tl.float32)
    if SHARED_TABLE:
        bucket = tl.load(BUCKET + tl.minimum(tl.maximum(distance + (Lk - 1), 0), Lk + Lq - 2))
        s += tl.load(TABLE + h * n_buckets + bucket).to(tl.float32)
    if ALIBI:
        s -= tl.load(SLOPES + h) * tl.abs(distance).to(tl.float32)
    hidden = row < 0  # all False, broadcast to the tile's shape below
    if HAS_PAD:
        hidden = hidden | (tl.load(PAD + b * Lk + cols, mask=cols < Lk, other=1)[None, :] != 0)
    if CAUSAL:
        hidden = hidden | (distance > 0)
    hidden = hidden & (cols[None, :] < Lk)
    s = tl.where(hidden, MASKED, s)
    return tl.where(cols[None, :] < Lk, s, float("-inf")), hidden, distance


@triton.jit
def last_key_block_end(start, FIRST_KEY, b, Lq, Lk, BLOCK_M: tl.constexpr, HAS_PAD: tl.constexpr):
    """Causal: the end of the keys a block of queries (start..) sees, the end of its last
    query's past; all Lk keys where its first query sees no key (every key before it is
    padding: FIRST_KEY[b], the batch's first key that is not, comes after it), as the
    reference path averages over all of them."""
    end = tl.minimum(Lk, start + BLOCK_M + Lk - Lq)
    if HAS_PAD:
        end = tl.where(start + Lk - Lq < tl.load(FIRST_KEY + b), Lk, end)
    return end


@triton.jit
def tile_factor(b, bh, rows, cols, Lq, Lk, LENGTHS, seed, dropout_p, farthest_weight,
                RAMP: tl.constexpr, DROPOUT: tl.constexpr, M: tl.constexpr, N: tl.constexpr):
    """f_ij that multiplies the normalized weight a_ij in z_i = sum_j f_ij a_ij v_j:
    the decaying mask's ramp r_ij (RAMP 1 causal: 1 - (1 - w) |j - i| / max(i, 1), 0 in the
    future; RAMP 2 bidirectional over a sentence of n: 1 - (1 - w) |j - i| / max(i, n - 1 - i,
    1), 0 at padding; w = farthest_weight, `decaying_mask.ramp`) times keep_ij / (1 - p) for
    dropout. Not renormalized: the softmax's denominator sums the a_ij alone."""
    factor = tl.full((M, N), 1.0, tl.float32)
    if RAMP != 0:
        position = rows[:, None] + (Lk - Lq)
        distance = tl.abs(cols[None, :] - position).to(tl.float32)
        if RAMP == 1:
            farthest = tl.maximum(position, 1)
            ramp = 1.0 - (1.0 - farthest_weight) * distance / farthest.to(tl.float32)
            factor = tl.where(cols[None, :] <= position, ramp, 0.0)
        else:
            n = tl.load(LENGTHS + b)
            farthest = tl.maximum(tl.maximum(position, n - 1 - position), 1)
            ramp = 1.0 - (1.0 - farthest_weight) * distance / farthest.to(tl.float32)
            factor = tl.where(cols[None, :] < n, ramp, 0.0)
    if DROPOUT:
        keep = dropout_keep(seed, bh, rows, cols, Lq, Lk, dropout_p)
        factor = tl.where(keep, factor / (1.0 - dropout_p), 0.0)
    return factor


# --- Per-bucket sums ------------------------------------------------------------------------
# A per-query table clips distances to lo..hi: each row meets each bucket strictly inside
# (lo < j - i < hi) at most once, at j = i + d, and the two edge buckets (d <= lo, d >= hi)
# take the rest of the row. So the inside buckets are the tile's pairs moved to their bucket
# (a gather along the row, or a store to that row's bucket) and the edges two masked row sums:
# O(M N) a tile, where one masked row sum per bucket costs O(M N buckets).


@triton.jit
def edge_sums(x, distance, lo, hi):
    """The sums of x (M, N) over each row's pairs at distance <= lo and >= hi."""
    return tl.sum(tl.where(distance <= lo, x, 0.0), axis=1), tl.sum(tl.where(distance >= hi, x, 0.0), axis=1)


@triton.jit
def nearest_distance(start, first, Lq, Lk, M: tl.constexpr):
    """The smallest j - i of the tile of queries start.. (M of them) and keys first.."""
    return first - (start + M - 1 + Lk - Lq)


@triton.jit
def tile_reaches_inside(start, first, Lq, Lk, lo, hi, M: tl.constexpr, N: tl.constexpr):
    """Does the tile (queries start.., keys first..) hold a pair with lo < j - i < hi?"""
    nearest = nearest_distance(start, first, Lq, Lk, M)
    return (nearest + (M - 1) + (N - 1) > lo) & (nearest < hi)


@triton.jit
def inside_buckets(x, start, first, Lq, Lk, lo, hi, W: tl.constexpr):
    """(M, W): x[i, j] moved to column j - i - lo - c0 of row i where lo < j - i < hi, else 0:
    each row's inside buckets (one pair each at most) gathered from the tile's row, for the W
    buckets from c0 = max(nearest - lo, 0) on (a tile's pairs span M + N - 1 distances, so W of
    that many holds them whatever the number of buckets). Returns them and c0."""
    M: tl.constexpr = x.shape[0]
    N: tl.constexpr = x.shape[1]
    first_bucket = tl.maximum(nearest_distance(start, first, Lq, Lk, M) - lo, 0)
    buckets = first_bucket + tl.arange(0, W)[None, :]
    # the key j = i + lo + bucket, as a column of the tile
    col = tl.arange(0, M)[:, None] + buckets + (start + Lk - Lq + lo - first)
    gathered = tl.gather(x, tl.minimum(tl.maximum(col, 0), N - 1), axis=1)
    return tl.where((col >= 0) & (col < N) & (buckets > 0) & (buckets < hi - lo), gathered, 0.0), first_bucket


@triton.jit
def store_inside_buckets(OUT, x, bh, rows, Lq, Lk, cols, distance, n_buckets, lo, hi):
    """Store x (M, N) at (row, j - i - lo) of a (batch * heads, Lq, n_buckets) float32 table
    where lo < j - i < hi: every such (row, bucket) has one pair, in one tile, so the store
    is the whole sum (the table starts as zeros)."""
    inside = (distance > lo) & (distance < hi) & (rows[:, None] < Lq) & (cols[None, :] < Lk)
    tl.store(OUT + (bh * Lq + rows[:, None]) * n_buckets + (distance - lo), x, mask=inside)


@triton.jit
def store_edges(OUT, lower, upper, bh, rows, Lq, n_buckets):
    """Store each row's edge sums into the first and last bucket of its table row."""
    at = OUT + (bh * Lq + rows) * n_buckets
    tl.store(at, lower, mask=rows < Lq)
    tl.store(at + n_buckets - 1, upper, mask=rows < Lq)


@triton.jit
def add_distance_sums(OUT, x, bh, start, first, Lq, Lk):
    """Add to OUT[bh, j - i + Lk - 1] ((batch * heads, Lq + Lk - 1) float32) the sums of x
    (N, N) over the tile's pairs at each distance, its diagonals: each row rotated left by its
    index (a gather), column c then holds the pairs at j - i = c (row + c < N) and c - N (the
    rest), two column sums of 2 N distances."""
    N: tl.constexpr = x.shape[1]
    tl.static_assert(x.shape[0] == N, "a square tile")
    rows = tl.arange(0, N)[:, None]
    cols = tl.arange(0, N)[None, :]
    rotated = tl.gather(x, (rows + cols) % N, axis=1)
    wrapped = rows + cols >= N
    # the tile's pair (r, c) is at distance first - start - (Lk - Lq) + c - r
    index = first - start - (Lk - Lq) + Lk - 1 + tl.arange(0, N)
    at = OUT + bh * (Lq + Lk - 1)
    tl.atomic_add(at + index, tl.sum(tl.where(wrapped, 0.0, rotated), axis=0),
                  mask=(index >= 0) & (index < Lq + Lk - 1))
    tl.atomic_add(at + index - N, tl.sum(tl.where(wrapped, rotated, 0.0), axis=0),
                  mask=(index - N >= 0) & (index - N < Lq + Lk - 1))
