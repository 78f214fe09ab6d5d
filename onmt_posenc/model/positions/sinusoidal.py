"""Sinusoidal APE (Vaswani et al. 2017, sec. 3.5), OpenNMT-py's own table."""
from onmt.modules.embeddings import PositionalEncoding, SequenceTooLongError

from onmt_posenc.model.positions import PositionScheme, register_position_encoding


@register_position_encoding("sinusoidal")
class SinusoidalEncoding(PositionScheme, PositionalEncoding):
    """OpenNMT-py's `PositionalEncoding`: emb * sqrt(d) + PE(pos),
    PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d))
    (the layout of `position_encoding_type`), its table and its arithmetic; only the
    sqrt(d) is the side's scale (`word_embedding_scale`, sqrt(d) unless it says otherwise)."""

    implied_rank = 2  # OpenNMT-py's own choice: after the schemes of the extension's options
    implied_when = "with -position_encoding"

    @classmethod
    def implied_by(cls, value_of, side):
        return bool(value_of("position_encoding"))

    def forward(self, emb, step=None):
        step = step or 0
        if self.pe.size(0) < step + emb.size(1):
            raise SequenceTooLongError(
                f"Sequence is {emb.size(1) + step} but PositionalEncoding is limited to {self.pe.size(0)}."
            )
        return self.scaled(emb) + self.pe[step : step + emb.size(1), 0]
