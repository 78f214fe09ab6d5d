"""FIRE (Li et al. 2024): a learned function of the progressively interpolated distance."""
import torch
from torch import nn

from onmt_posenc.model.attention import register_attention
from onmt_posenc.model.attention.self_attention import SelfAttention

# The paper's settings (sec. 3.2 and its appendix's code): f_theta a 2-layer MLP of 32 hidden
# ReLU units with one output per head; psi's c learned from 0.1; the threshold L learned as
# |512 * a multiplier started at 1|; eps added to the normalizer.
HIDDEN = 32
INITIAL_C = 0.1
INITIAL_THRESHOLD = 512.0
EPS = 1e-6


@register_attention("fire")
class FireAttention(SelfAttention):
    """FIRE (Li et al. 2024, eq. 4 with the threshold of sec. 3.2):
    softmax(q_i.k_j / sqrt(d) + b(i, j)), b(i, j) = f_theta(psi(i - j) / psi(max(L, i))),
    psi(x) = log(c x + 1), f_theta: R -> R^heads an MLP, c and L learned, per layer.

    The paper's models are causal (j <= i), where i, the query's position, is the farthest a
    key can be and the normalized distance lies in [0, 1]. Bidirectional, in the encoder:
    b(i, j) = f_theta(sign(i - j) psi(|i - j|) / psi(max(L, i, j))). The normalizer is the
    later of the two positions (max(i, j) >= |i - j|, so the input stays in [-1, 1]), and the
    sign tells the one MLP a key before the query from one after it. For j <= i it is the
    paper's formula, so the decoder computes exactly that; it needs no sentence length, so a
    sentence's bias does not depend on the padding of its batch. A bias of (i, j), not of
    j - i alone: the fused kernel's distance tables cannot hold it, and it runs on PyTorch's
    paths (SDPA with an additive bias) on every device."""

    summary = ("Li et al. 2024 (FIRE), max_relative_positions 0: an MLP per layer (32 hidden units, an output "
               "per head) of the distance log(c|i-j|+1) over log(c max(L, i, j)+1), signed in the encoder")
    needs_distance = False

    @classmethod
    def export_refusal(cls, model_opt):
        return ("relative_attention fire: its bias is an MLP of each (query, key) pair's positions; CTranslate2's "
                "attention has no learned function of positions")

    def __init__(self, head_count, model_dim, dropout=0.1, is_decoder=True, add_qkvbias=False, fused=True):
        super().__init__(head_count, model_dim, dropout, is_decoder, add_qkvbias, fused)
        self.fire_mlp = nn.Sequential(nn.Linear(1, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, head_count))
        # one element, not 0-dimensional: OpenNMT-py's checkpoint loader slices every parameter
        self.fire_c = nn.Parameter(torch.empty(1))
        self.fire_threshold_scale = nn.Parameter(torch.empty(1))
        self.reset_parameters()

    def reset_parameters(self):
        """The paper's start: PyTorch's own initialization of the MLP, c = 0.1, L = 512 (OpenNMT-py's
        initialization does not know them, see `initialize`)."""
        for layer in (self.fire_mlp[0], self.fire_mlp[2]):
            layer.reset_parameters()
        with torch.no_grad():
            self.fire_c.fill_(INITIAL_C)
            self.fire_threshold_scale.fill_(1.0)

    def extra_repr(self):
        return (f"heads={self.head_count}, mlp=1-{HIDDEN}-{self.head_count}, c0={INITIAL_C}, L0={INITIAL_THRESHOLD:g}, "
                f"{'causal' if self.is_decoder else 'bidirectional (signed, normalized by max(L, i, j))'}")

    def psi(self, x):
        return torch.log(torch.abs(self.fire_c * x) + 1)

    def normalized_distances(self, query_len, key_len, device):
        """(Lq, Lk): sign(i - j) psi(|i - j|) / (psi(max(L, i, j)) + eps), the queries being the last
        Lq of Lk positions (step-by-step decoding with the layer cache)."""
        keys = torch.arange(key_len, device=device, dtype=torch.float32)
        queries = keys[key_len - query_len :, None]
        threshold = torch.abs(self.fire_threshold_scale.float() * INITIAL_THRESHOLD)
        later = torch.maximum(queries, keys[None, :])
        offsets = queries - keys[None, :]
        return torch.sign(offsets) * self.psi(offsets.abs()) / (self.psi(torch.maximum(later, threshold)) + EPS)

    def relative_logits(self, q, key_len):
        x = self.normalized_distances(q.size(2), key_len, q.device)
        bias = self.fire_mlp(x[..., None].to(self.fire_mlp[0].weight.dtype))  # (Lq, Lk, heads)
        return bias.permute(2, 0, 1)[None].to(q.dtype)
