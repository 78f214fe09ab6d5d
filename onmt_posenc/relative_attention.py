"""Self-attention without the (L, L, d) tensor: Shaw et al. (2018) and Music Transformer.

OpenNMT-py 3.5.1 computes Shaw's relative terms by materializing one embedding per
(query, key) pair on every call, and never uses fused attention in the encoder.
The subclasses below keep `MultiHeadedAttention`'s parameters, names, layer cache
and calling convention, and change only how the attention is computed:

- `SelfAttention`: absolute positions (APE, SHAPE, none), with PyTorch's fused
  `scaled_dot_product_attention` (SDPA) in encoder and decoder.
- `ShawRelativeAttention`: Shaw's key and value terms through the 2K+1 clipped
  distances: Q R_K^T gathered per pair; weights summed per distance, then @ R_V.
- `MusicRelativeAttention`: Huang et al.'s keys-only relative logits, one learned
  distance embedding per layer and head, placed with the skew trick; they enter
  SDPA as an additive bias.
- `RotaryAttention`, `AlibiAttention`, `T5BucketAttention`: OpenNMT-py's rotary
  (`max_relative_positions: -1`), ALiBi (-2) and T5 buckets
  (`relative_positions_buckets`), computed as OpenNMT-py computes them, with SDPA
  (OpenNMT-py 3.5.1 runs them on its plain path on CPU, ALiBi and T5 everywhere).

`install(model, opt)` swaps them into a freshly built OpenNMT-py model
(`onmt_posenc.plugin` calls it right after `build_task_specific_model`).
"""
import torch
import torch.nn.functional as F
from torch import nn
from onmt.decoders.transformer import TransformerDecoderLayer
from onmt.encoders.transformer import TransformerEncoderLayer
from onmt.modules.alibi_position_bias import AlibiPositionalBias
from onmt.modules.multi_headed_attn import (
    MultiHeadedAttention,
    _relative_position_bucket,
    apply_rotary_emb,
    rotaryembeddings,
    shape,
    unshape,
)
from onmt.utils.logging import logger


def masked_value(dtype):
    """A logit that vanishes in the softmax and stays finite after another logit
    is added to it (a fully masked row then averages instead of giving NaN)."""
    return torch.finfo(dtype).min / 2


def relative_distances(query_len, key_len, device):
    """(query_len, key_len) matrix of j - i. The queries are the last `query_len`
    of `key_len` positions: equal lengths in training, the newest positions
    while decoding step by step with keys from the layer cache."""
    keys = torch.arange(key_len, device=device)
    queries = keys[key_len - query_len :, None]
    return keys[None, :] - queries


def skew(padded, key_len):
    """Huang et al. (2018, sec. 3.4.1): pad one column on the left of the (Lq, W)
    relative logits, reshape to (W + 1, Lq), drop the first row and read (Lq, W)
    back; entry (i, j) is then column j - i + Lq - 1 of the unpadded logits.

    `padded` is (..., Lq, W + 1), its first column of any value (it never reaches
    the result). W = Lk is the causal form (distances -(Lk-1)..0, decoder),
    W = Lk + Lq - 1 the 2L-1 form (distances -(Lk-1)..Lq-1, encoder). Written as
    a flat offset, so the result is a view and nothing is copied.
    """
    query_len, width = padded.shape[-2:]
    rows = padded.flatten(-2).narrow(-1, query_len, query_len * (width - 1))
    return rows.unflatten(-1, (query_len, width - 1))[..., :key_len]


class SelfAttention(MultiHeadedAttention):
    """OpenNMT-py self-attention for absolute positions (or none).

    `fused=True` calls SDPA whenever the attention weights are not requested;
    `fused=False` is the plain matmul-softmax-matmul path (OpenNMT-py's
    `self_attn_type: scaled-dot`). Subclasses add a relative term through
    `relative_logits`, or override `attend`.
    """

    def __init__(self, head_count, model_dim, dropout=0.1, is_decoder=True, add_qkvbias=False, fused=True):
        super().__init__(
            head_count, model_dim, dropout=dropout, is_decoder=is_decoder, attn_type="self", add_qkvbias=add_qkvbias
        )
        self.fused = fused

    def forward(self, key, value, query, mask=None, sliding_window=0, step=0, return_attn=False, self_attn_type=None):
        """OpenNMT-py's signature. `mask` (batch, 1, query_len, key_len) is True
        where a key is hidden; None while decoding step by step."""
        q = shape(self.linear_query(query), self.dim_per_head)
        k = shape(self.linear_keys(key), self.dim_per_head)
        v = shape(self.linear_values(value), self.dim_per_head)
        cache = self.layer_cache[1] if self.layer_cache[0] else None  # incremental decoding
        earlier = cache["keys"].size(2) if cache is not None and cache["keys"].numel() else 0
        q, k = self.rotated(q, k, first_position=earlier)
        if earlier:  # prepend the earlier steps' keys and values
            k = torch.cat((cache["keys"], k), dim=2)
            v = torch.cat((cache["values"], v), dim=2)
        if cache is not None:
            cache["keys"], cache["values"] = k, v
        context, attn = self.attend(q * self.dim_per_head**-0.5, k, v, mask, return_attn)
        return self.final_linear(unshape(context)), attn

    def rotated(self, q, k, first_position):
        """Queries and keys as the attention sees them; only rotary positions change them."""
        return q, k

    def relative_logits(self, q, key_len):
        """Position logits added to q.k; absolute positions have none."""
        return None

    def attend(self, q, k, v, mask, return_attn):
        """softmax(q k^T + relative logits) v for scaled queries q (batch, heads, Lq, d).
        Returns the context and, on the plain path, the attention weights."""
        rel = self.relative_logits(q, k.size(2))
        if self.fused and not return_attn:
            if rel is None:
                bias = None if mask is None else ~mask
            else:
                bias = rel if mask is None else rel.masked_fill(mask, masked_value(rel.dtype))
            del rel  # a view of a (Lq, 2L) buffer: let it go before the attention
            dropout = self.dropout_p if self.training else 0.0
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout, scale=1.0), None
        scores = q @ k.transpose(-1, -2)
        if rel is not None:
            scores += rel
        del rel
        dropped, attn = self.attention_weights(scores, mask)
        return dropped @ v, attn

    def attention_weights(self, scores, mask):
        """Masked softmax (in float32, as OpenNMT-py); returns the weights after
        and before attention dropout. `scores` is overwritten."""
        if mask is not None:
            scores.masked_fill_(mask, masked_value(scores.dtype))
        attn = scores.softmax(dim=-1, dtype=torch.float32).to(scores.dtype)
        return (self.dropout(attn) if self.dropout_p > 0 else attn), attn


def gather_pairs(per_distance, bucket, a, b, hidden=0.0):
    """(a @ b)[..., i, j] + per_distance[..., i, bucket[..., i, j]] for (batch, heads, ...)
    tensors. Bucket index `per_distance.size(-1)` marks a masked pair, which reads
    `hidden`. The per-distance values are gathered to (Lq, Lk), then the matmul
    accumulates into them in place: one (Lq, Lk) tensor is written, no other."""
    pairs = F.pad(per_distance, (0, 1), value=hidden).gather(-1, bucket)
    pairs.flatten(0, 1).baddbmm_(a.flatten(0, 1), b.flatten(0, 1))
    return pairs


# Above this many elements, a CPU temporary of the size of the attention weights
# comes as fresh pages from the operating system and costs more than the work.
CPU_LARGE_TEMPORARY = 2**22


def masked_row_sums(pairs, mask):
    """(pairs * mask).sum(-1) for a (Lq, Lk) mask shared by the leading dims, as
    (..., Lq, 1). On CPU, for large pairs, one matrix product per query instead,
    which needs no temporary of the size of pairs."""
    if pairs.device.type == "cpu" and pairs.numel() > CPU_LARGE_TEMPORARY:
        by_query = pairs.flatten(0, -3).transpose(0, 1)  # (Lq, batch * heads, Lk), a view
        sums = torch.bmm(by_query, mask.to(pairs.dtype)[..., None])
        return sums.transpose(0, 1).unflatten(0, pairs.shape[:-2])
    return (pairs * mask).sum(-1, keepdim=True)


def distance_sums(pairs, lo, hi):
    """Sum of pairs[..., i, j] per distance j - i clipped to [lo, hi]: (..., Lq, hi - lo + 1),
    the queries being the last Lq of Lk positions. This is the adjoint of gathering
    per-distance values to pairs, and the value term of Shaw et al.

    Strictly between lo and hi a distance has at most one key per query (a small
    gather); distances <= lo are a masked row sum; distances >= hi are the rest
    of the row."""
    *lead, query_len, key_len = pairs.shape
    if lo == hi:
        return pairs.sum(-1, keepdim=True)
    positions = torch.arange(key_len - query_len, key_len, device=pairs.device)[:, None]
    keys = positions + torch.arange(lo + 1, hi, device=pairs.device)  # (Lq, hi - lo - 1)
    inside = (keys >= 0) & (keys < key_len)
    middle = pairs.gather(-1, keys.clamp(0, key_len - 1).expand(*lead, -1, -1)) * inside
    below = masked_row_sums(pairs, torch.arange(key_len, device=pairs.device) <= positions + lo)
    # The rest by subtraction, in at least float32 (float16 weights lose too much).
    dtype = torch.promote_types(pairs.dtype, torch.float32)
    above = pairs.sum(-1, keepdim=True, dtype=dtype) - middle.sum(-1, keepdim=True, dtype=dtype) - below.to(dtype)
    return torch.cat((below, middle, above.to(pairs.dtype)), dim=-1)


def table_gradient(per_distance, other, table):
    """Gradient of a distance table used as per_distance @ table, summed over the
    batch (and over the heads for a table shared by all heads); in float32 under
    mixed precision, returned in the table's dtype."""
    grad = per_distance.transpose(-1, -2).float() @ other.float()
    return grad.sum((0, 1) if table.dim() == 2 else 0).to(table.dtype)


class ShawScores(torch.autograd.Function):
    """Shaw et al. eq. 4 for scaled queries: e_ij = q_i . k_j + q_i . R[bucket(i, j)].

    Shaw's two terms are adjoint to each other: the gradient of the scores for q
    is the value term of the gradient (`distance_sums`), and the gradient of the
    context for the weights is the key term of the gradient (`gather_pairs`).
    Written out, a backward pass creates at most the one (Lq, Lk) gradient it
    returns; autograd through gather and scatter would add zero-filled (Lq, Lk)
    buffers and a gradient sum.
    """

    @staticmethod
    def forward(ctx, q, k, table, bucket):
        ctx.save_for_backward(q, k, table, bucket)
        return gather_pairs(q @ table.T, bucket, q, k.transpose(-1, -2), hidden=masked_value(q.dtype))

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        q, k, table, bucket = ctx.saved_tensors
        far = table.size(0) // 2
        per_distance = distance_sums(grad, -far, far)
        grad_q = grad @ k + per_distance @ table.to(grad.dtype)
        grad_k = grad.transpose(-1, -2) @ q
        return grad_q, grad_k, table_gradient(per_distance, q, table), None


class ShawContext(torch.autograd.Function):
    """Shaw et al. eq. 3: z_i = sum_j a_ij v_j + sum_b (sum of a_ij over bucket b) R[b]."""

    @staticmethod
    def forward(ctx, weights, v, table, bucket):
        far = table.size(0) // 2
        per_distance = distance_sums(weights, -far, far)
        ctx.save_for_backward(weights, v, table, bucket, per_distance)
        return weights @ v + per_distance @ table

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        weights, v, table, bucket, per_distance = ctx.saved_tensors
        grad_weights = gather_pairs(grad @ table.to(grad.dtype).T, bucket, grad, v.transpose(-1, -2))
        grad_v = weights.transpose(-1, -2) @ grad
        return grad_weights, grad_v, table_gradient(per_distance, grad, table), None


class SkewedLogits(torch.autograd.Function):
    """Huang et al.'s S_rel = skew(Q E^T) for a table of distances lo..hi (per head),
    the skewed columns being distances 1-Lk..last (clipped to lo..hi).

    Backward: the gradient of S summed per clipped distance (`distance_sums`),
    which is the skew's adjoint without its (Lq, 2L) zero-filled buffer.
    """

    @staticmethod
    def forward(ctx, q, table, key_len, last, lo, hi):
        ctx.save_for_backward(q, table)
        ctx.window = lo, hi
        logits = q @ table.transpose(-1, -2)  # (batch, heads, Lq, hi - lo + 1)
        shape = logits.shape[:-1]
        # Columns 1-Lk..lo-1 repeat lo, hi+1..last repeat hi, and the skew's pad column in front.
        padded = torch.cat(
            (logits[..., :1].expand(*shape, lo - (1 - key_len) + 1), logits, logits[..., -1:].expand(*shape, last - hi)),
            dim=-1,
        )
        return skew(padded, key_len)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        q, table = ctx.saved_tensors
        per_distance = distance_sums(grad, *ctx.window)
        grad_q = per_distance @ table.to(grad.dtype)
        return grad_q, table_gradient(per_distance, q, table), None, None, None, None


class ShawRelativeAttention(SelfAttention):
    """Shaw et al. (2018), eqs. 3-5: e_ij = q_i . (k_j + a^K_ij) / sqrt(d) and
    z_i = sum_j alpha_ij (v_j + a^V_ij), with a_ij = R[clip(j - i, -K, K)].

    Both terms go through the 2K+1 distance buckets, never an (L, L, d) tensor:
    q_i . a^K_ij = (Q R_K^T)[i, bucket(i, j)] (`ShawScores`), and
    sum_j alpha_ij a^V_ij = sum_b (sum of alpha_ij over bucket b) R_V[b] (`ShawContext`).

    `separate_values=False` is OpenNMT-py's parameterization: one table,
    `relative_positions_embeddings`, for keys and values, so OpenNMT-py's Shaw
    checkpoints load unchanged. `separate_values=True` is the paper's two tables.
    The value term needs the attention weights: always the plain path.
    """

    def __init__(self, head_count, model_dim, max_relative_positions, dropout=0.1, is_decoder=True,
                 add_qkvbias=False, separate_values=False):
        super().__init__(head_count, model_dim, dropout, is_decoder, add_qkvbias, fused=False)
        self.max_relative_positions = max_relative_positions
        self.separate_values = separate_values
        buckets = 2 * max_relative_positions + 1
        if separate_values:
            self.relative_keys_embeddings = nn.Embedding(buckets, self.dim_per_head)
            self.relative_values_embeddings = nn.Embedding(buckets, self.dim_per_head)
        else:
            self.relative_positions_embeddings = nn.Embedding(buckets, self.dim_per_head)

    def tables(self):
        """(R_K, R_V), each (2K+1, d_head)."""
        if self.separate_values:
            return self.relative_keys_embeddings.weight, self.relative_values_embeddings.weight
        return self.relative_positions_embeddings.weight, self.relative_positions_embeddings.weight

    def attend(self, q, k, v, mask, return_attn):
        r_k, r_v = self.tables()
        far = self.max_relative_positions
        bucket = relative_distances(q.size(2), k.size(2), q.device).clamp(-far, far) + far
        if mask is not None:  # masked pairs read a vanishing logit: no separate masking pass
            bucket = bucket.masked_fill(mask, 2 * far + 1)
        bucket = bucket.expand(q.size(0), q.size(1), -1, -1)
        dropped, attn = self.attention_weights(ShawScores.apply(q, k, r_k, bucket), mask=None)
        return ShawContext.apply(dropped, v, r_v, bucket), attn


class MusicRelativeAttention(SelfAttention):
    """Huang et al. (2018) relative attention: softmax((Q K^T + S_rel) / sqrt(d)) V
    with S_rel[i, j] = q_i . E[j - i], E a learned embedding per layer and head for
    each distance (keys only, no value term); distances beyond K are clipped to
    +-K (K >= the longest sequence is the paper's unclipped form).

    The decoder uses the causal form (distances -K..0, the future is masked), the
    encoder the 2L-1 form (-K..K). S_rel is Q E^T over the distances that occur,
    put in place by the skew (`SkewedLogits`): no (L, L, d) tensor. It is an
    additive bias, so the fused path applies.
    """

    def __init__(self, head_count, model_dim, max_relative_positions, dropout=0.1, is_decoder=True,
                 add_qkvbias=False, fused=True):
        super().__init__(head_count, model_dim, dropout, is_decoder, add_qkvbias, fused)
        self.max_relative_positions = max_relative_positions
        self.max_distance = 0 if is_decoder else max_relative_positions
        distances = max_relative_positions + 1 + self.max_distance
        # (heads, distances, d_head); row r is distance r - K
        self.relative_key_embeddings = nn.Parameter(torch.empty(head_count, distances, self.dim_per_head))
        self.reset_parameters()

    def reset_parameters(self):
        """The reference implementation's initialization, N(0, d_head**-0.5):
        tensor2tensor's relative attention (Music Transformer's code),
        `get_relative_embeddings_left` and `_left_right`, draw the table with
        stddev depth**-0.5, depth being the last dimension of the per-head keys.
        OpenNMT-py's initialization does not know this table (see `initialize`)."""
        nn.init.normal_(self.relative_key_embeddings, std=self.dim_per_head**-0.5)

    def relative_logits(self, q, key_len):
        far = self.max_relative_positions
        last = 0 if self.is_decoder else q.size(2) - 1  # the largest distance that occurs
        lo, hi = max(-far, 1 - key_len), min(self.max_distance, last)  # distinct distances
        table = self.relative_key_embeddings[:, lo + far : hi + far + 1]
        return SkewedLogits.apply(q, table, key_len, last, lo, hi)


# OpenNMT-py's rotary table length (grown on demand).
ROTARY_POSITIONS = 2048


class RotaryAttention(SelfAttention):
    """Rotary positions (Su et al. 2021, RoFormer, eq. 34): the query at position m
    and the key at position n are rotated by m*theta_i and n*theta_i in each plane i,
    theta_i = base**(-2i/d), so that q.k depends on n - m only.

    OpenNMT-py's own rotation (`rotaryembeddings`, `apply_rotary_emb`, its
    `rotary_interleave`, `rotary_theta` and `rotary_dim`), applied before the keys
    enter the layer cache, then fused attention: OpenNMT-py 3.5.1 uses its plain
    path for rotary on CPU and in every encoder.
    """

    def __init__(self, head_count, model_dim, rotary_dim, rotary_interleave, rotary_theta, dropout=0.1,
                 is_decoder=True, add_qkvbias=False, fused=True):
        super().__init__(head_count, model_dim, dropout, is_decoder, add_qkvbias, fused)
        self.rotary_dim, self.rotary_interleave, self.rotary_theta = rotary_dim, rotary_interleave, rotary_theta
        # Not a buffer: `Module.to(dtype)`, which OpenNMT-py applies to the model,
        # would cast the complex table to real. Not named `rope` either: the stock
        # decoder moves a layer's `rope`, `cos` and `sin` when it has a `rope`.
        self.rotations = self.angles(ROTARY_POSITIONS)

    def angles(self, positions):
        """(positions, rotary_dim) complex rotations, OpenNMT-py's table."""
        return rotaryembeddings(self.rotary_dim, maxseqlen=positions, base=self.rotary_theta)[0]

    def rotated(self, q, k, first_position):
        last = first_position + q.size(2)
        if last > self.rotations.size(0):  # as OpenNMT-py: a longer table, 2,048 positions to spare
            self.rotations = self.angles(last + ROTARY_POSITIONS)
        if self.rotations.device != q.device:
            self.rotations = self.rotations.to(q.device)
        return apply_rotary_emb(q, k, self.rotations[first_position:last], interleave=self.rotary_interleave)


class AlibiAttention(SelfAttention):
    """ALiBi (Press et al. 2022, eq. in sec. 3): softmax(q_i.k_j / sqrt(d) - m_h |j - i|),
    one slope m_h per head, the geometric sequence 2**(-8h/H) of OpenNMT-py's
    `AlibiPositionalBias` (its slopes, and its symmetric |j - i| in the encoder).
    An additive bias: fused attention applies, where OpenNMT-py 3.5.1 always takes
    its plain path."""

    def __init__(self, head_count, model_dim, dropout=0.1, is_decoder=True, add_qkvbias=False, fused=True):
        super().__init__(head_count, model_dim, dropout, is_decoder, add_qkvbias, fused)
        slopes = torch.tensor(AlibiPositionalBias._get_slopes(head_count))
        self.register_buffer("slopes", slopes[:, None, None], persistent=False)

    def relative_logits(self, q, key_len):
        distances = relative_distances(q.size(2), key_len, q.device).abs().to(q.dtype)
        return (-self.slopes.to(q.dtype) * distances)[None]


class T5BucketAttention(SelfAttention):
    """T5's relative attention bias (Raffel et al. 2020, sec. 2.1): one learned scalar
    per head and distance bucket added to the attention logits; exact buckets for
    short distances, logarithmic ones up to `max_distance`, one beyond it;
    bidirectional in the encoder, the past only in the decoder. OpenNMT-py's
    buckets (`_relative_position_bucket`) and table (`relative_attention_bias`,
    (buckets, heads)); its bias is added to the scaled q.k. An additive bias: fused
    attention applies, where OpenNMT-py 3.5.1 always takes its plain path."""

    def __init__(self, head_count, model_dim, buckets, max_distance, dropout=0.1, is_decoder=True,
                 add_qkvbias=False, fused=True):
        super().__init__(head_count, model_dim, dropout, is_decoder, add_qkvbias, fused)
        self.buckets, self.max_distance = buckets, max_distance
        self.relative_attention_bias = nn.Embedding(buckets, head_count)

    def relative_logits(self, q, key_len):
        bucket = _relative_position_bucket(
            relative_distances(q.size(2), key_len, q.device),
            bidirectional=not self.is_decoder,
            num_buckets=self.buckets,
            max_distance=self.max_distance,
        )
        return self.relative_attention_bias(bucket).permute(2, 0, 1)[None].to(q.dtype)


def initialize(model):
    """Draw every Music distance table of a new model again, after OpenNMT-py
    initialized its parameters. OpenNMT-py's `param_init` draws them uniform in
    its range; its glorot re-draws only parameters named `weight` and leaves the
    tables as built under `replacement_for`'s forked RNG: the same numbers in every
    layer. Here one table after the other from the seeded RNG: independent per
    layer, reproducible."""
    for module in model.modules():
        if isinstance(module, MusicRelativeAttention):
            module.reset_parameters()


def _unsupported(layer, attention, opt):
    """Why this layer's self-attention stays OpenNMT-py's (None: ours applies)."""
    if attention.num_kv > 0:
        return "grouped keys and values (num_kv)"
    if attention.parallel_gpu > 1:
        return "tensor parallelism"
    if getattr(layer, "sliding_window", 0) > 0:
        return "sliding_window"
    if "mha" in (getattr(opt, "use_ckpting", None) or []):
        return "use_ckpting mha"
    return None


def replacement_for(stock, self_attn_type, method=None, values=None):
    """Our attention for one stock module, reusing its parameters
    (`method`, `values`: the relative_attention and relative_values options)."""
    settings = dict(
        head_count=stock.head_count,
        model_dim=stock.linear_query.in_features,
        dropout=stock.dropout_p,
        is_decoder=stock.is_decoder,
        add_qkvbias=stock.linear_query.bias is not None,
    )
    far = stock.max_relative_positions
    fused = self_attn_type != "scaled-dot"  # OpenNMT-py's name for the plain path
    # Built under a forked RNG: the model's parameter initialization (after
    # building) then draws exactly the numbers it draws for the stock model.
    with torch.random.fork_rng(devices=[]):
        if stock.relative_positions_buckets > 0:  # T5 buckets take precedence, as in OpenNMT-py
            attention = T5BucketAttention(**settings, buckets=stock.relative_positions_buckets,
                                          max_distance=far, fused=fused)
            attention.relative_attention_bias = stock.relative_attention_bias
        elif far == -1:
            attention = RotaryAttention(**settings, rotary_dim=stock.rotary_dim, fused=fused,
                                        rotary_interleave=stock.rotary_interleave, rotary_theta=stock.rotary_theta)
        elif far == -2:
            attention = AlibiAttention(**settings, fused=fused)
        elif far == 0:
            attention = SelfAttention(**settings, fused=fused)
        elif method == "music":
            attention = MusicRelativeAttention(**settings, max_relative_positions=far, fused=fused)
        else:
            separate = values == "separate"
            attention = ShawRelativeAttention(**settings, max_relative_positions=far, separate_values=separate)
            if not separate:
                attention.relative_positions_embeddings = stock.relative_positions_embeddings
    for name in ("linear_keys", "linear_values", "linear_query", "final_linear"):
        setattr(attention, name, getattr(stock, name))
    return attention


def install(model, opt):
    """Replace the self-attention of every Transformer encoder and decoder layer
    of a freshly built model by ours, in place (before parameters are
    initialized or loaded). `opt` has gone through `resolve_attention_options`.

    Layers whose configuration we do not implement keep OpenNMT-py's module,
    unless the chosen method exists only here (Music, separate value table).
    """
    method, values = getattr(opt, "relative_attention", None), getattr(opt, "relative_values", None)
    needs_ours = method == "music" or values == "separate"
    installed = set()
    for layer in model.modules():
        if not isinstance(layer, (TransformerEncoderLayer, TransformerDecoderLayer)):
            continue
        stock = layer.self_attn
        if type(stock) is not MultiHeadedAttention:  # e.g. the average attention decoder
            continue
        reason = _unsupported(layer, stock, opt)
        if reason is None:
            layer.self_attn = replacement_for(stock, opt.self_attn_type, method, values)
            installed.add(type(layer.self_attn).__name__)
        elif needs_ours:
            raise ValueError(f"relative_attention {method}, relative_values {values}: not available with {reason}")
    if needs_ours and not installed:
        raise ValueError(
            f"relative_attention {method}, relative_values {values}: needs a Transformer "
            "encoder-decoder model (encoder_type and decoder_type transformer)"
        )
    if installed:
        logger.info("onmt-posenc self-attention: %s", ", ".join(sorted(installed)))
