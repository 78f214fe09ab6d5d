"""T5's relative attention bias (Raffel et al. 2020) as OpenNMT-py computes it, on fused attention."""
from onmt.modules.multi_headed_attn import _relative_position_bucket
from torch import nn

from onmt_posenc.model.attention import register_attention
from onmt_posenc.model.attention.self_attention import SelfAttention, relative_distances


@register_attention("t5")
class T5BucketAttention(SelfAttention):
    """T5's relative attention bias (Raffel et al. 2020, sec. 2.1): one learned scalar
    per head and distance bucket added to the attention logits; exact buckets for
    short distances, logarithmic ones up to `max_distance`, one beyond it;
    bidirectional in the encoder, the past only in the decoder. OpenNMT-py's
    buckets (`_relative_position_bucket`) and table (`relative_attention_bias`,
    (buckets, heads)); its bias is added to the scaled q.k. An additive bias: fused
    attention applies, where OpenNMT-py 3.5.1 always takes its plain path."""

    @classmethod
    def export_refusal(cls, model_opt):
        return None  # CTranslate2's relative attention bias (hooks.ctranslate2; its version: model.export)

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

    @classmethod
    def from_stock(cls, stock, settings, fused, values):
        attention = cls(**settings, buckets=stock.relative_positions_buckets,
                        max_distance=stock.max_relative_positions, fused=fused)
        attention.relative_attention_bias = stock.relative_attention_bias  # shared with the stock module
        return attention
