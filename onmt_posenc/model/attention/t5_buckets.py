"""T5's relative attention bias (Raffel et al. 2020) as OpenNMT-py computes it, on fused attention."""
import numpy as np
import torch
from onmt.modules.multi_headed_attn import _relative_position_bucket
from torch import nn

from onmt_posenc.model.attention import register_attention
from onmt_posenc.model.attention.self_attention import SelfAttention, ctranslate2_before, relative_distances

# The first CTranslate2 release checked to add each layer's own bias table when a
# stack's tables differ (4.8.1's source adds the first layer's in every layer).
PER_LAYER_TABLES = "4.8.5"


@register_attention("t5")
class T5BucketAttention(SelfAttention):
    """T5's relative attention bias (Raffel et al. 2020, sec. 2.1): one learned scalar
    per head and distance bucket added to the attention logits; exact buckets for
    short distances, logarithmic ones up to `max_distance`, one beyond it;
    bidirectional in the encoder, the past only in the decoder. OpenNMT-py's
    buckets (`_relative_position_bucket`) and table (`relative_attention_bias`,
    (buckets, heads)); its bias is added to the scaled q.k. An additive bias: fused
    attention applies, where OpenNMT-py 3.5.1 always takes its plain path."""

    settings = ("buckets", "max_distance")

    # CTranslate2's flash attention has no relative attention bias
    survives_flash_attention = False

    @classmethod
    def chosen_by_onmt(cls, buckets, distance):
        return buckets > 0

    @classmethod
    def export_refusal(cls, model_opt):
        import ctranslate2

        if not ctranslate2_before(PER_LAYER_TABLES):
            return None
        return (f"relative_positions_buckets {model_opt.relative_positions_buckets} (T5 bias) with "
                f"CTranslate2 {ctranslate2.__version__}: before {PER_LAYER_TABLES} it adds the first "
                "layer's bias table in every layer of a stack (T5 shares one), and OpenNMT-py "
                "learns a table per layer")

    @classmethod
    def ctranslate2_attention(cls, model_opt):
        """CTranslate2's relative attention bias: OpenNMT-py's buckets (bidirectional in the
        encoder, the past only in the decoder), added to the scaled q.k, as here. The stock
        converter builds encoder-decoder models without it."""
        from ctranslate2.specs.attention_spec import MultiHeadAttentionSpec

        if model_opt.decoder_type == "transformer_lm":
            return None
        return MultiHeadAttentionSpec(self_attention=True, relative_attention_bias=True)

    @classmethod
    def ctranslate2_layer(cls, attention, model_opt, variables, scope, is_decoder):
        attention.relative_attention_bias = variables[f"{scope}.relative_attention_bias.weight"]
        attention.relative_attention_max_distance = np.int32(model_opt.max_relative_positions)

    @classmethod
    def export_record(cls, model_opt):
        return dict(relative_positions_buckets=model_opt.relative_positions_buckets,
                    max_relative_positions=model_opt.max_relative_positions, minimum_ctranslate2=PER_LAYER_TABLES)

    def __init__(self, head_count, model_dim, buckets, max_distance, dropout=0.1, is_decoder=True,
                 add_qkvbias=False, fused=True):
        super().__init__(head_count, model_dim, dropout, is_decoder, add_qkvbias, fused)
        self.buckets, self.max_distance = buckets, max_distance
        self.relative_attention_bias = nn.Embedding(buckets, head_count)

    def bucket(self, distances):
        """OpenNMT-py's bucket of each distance j - i."""
        return _relative_position_bucket(distances, bidirectional=not self.is_decoder, num_buckets=self.buckets,
                                         max_distance=self.max_distance)

    def relative_logits(self, q, key_len):
        bucket = self.bucket(relative_distances(q.size(2), key_len, q.device))
        return self.relative_attention_bias(bucket).permute(2, 0, 1)[None].to(q.dtype)

    def kernel_terms(self, q, key_len, terms):
        """One row of (heads, buckets), shared by all queries, read at each distance's bucket."""
        terms.bucket = self.bucket(torch.arange(1 - key_len, q.size(2), device=q.device)).int()
        return self.relative_attention_bias.weight.T.to(q.dtype), None

    @classmethod
    def from_stock(cls, stock, settings, fused, values):
        attention = cls(**settings, buckets=stock.relative_positions_buckets,
                        max_distance=stock.max_relative_positions, fused=fused)
        attention.relative_attention_bias = stock.relative_attention_bias  # shared with the stock module
        return attention
