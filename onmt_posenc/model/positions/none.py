"""No absolute positions on a side."""
from torch import nn

from onmt_posenc.model.positions import PositionScheme, register_position_encoding


@register_position_encoding("none")
class NoPositionEncoding(PositionScheme, nn.Module):
    """No position information; keeps APE's sqrt(d) embedding scale (or word_embedding_scale's)
    so that an ablation changes only the position term."""

    implied_rank = 3  # what a side gets that no option gives positions
    implied_when = "otherwise"

    @classmethod
    def implied_by(cls, value_of, side):
        return True

    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, emb, step=None):
        return self.scaled(emb)

    @classmethod
    def from_options(cls, dim, opt):
        if opt.position_encoding:
            # The ablation of an APE model: the position term goes, its sqrt(d) scale stays.
            return cls(dim)
        # Stock OpenNMT-py without position_encoding (RPE models, checkpoints trained
        # without the extension): no position module and no sqrt(d) scale.
        return None
