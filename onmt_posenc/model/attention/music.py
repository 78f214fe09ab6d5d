"""Music Transformer relative attention (Huang et al. 2018) with its skew trick."""
import torch
from torch import nn

from onmt_posenc.model.attention import register_attention
from onmt_posenc.model.attention.distance_tables import distance_sums, table_gradient
from onmt_posenc.model.attention.self_attention import SelfAttention


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


@register_attention("music")
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

    summary = ("Huang et al. 2018 (Music Transformer), a distance embedding per layer and head, keys only, "
               "distances clipped at max_relative_positions (causal in the decoder)")
    settings = ("max_relative_positions",)

    @classmethod
    def check_options(cls, opt):
        super().check_options(opt)
        if getattr(opt, "full_context_alignment", False):
            raise ValueError(
                "relative_attention music cannot be combined with full_context_alignment: the "
                "decoder's causal form has no embeddings for future positions"
            )

    @classmethod
    def export_refusal(cls, model_opt):
        return ("relative_attention music: its relative logits use a distance embedding per layer and head; "
                "CTranslate2's relative position tables (Shaw et al.) are shared by all heads of a layer, and "
                "its relative attention bias (T5) is one scalar per head and distance, independent of the query")

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

    def kernel_terms(self, q, key_len, terms):
        """T[i, c] = q_i . E_h[c] for every distance of the head's table, read at
        clip(j - i, -K, K) + K (the decoder's table ends at distance 0)."""
        terms.clip = (-self.max_relative_positions, self.max_distance)
        return self.relative_key_embeddings, None

    @classmethod
    def from_stock(cls, stock, settings, fused, values):
        return cls(**settings, max_relative_positions=stock.max_relative_positions, fused=fused)
