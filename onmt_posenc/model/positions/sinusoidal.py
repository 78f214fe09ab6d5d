"""Sinusoidal APE (Vaswani et al. 2017, sec. 3.5), OpenNMT-py's own table."""
from onmt.modules.embeddings import PositionalEncoding

from onmt_posenc.model.positions import PositionScheme, register_position_encoding


@register_position_encoding("sinusoidal")
class SinusoidalEncoding(PositionScheme, PositionalEncoding):
    """OpenNMT-py's `PositionalEncoding` unchanged: emb * sqrt(d) + PE(pos),
    PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d))
    (the layout of `position_encoding_type`)."""

    implied_rank = 2  # OpenNMT-py's own choice: after the schemes of the extension's options
    implied_when = "with -position_encoding"

    @classmethod
    def implied_by(cls, value_of, side):
        return bool(value_of("position_encoding"))
