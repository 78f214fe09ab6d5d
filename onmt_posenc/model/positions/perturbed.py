"""perSPE: phrase-level perturbation of sinusoidal positions (Oka et al. 2022)."""
import contextlib

import torch
from onmt.modules.embeddings import PositionalEncoding, SequenceTooLongError

from onmt_posenc.core.errors import UserError
from onmt_posenc.model.positions import ONMT_TABLE_ROWS, PositionScheme, register_position_encoding


class PhraseBoundariesMissingError(UserError, RuntimeError):
    pass


@register_position_encoding("perspe")
class PerturbedSinusoidalEncoding(PositionScheme, PositionalEncoding):
    """perSPE (Oka et al. 2022, eq. 3-4): SPE(pos + per) instead of SPE(pos).

    Training: per ~ U{-max_perturbation..max_perturbation}, an integer drawn once
    per phrase (unit="phrase": every token of a phrase shares it) or once per
    token (unit="token", the paper's Table 4), per sequence and per forward pass.
    Position 0 is never perturbed: on the target it is the start token, whose
    per is always 0 in the paper (the source has no start token in OpenNMT-py,
    so its first token keeps position 0 likewise). A position pushed below 0
    (only possible within the first max_perturbation positions) is clamped to 0.
    Evaluation and incremental decoding (`step` given): plain SPE.

    Phrase membership comes from the data (see `onmt_posenc.data.transforms.phrase_boundaries`)
    as "groups", a (batch, len) LongTensor: group 0 is never perturbed (start token,
    padding), groups 1, 2, ... are the phrases in order. The caller hands them in
    with `with module.phrases(groups): module(emb)`.
    """

    option_names = ("perspe_range", "perspe_unit")
    option_minimums = {"perspe_range": 1}
    settings = ("max_perturbation", "unit")
    implied_rank = 0  # the decoder's own option: before SHAPE's, which is both sides'
    implied_when = "(decoder) if perspe_range is set"

    @classmethod
    def implied_by(cls, value_of, side):
        return side == "tgt" and value_of("perspe_range") is not None

    @classmethod
    def role(cls, value_of):
        return f"{cls.name}-{cls.unit_of(value_of)}"

    @classmethod
    def needs_target_phrases(cls, value_of):
        return cls.unit_of(value_of) == "phrase"

    @staticmethod
    def unit_of(value_of):
        """What shares a perturbation: perspe_unit, 'phrase' where unset."""
        return value_of("perspe_unit") or "phrase"

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
        return self.embed_at(emb, positions)

    @classmethod
    def add_options(cls, group):
        group.add(
            "--perspe_range",
            "-perspe_range",
            type=int,
            default=None,
            help="perSPE's perturbation range R (Oka et al. 2022): in training each target "
            "phrase (or token, see perspe_unit) gets one integer per ~ U{-R..R} added to its "
            "positions, drawn per sentence and per forward pass; the start token keeps 0; "
            "validation and translation use plain sinusoids. Makes 'perspe' the default "
            "tgt_position_encoding. The paper uses 1 (phrases) and 2 (tokens).",
        )
        group.add(
            "--perspe_unit",
            "-perspe_unit",
            choices=("phrase", "token"),
            default=None,
            help="What shares one perSPE perturbation. 'phrase' (default): the target phrases "
            "of each training corpus's path_tgt_phrases file (see `onmt-posenc chunk-ja`), "
            "read by the tgt_phrases transform. 'token': every token draws its own (the "
            "paper's Table 4); the only unit for src_position_encoding perspe.",
        )

    @classmethod
    def check_options(cls, opt, used):
        cls.check_minimums(opt)
        if used and opt.perspe_range is None:
            raise ValueError("src/tgt_position_encoding 'perspe' needs perspe_range (perSPE's R)")
        super().check_options(opt, used)
        if not used:
            return
        if opt.perspe_unit is None:
            opt.perspe_unit = "phrase"
        if opt.src_position_encoding == "perspe" and opt.perspe_unit != "token":
            raise ValueError(
                "src_position_encoding 'perspe' needs perspe_unit: token "
                "(phrase boundaries exist for the target only)"
            )

    @classmethod
    def from_options(cls, dim, opt):
        return cls(dim, opt.position_encoding_type, max_perturbation=opt.perspe_range, unit=opt.perspe_unit)
