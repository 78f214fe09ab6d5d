"""The decaying attention mask of seed 003, in place of positions."""
import torch

from onmt_posenc.model.attention import register_attention
from onmt_posenc.model.attention.self_attention import SelfAttention, relative_distances

# The weight of the farthest token a query sees (the slides' ramp: 0.1 .. 1)
FARTHEST = 0.1


def ramp(query_len, key_len, key_lengths, causal, device):
    """r_ij (batch or 1, 1, Lq, Lk): 1 at the query's own token, falling linearly to
    FARTHEST at the farthest token it sees, 0 beyond (the future, padding).

    Causal (decoder): query i sees 0..i, r_ij = FARTHEST + (1 - FARTHEST) j / i
    (seed 003's mask row [0.1, 0.55, 1, 0, ...] for the third token; 1 for the
    first). Bidirectional (encoder, our symmetric rule): query i of a sequence of n
    tokens sees 0..n-1, r_ij = 1 - (1 - FARTHEST) |i - j| / max(i, n - 1 - i), so
    both ends of the sequence reach FARTHEST only for the query farthest from them.
    The queries are the last `query_len` of `key_len` positions (step-by-step
    decoding with the layer cache), as `relative_distances` counts them.
    """
    distance = relative_distances(query_len, key_len, device)  # j - i
    position = torch.arange(key_len - query_len, key_len, device=device)[:, None]  # i
    if causal:
        farthest = position.clamp(min=1)
        visible = distance <= 0
    else:
        lengths = key_lengths[:, None, None, None]  # (batch, 1, 1, 1)
        farthest = torch.maximum(position, lengths - 1 - position).clamp(min=1)
        visible = distance + position < lengths
    weights = 1 - (1 - FARTHEST) * distance.abs() / farthest
    return torch.where(visible, weights, torch.zeros((), device=device)).float().reshape(
        -1, 1, query_len, key_len)


@register_attention("decay")
class DecayingMaskAttention(SelfAttention):
    """No positions: z_i = sum_j r_ij a_ij v_j with a_ij the softmax weights over the
    tokens query i sees and r_ij the linear ramp of `ramp`, not renormalized. A 0/1
    mask that multiplies the attention weights becomes a ramp (seed 003: "the mask
    [1, 1, 1, 0, 0] becomes [0.1, 0.55, 1, 0, 0]"); the weights then sum to less than
    one by an amount that depends on where the query stands, which is how the
    slides' hypothesis says the ramp can carry position (through the output's norm).
    On the PyTorch paths the ramp needs the weights: always the plain path (the fused
    kernel, on CUDA, applies it in the tile: `kernel_terms`)."""

    summary = ("no positions (max_relative_positions 0): the attention weights multiplied by a ramp from 1 at "
               "the query's own token down to 0.1 at the farthest token it sees (seed 003's decaying mask)")
    needs_distance = False
    plain_path_why = "the ramp multiplies the attention weights"

    @classmethod
    def check_options(cls, opt):
        """The decaying mask stands in for positions: no absolute encoding on its sides."""
        from onmt_posenc.model.attention import attention_sides

        super().check_options(opt)
        for side in attention_sides(opt):
            encoding = getattr(opt, f"{side}_position_encoding", None)
            if encoding not in (None, "none"):
                raise ValueError(f"relative_attention decay on the {'encoder' if side == 'src' else 'decoder'} "
                                 f"with {side}_position_encoding {encoding}: the decaying mask stands in for "
                                 f"positions; set {side}_position_encoding: none (and relative_positions_side for "
                                 "one side only)")

    @classmethod
    def export_refusal(cls, model_opt):
        return ("relative_attention decay: the decaying mask multiplies the attention weights by a ramp over the "
                "tokens each query sees, and CTranslate2's attention has no such term")

    def __init__(self, head_count, model_dim, dropout=0.1, is_decoder=True, add_qkvbias=False):
        super().__init__(head_count, model_dim, dropout, is_decoder, add_qkvbias, fused=False)

    def attend(self, q, k, v, mask, return_attn):
        scores = q @ k.transpose(-1, -2)
        if mask is None or self.is_decoder:  # padding is masked; a decoder's keys all precede its queries
            lengths = torch.full((q.size(0),), k.size(2), device=q.device)
        else:  # the encoder's mask, (batch, 1, Lq, Lk), is True at padding, the same in every row
            lengths = (~mask[:, 0, 0]).sum(-1)
        decay = ramp(q.size(2), k.size(2), lengths, self.is_decoder, q.device).to(scores.dtype)
        dropped, attn = self.attention_weights(scores, mask)
        return (dropped * decay) @ v, attn * decay

    def kernel_terms(self, q, key_len, terms):
        """The ramp of `ramp`, computed per pair in the kernel: causal in a decoder, else over
        each sentence's length."""
        terms.ramp, terms.farthest_weight = (1 if self.is_decoder else 2), FARTHEST
        if not self.is_decoder:
            lengths = torch.full((q.size(0),), key_len, device=q.device)
            if terms.key_padding is not None:
                lengths = lengths - terms.key_padding.sum(-1)
            terms.lengths = lengths.int()
        return None, None

    @classmethod
    def from_stock(cls, stock, settings, fused, values):
        return cls(**settings)
