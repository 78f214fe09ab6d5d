"""SHAPE: shifted absolute position embedding (Kiyono et al. 2021)."""

import torch
from onmt.modules.embeddings import PositionalEncoding, SequenceTooLongError

from onmt_posenc.model.positions import ONMT_TABLE_ROWS, PositionScheme, register_position_encoding


@register_position_encoding("shape")
class ShiftedSinusoidalEncoding(PositionScheme, PositionalEncoding):
    """SHAPE (Kiyono et al. 2021): PE(i + k) instead of PE(i).

    Training: k ~ U{0..max_shift}, one draw per sequence and per forward pass
    (the source and target embeddings are two modules, so two independent draws).
    Evaluation: k = inference_offset for every sequence (0 in the paper; the
    authors' released code uses max_shift).
    max_shift = 0 trains at k = 0 without a draw: plain APE bit for bit (in
    evaluation too if inference_offset is 0).
    """

    option_names = ("shape_max_shift",)
    option_minimums = {"shape_max_shift": 0, "shape_inference_offset": 0}
    settings = ("max_shift", "inference_offset")
    implied_rank = 1
    implied_when = "if shape_max_shift is set"

    @classmethod
    def implied_by(cls, value_of, side):
        return value_of("shape_max_shift") is not None

    @classmethod
    def export_record(cls, opt):
        return {"shape_inference_offset": opt.shape_inference_offset}

    def __init__(self, dim, enc_type, max_shift, inference_offset=0, max_len=ONMT_TABLE_ROWS):
        # The table grows by the largest offset, so a sequence that fits APE's
        # table also fits here, whatever k is drawn.
        super().__init__(dim, enc_type, max_len=max_len + max(max_shift, inference_offset))
        self.max_shift = max_shift
        self.inference_offset = inference_offset

    def offsets(self, batch_size, device):
        """One offset k per sequence: random in training, fixed in evaluation."""
        if not self.training:
            return torch.full((batch_size,), self.inference_offset, device=device, dtype=torch.long)
        if self.max_shift == 0:  # U{0..0} without a draw: the random stream stays APE's
            return torch.zeros(batch_size, device=device, dtype=torch.long)
        return torch.randint(0, self.max_shift + 1, (batch_size,), device=device)

    def forward(self, emb, step=None):
        batch, length, _ = emb.shape
        step = step or 0
        # Bound from the options, not the drawn tensor: no device sync per call.
        last_needed = step + length + (self.max_shift if self.training else self.inference_offset)
        if last_needed > self.pe.size(0):
            raise SequenceTooLongError(
                f"Position {last_needed} needed but the SHAPE sinusoid table has "
                f"{self.pe.size(0)} rows (sequence length + offset)."
            )
        first = self.offsets(batch, emb.device) + step  # (batch,)
        positions = first[:, None] + torch.arange(length, device=emb.device)  # (batch, len)
        return self.embed_at(emb, positions)

    @classmethod
    def add_options(cls, group):
        group.add(
            "--shape_max_shift",
            "-shape_max_shift",
            type=int,
            default=None,
            help="SHAPE's K: in training every sequence's positions are shifted by "
            "k ~ U{0..K}, drawn per sequence and per forward pass, independently for "
            "source and target. K=0 is plain APE.",
        )
        group.add(
            "--shape_inference_offset",
            "-shape_inference_offset",
            type=int,
            default=0,
            help="Fixed SHAPE offset for validation and translation: 0 as in the paper, "
            "K as in the authors' released code.",
        )

    @classmethod
    def check_options(cls, opt, used):
        cls.check_minimums(opt)
        if used and opt.shape_max_shift is None:
            raise ValueError("src/tgt_position_encoding 'shape' needs shape_max_shift (SHAPE's K)")
        if not used and opt.shape_inference_offset:
            raise ValueError("shape_inference_offset is set but no side uses SHAPE")
        super().check_options(opt, used)

    @classmethod
    def from_options(cls, dim, opt):
        return cls(dim, opt.position_encoding_type, max_shift=opt.shape_max_shift,
                   inference_offset=opt.shape_inference_offset)
