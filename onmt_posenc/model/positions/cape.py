"""CAPE: continuous augmented positional embeddings (Likhomanenko et al. 2021)."""
import math

import torch
from onmt.modules.embeddings import PositionalEncoding, SequenceTooLongError

from onmt_posenc.model.positions import ONMT_TABLE_ROWS, PositionScheme, register_position_encoding, sinusoid_frequencies

# Its text recipe: Δmax, εmax, s.
DEFAULTS = {"cape_max_global_shift": 5.0, "cape_max_local_shift": 0.5, "cape_max_global_scale": 1.03}


@register_position_encoding("cape")
class ContinuousAugmentedSinusoidalEncoding(PositionScheme, PositionalEncoding):
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

    option_names = tuple(DEFAULTS)
    # (its check also refuses nan and infinity)
    option_minimums = {"cape_max_global_shift": 0, "cape_max_local_shift": 0, "cape_max_global_scale": 1}
    settings = ("max_global_shift", "max_local_shift", "max_global_scale")

    def __init__(
        self, dim, enc_type, max_global_shift=DEFAULTS["cape_max_global_shift"],
        max_local_shift=DEFAULTS["cape_max_local_shift"], max_global_scale=DEFAULTS["cape_max_global_scale"],
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
        return self.embed_at_real(emb, self.positions(batch, length, emb.device))

    @classmethod
    def add_options(cls, group):
        group.add(
            "--cape_max_global_shift",
            "-cape_max_global_shift",
            type=float,
            default=None,
            help="CAPE's Δmax (Likhomanenko et al. 2021; src/tgt_position_encoding cape): in "
            "training a sequence's positions (i + Δ + ε_i)·λ take Δ ~ U(-Δmax, Δmax), drawn per "
            "sequence. Default 5 (the paper's text recipe).",
        )
        group.add(
            "--cape_max_local_shift",
            "-cape_max_local_shift",
            type=float,
            default=None,
            help="CAPE's εmax: ε_i ~ U(-εmax, εmax) per token. Default 0.5; up to 0.5 keeps the "
            "tokens in order.",
        )
        group.add(
            "--cape_max_global_scale",
            "-cape_max_global_scale",
            type=float,
            default=None,
            help="CAPE's s: λ = exp(U(-log s, log s)) per sequence. Default 1.03. Validation and "
            "translation use positions 0..n-1; Δmax 0, εmax 0, s 1 is plain sinusoidal APE.",
        )

    @classmethod
    def check_options(cls, opt, used):
        super().check_options(opt, used)
        if not used:
            return
        for key, default in DEFAULTS.items():
            if getattr(opt, key, None) is None:
                setattr(opt, key, default)
        for key, least in cls.option_minimums.items():
            # `not >=`: nan compares false with everything and would train without augmentation
            if not least <= getattr(opt, key) < math.inf:
                raise ValueError(f"{key} must be a finite number >= {least}, got {getattr(opt, key)}")

    @classmethod
    def from_options(cls, dim, opt):
        return cls(dim, opt.position_encoding_type, max_global_shift=opt.cape_max_global_shift,
                   max_local_shift=opt.cape_max_local_shift, max_global_scale=opt.cape_max_global_scale)
