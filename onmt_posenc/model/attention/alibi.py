"""ALiBi (Press et al. 2022) as OpenNMT-py computes it, on fused attention."""
import torch
from onmt.modules.alibi_position_bias import AlibiPositionalBias

from onmt_posenc.model.attention import register_attention
from onmt_posenc.model.attention.self_attention import SelfAttention, relative_distances


@register_attention("alibi")
class AlibiAttention(SelfAttention):
    """ALiBi (Press et al. 2022, eq. in sec. 3): softmax(q_i.k_j / sqrt(d) - m_h |j - i|),
    one slope m_h per head, the geometric sequence 2**(-8h/H) of OpenNMT-py's
    `AlibiPositionalBias` (its slopes, and its symmetric |j - i| in the encoder).
    An additive bias: fused attention applies, where OpenNMT-py 3.5.1 always takes
    its plain path."""

    @classmethod
    def chosen_by_onmt(cls, buckets, distance):
        return buckets <= 0 and distance == -2  # T5's buckets first, as in OpenNMT-py

    @classmethod
    def export_refusal(cls, model_opt):
        if model_opt.decoder_type == "transformer_lm":
            return None  # the stock converter exports decoder-only ALiBi
        return ("max_relative_positions -2 (ALiBi) in an encoder-decoder model: OpenNMT-py adds ALiBi's distance "
                "bias in the encoder's self-attention too, and CTranslate2 has ALiBi in decoders only")

    def __init__(self, head_count, model_dim, dropout=0.1, is_decoder=True, add_qkvbias=False, fused=True):
        super().__init__(head_count, model_dim, dropout, is_decoder, add_qkvbias, fused)
        slopes = torch.tensor(AlibiPositionalBias._get_slopes(head_count))
        self.register_buffer("slopes", slopes[:, None, None], persistent=False)

    def kernel_terms(self, q, key_len, terms):
        terms.slopes = self.slopes.view(-1).float()
        return None, None

    def relative_logits(self, q, key_len):
        distances = relative_distances(q.size(2), key_len, q.device).abs().to(q.dtype)
        return (-self.slopes.to(q.dtype) * distances)[None]
