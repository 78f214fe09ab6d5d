"""Absolute position encodings: sinusoidal, shifted (SHAPE), perturbed (perSPE), and none.

Each scheme is one small module with OpenNMT-py's `PositionalEncoding` calling
convention, `forward(emb, step=None)`, so it drops into
`Embeddings.make_embedding.pe` and keeps the parameter names of a plain APE model.
Augmentation happens only under `self.training`; evaluation is a fixed encoding.
"""
import contextlib
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
    max_shift = 0 trains at k = 0 without a draw: plain APE bit for bit (in
    evaluation too if inference_offset is 0).
    """

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
        return emb * math.sqrt(self.dim) + self.pe[positions, 0]


class PhraseBoundariesMissingError(RuntimeError):
    pass


class PerturbedSinusoidalEncoding(PositionalEncoding):
    """perSPE (Oka et al. 2022, eq. 3-4): SPE(pos + per) instead of SPE(pos).

    Training: per ~ U{-max_perturbation..max_perturbation}, an integer drawn once
    per phrase (unit="phrase": every token of a phrase shares it) or once per
    token (unit="token", the paper's Table 4), per sequence and per forward pass.
    Position 0 is never perturbed: on the target it is the start token, whose
    per is always 0 in the paper (the source has no start token in OpenNMT-py,
    so its first token keeps position 0 likewise). A position pushed below 0
    (only possible within the first max_perturbation positions) is clamped to 0.
    Evaluation and incremental decoding (`step` given): plain SPE.

    Phrase membership comes from the data (see `onmt_posenc.transforms.phrase_boundaries`)
    as "groups", a (batch, len) LongTensor: group 0 is never perturbed (start token,
    padding), groups 1, 2, ... are the phrases in order. The caller hands them in
    with `with module.phrases(groups): module(emb)`.
    """

    def __init__(self, dim, enc_type, max_perturbation, unit="phrase", max_len=ONMT_TABLE_ROWS):
        # Room for the largest upward perturbation, so whatever fits APE fits here.
        super().__init__(dim, enc_type, max_len=max_len + max_perturbation)
        self.max_perturbation = max_perturbation
        self.unit = unit
        self._groups = None

    @contextlib.contextmanager
    def phrases(self, groups):
        """Use these phrase groups for the forward passes inside the block."""
        self._groups = groups
        try:
            yield self
        finally:
            self._groups = None

    def groups(self, batch, length, device):
        if self.unit == "token":
            # Every token its own group; position 0 in group 0.
            return torch.arange(length, device=device).expand(batch, length)
        if self._groups is None:
            raise PhraseBoundariesMissingError(
                "perspe_unit 'phrase' needs target phrase boundaries in training, but none "
                "reached the decoder: give every training corpus a `path_tgt_phrases` file "
                "(made by `onmt-posenc chunk-ja`) and the `tgt_phrases` transform, or use "
                "perspe_unit: token."
            )
        if self._groups.shape != (batch, length):
            raise ValueError(
                f"phrase groups of shape {tuple(self._groups.shape)} for embeddings of "
                f"shape ({batch}, {length})"
            )
        return self._groups

    def perturbations(self, groups):
        """One draw per (sequence, group), group 0 pinned to 0; (batch, len)."""
        batch, length = groups.shape
        # Group ids never exceed the length (start token 0, at most one phrase per
        # token), so this many draws cover them without reading the tensor back.
        draws = torch.randint(
            -self.max_perturbation, self.max_perturbation + 1, (batch, length + 1), device=groups.device
        )
        draws[:, 0] = 0
        return draws.gather(1, groups)

    def forward(self, emb, step=None):
        if not self.training or step is not None:
            return super().forward(emb, step)
        batch, length, _ = emb.shape
        if length + self.max_perturbation > self.pe.size(0):
            raise SequenceTooLongError(
                f"Position {length + self.max_perturbation} needed but the perSPE sinusoid "
                f"table has {self.pe.size(0)} rows (sequence length + perturbation range)."
            )
        per = self.perturbations(self.groups(batch, length, emb.device))
        positions = (torch.arange(length, device=emb.device) + per).clamp_(min=0)
        return emb * math.sqrt(self.dim) + self.pe[positions, 0]


class NoPositionEncoding(nn.Module):
    """No position information; keeps APE's sqrt(d) embedding scale so that an
    ablation changes only the position term."""

    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, emb, step=None):
        return emb * math.sqrt(self.dim)


def install_position_encoding(embeddings, choice, opt):
    """Put the position module for `choice` at `embeddings.make_embedding.pe`."""
    dim = embeddings.embedding_size
    if choice == "sinusoidal":
        module = PositionalEncoding(dim, opt.position_encoding_type)
    elif choice == "shape":
        module = ShiftedSinusoidalEncoding(
            dim,
            opt.position_encoding_type,
            max_shift=opt.shape_max_shift,
            inference_offset=opt.shape_inference_offset,
        )
    elif choice == "perspe":
        module = PerturbedSinusoidalEncoding(
            dim, opt.position_encoding_type, max_perturbation=opt.perspe_range, unit=opt.perspe_unit
        )
    elif opt.position_encoding:
        # The ablation of an APE model: the position term goes, its sqrt(d) scale stays.
        module = NoPositionEncoding(dim)
    else:
        # Stock OpenNMT-py without position_encoding (RPE models, checkpoints trained
        # without the extension): no position module and no sqrt(d) scale.
        return
    # Embeddings.forward passes `step` to its last module only when this flag is set.
    embeddings.position_encoding = True
    embeddings.make_embedding.add_module("pe", module)
