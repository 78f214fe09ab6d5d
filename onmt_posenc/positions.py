"""Absolute position encodings: sinusoidal, shifted (SHAPE), and none.

Each scheme is one small module with OpenNMT-py's `PositionalEncoding` calling
convention, `forward(emb, step=None)`, so it drops into
`Embeddings.make_embedding.pe` and keeps the parameter names of a plain APE model.
Augmentation happens only under `self.training`; evaluation is a fixed encoding.
"""
import math

import torch
from torch import nn
from onmt.modules.embeddings import PositionalEncoding, SequenceTooLongError

# OpenNMT-py's sinusoid table has this many rows; a SHAPE table adds room for the shifts.
ONMT_TABLE_ROWS = 5000


class ShiftedSinusoidalEncoding(PositionalEncoding):
    """SHAPE (Kiyono et al. 2021): PE(i + k) instead of PE(i).

    Training: k ~ U{0..max_shift}, one draw per sequence and per forward pass
    (the source and target embeddings are two modules, so two independent draws).
    Evaluation: k = inference_offset for every sequence (0 in the paper; the
    authors' released code uses max_shift).
    max_shift = 0 draws nothing, so it reproduces plain APE bit for bit.
    """

    def __init__(self, dim, enc_type, max_shift, inference_offset=0, max_len=ONMT_TABLE_ROWS):
        # The table grows by the largest offset, so a sequence that fits APE's
        # table also fits here, whatever k is drawn.
        super().__init__(dim, enc_type, max_len=max_len + max(max_shift, inference_offset))
        self.max_shift = max_shift
        self.inference_offset = inference_offset

    def offsets(self, batch_size, device):
        """One offset k per sequence: random in training, fixed in evaluation."""
        if self.training and self.max_shift > 0:
            return torch.randint(0, self.max_shift + 1, (batch_size,), device=device)
        return torch.full((batch_size,), self.inference_offset, device=device, dtype=torch.long)

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
        return emb * math.sqrt(self.dim) + self.pe[positions, 0]


class NoPositionEncoding(nn.Module):
    """No position information; keeps APE's sqrt(d) embedding scale so that an
    ablation changes only the position term."""

    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, emb, step=None):
        return emb * math.sqrt(self.dim)
