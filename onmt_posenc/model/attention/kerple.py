"""KERPLE's logarithmic kernel (Chi et al. 2022), a learned distance bias per head."""
import torch
from torch import nn

from onmt_posenc.model.attention import register_attention
from onmt_posenc.model.attention.self_attention import SelfAttention, relative_distances

# The paper's code keeps r1 and r2 at or above this (it clamps them after every update)
SMALLEST_PARAMETER = 1e-2


@register_attention("kerple")
class KerpleLogAttention(SelfAttention):
    """KERPLE-log (Chi et al. 2022, eq. 7 and sec. 4.2): softmax(q_i.k_j / sqrt(d) + k(i, j))
    with the conditionally positive definite kernel k(i, j) = -r1 log(1 + r2 |i - j|),
    r1, r2 > 0 learned per head (and per layer). The paper's decoder-only models see j <= i;
    |i - j| makes it symmetric in the encoder, as ALiBi's |j - i| is here.

    Positive as in the paper's code: r1 and r2 start uniform in (0, 2) and (0, 1), and are
    projected onto [0.01, inf) in every training forward (the paper projects them after each
    update); the bias reads them clamped there too, so a checkpoint or a test's random values
    give the kernel of the nearest admissible ones. An additive bias of the distance alone:
    on CUDA the fused kernel reads it as T5's (one table row per head, every distance its own
    bucket)."""

    summary = ("Chi et al. 2022 (KERPLE, log variant), max_relative_positions 0: -r1 log(1 + r2 |i - j|) added "
               "to the logits, r1, r2 > 0 learned per layer and head")
    needs_distance = False

    @classmethod
    def export_refusal(cls, model_opt):
        return ("relative_attention kerple: its bias -r1 log(1 + r2 |i - j|) is learned per head and unbounded in "
                "the distance; CTranslate2's relative attention bias (T5) holds one scalar per bucket up to a "
                "largest distance, and its other position schemes are fixed")

    def __init__(self, head_count, model_dim, dropout=0.1, is_decoder=True, add_qkvbias=False, fused=True):
        super().__init__(head_count, model_dim, dropout, is_decoder, add_qkvbias, fused)
        self.kerple_r1 = nn.Parameter(torch.empty(head_count))
        self.kerple_r2 = nn.Parameter(torch.empty(head_count))
        self.reset_parameters()

    def reset_parameters(self):
        """The paper's code: r1 ~ U(0, 2), r2 ~ U(0, 1) per head (OpenNMT-py's initialization
        does not know them, see `initialize`)."""
        with torch.no_grad():
            self.kerple_r1.uniform_(0, 2)
            self.kerple_r2.uniform_(0, 1)

    def extra_repr(self):
        return f"heads={self.head_count}, bias=-r1*log(1+r2*|i-j|), r_min={SMALLEST_PARAMETER}"

    def distance_bias(self, distances, dtype):
        """-r1 log(1 + r2 |d|) for each distance d, (heads, *distances.shape)."""
        if self.training:  # the paper's projection
            with torch.no_grad():
                self.kerple_r1.clamp_(min=SMALLEST_PARAMETER)
                self.kerple_r2.clamp_(min=SMALLEST_PARAMETER)
        r1, r2 = (r.clamp(min=SMALLEST_PARAMETER).float().view(-1, *[1] * distances.dim())
                  for r in (self.kerple_r1, self.kerple_r2))
        return (-r1 * torch.log1p(r2 * distances.abs().float())).to(dtype)

    def relative_logits(self, q, key_len):
        return self.distance_bias(relative_distances(q.size(2), key_len, q.device), q.dtype)[None]

    def kernel_terms(self, q, key_len, terms):
        """T5's shared table: a row per head over the distances 1 - Lk .. Lq - 1, each its own bucket."""
        terms.bucket = torch.arange(q.size(2) + key_len - 1, device=q.device, dtype=torch.int32)
        distances = torch.arange(1 - key_len, q.size(2), device=q.device)
        return self.distance_bias(distances, q.dtype), None
