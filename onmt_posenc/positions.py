"""Absolute position encodings: sinusoidal, shifted (SHAPE), perturbed (perSPE),
randomized (Ruoss et al.), continuous augmented (CAPE), and none.

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


class RandomizedSinusoidalEncoding(PositionalEncoding):
    """Randomized positions (Ruoss et al. 2023): in training a sequence of
    length n is embedded at positions p_1 < ... < p_n, a uniformly drawn subset of
    {0..L-1} without replacement, sorted, instead of at 0..n-1; the encoding is
    the sinusoid table, SPE(p_i).

    draw="sequence" (default): one subset per sequence and per forward pass.
    draw="batch": one subset per forward pass, shared by the batch (the authors'
    code). The source and target embeddings are two modules, so two draws.

    Departures. (1) Evaluation and incremental decoding (`step` given) use plain
    positions 0..n-1: the authors sample at test time too, but a decoder that
    emits one token at a time cannot draw a sorted n-subset before it knows n.
    Evaluation is therefore APE bit for bit. (2) The module sees the padded length
    n, not each sentence's length m: a shorter sentence takes the first m of its
    n sorted positions, still a sorted subset of {0..L-1}, but drawn from the
    lower part of the range (about the first m/n of it).
    L must be >= the longest training sequence; L = n gives 0..n-1, APE.
    """

    def __init__(self, dim, enc_type, max_position, draw="sequence", max_len=ONMT_TABLE_ROWS):
        # Every training position is a row below L; evaluation reads rows 0..n-1.
        super().__init__(dim, enc_type, max_len=max(max_len, max_position))
        self.max_position = max_position
        self.draw = draw

    def positions(self, batch, length, device):
        """Sorted random n-subsets of {0..L-1}, (batch, length): the indices of
        the n largest of L uniform keys are a uniform n-subset, for every row
        at once (no loop over the batch)."""
        rows = batch if self.draw == "sequence" else 1
        keys = torch.rand(rows, self.max_position, device=device)
        chosen = keys.topk(length, dim=1, sorted=False).indices
        return chosen.sort(dim=1).values.expand(batch, length)

    def forward(self, emb, step=None):
        if not self.training or step is not None:
            return super().forward(emb, step)
        batch, length, _ = emb.shape
        if length > self.max_position:
            raise SequenceTooLongError(
                f"A training sequence of {length} tokens needs {length} distinct positions "
                f"but randomized_max_position is {self.max_position}: raise it, or filter "
                "long sentences (transform filtertoolong)."
            )
        return emb * math.sqrt(self.dim) + self.pe[self.positions(batch, length, emb.device), 0]


def sinusoid_frequencies(dim, enc_type):
    """The frequencies of OpenNMT-py's PositionalEncoding table, computed as it
    computes them (same float32 operations), (dim / 2,)."""
    if enc_type == "SinusoidalInterleaved":
        return torch.exp(torch.arange(0, dim, 2, dtype=torch.float) * -(math.log(10000.0) / dim))
    if enc_type == "SinusoidalConcat":
        half_dim = dim // 2
        return torch.exp(torch.arange(half_dim, dtype=torch.float) * -(math.log(10000) / (half_dim - 1)))
    raise ValueError(f"unknown position_encoding_type {enc_type!r}")


def sinusoids(positions, frequencies, enc_type):
    """OpenNMT-py's sinusoid of real-valued positions: (...) -> (..., dim), the
    same layout as its table (at integer positions, the table's rows)."""
    angles = positions[..., None] * frequencies
    if enc_type == "SinusoidalInterleaved":  # sin, cos, sin, cos, ...
        return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)
    return torch.cat([angles.sin(), angles.cos()], dim=-1)  # all sines, then all cosines


class ContinuousAugmentedSinusoidalEncoding(PositionalEncoding):
    """CAPE (Likhomanenko et al. 2021): SPE(x_i) at continuous positions
    x_i = (i + Δ + ε_i) · λ instead of SPE(i), in training only, with the paper's
    three augmentations
      global shift   Δ ~ U(-Δmax, Δmax), one per sequence (may be negative),
      local shift    ε_i ~ U(-εmax, εmax), one per token (εmax <= 0.5 keeps
                     the tokens in order: 1 + ε_{i+1} - ε_i > 0),
      global scaling λ = exp(u), u ~ U(-log s, log s), one per sequence,
    drawn per forward pass, independently for source and target. SPE of a real
    position uses OpenNMT-py's formula and layout for `enc_type` (`sinusoids`).
    Evaluation and incremental decoding (`step` given): x_i = i, read off the
    table, APE bit for bit. Δmax = 0, εmax = 0, s = 1 draws nothing and is APE
    bit for bit in training too; a bound at 0 (s at 1) skips that draw alone.

    Not offered: mean-centering (subtracting the sentence's mean position before
    the augmentations). The mean depends
    on the sentence length, which a decoder emitting one token at a time does not
    know; the text recipe does not centre either (gcambara/cape's CAPE1d with
    normalize=False), so positions start at 0 as in APE.
    """

    def __init__(
        self, dim, enc_type, max_global_shift=5.0, max_local_shift=0.5, max_global_scale=1.03,
        max_len=ONMT_TABLE_ROWS,
    ):  # fmt: skip
        super().__init__(dim, enc_type, max_len=max_len)
        self.enc_type = enc_type
        self.max_global_shift = max_global_shift
        self.max_local_shift = max_local_shift
        self.max_global_scale = max_global_scale
        # A plain tensor, not a buffer: OpenNMT-py's checkpoint loader wants every
        # buffer in the checkpoint, and APE checkpoints have `pe` alone.
        self.frequencies = sinusoid_frequencies(dim, enc_type)

    def augments(self):
        return self.max_global_shift > 0 or self.max_local_shift > 0 or self.max_global_scale > 1

    def positions(self, batch, length, device):
        """x_i = (i + Δ + ε_i) · λ, (batch, length) float32."""
        x = torch.arange(length, dtype=torch.float, device=device).expand(batch, length)
        if self.max_global_shift > 0:  # Δ, per sequence
            x = x + torch.empty(batch, 1, device=device).uniform_(-self.max_global_shift, self.max_global_shift)
        if self.max_local_shift > 0:  # ε_i, per token
            x = x + torch.empty(batch, length, device=device).uniform_(-self.max_local_shift, self.max_local_shift)
        if self.max_global_scale > 1:  # λ = exp(U(-log s, log s)), per sequence
            log_s = math.log(self.max_global_scale)
            x = x * torch.empty(batch, 1, device=device).uniform_(-log_s, log_s).exp()
        return x

    def forward(self, emb, step=None):
        if not self.training or step is not None or not self.augments():
            return super().forward(emb, step)
        batch, length, _ = emb.shape
        # Training takes no sequence that translation could not embed.
        if length > self.pe.size(0):
            raise SequenceTooLongError(
                f"Sequence is {length} but the CAPE sinusoid table (used in evaluation) "
                f"has {self.pe.size(0)} rows."
            )
        x = self.positions(batch, length, emb.device)
        pe = sinusoids(x, self.frequencies.to(emb.device), self.enc_type)
        return emb * math.sqrt(self.dim) + pe.to(self.pe.dtype)


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
    elif choice == "randomized":
        module = RandomizedSinusoidalEncoding(
            dim, opt.position_encoding_type, max_position=opt.randomized_max_position, draw=opt.randomized_draw
        )
    elif choice == "cape":
        module = ContinuousAugmentedSinusoidalEncoding(
            dim,
            opt.position_encoding_type,
            max_global_shift=opt.cape_max_global_shift,
            max_local_shift=opt.cape_max_local_shift,
            max_global_scale=opt.cape_max_global_scale,
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
