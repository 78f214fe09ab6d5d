"""Randomized positions (Ruoss et al. 2023)."""

import torch
from onmt.modules.embeddings import PositionalEncoding, SequenceTooLongError

from onmt_posenc.positions import ONMT_TABLE_ROWS, PositionScheme, register_position_encoding

DRAWS = ("sequence", "batch")


@register_position_encoding("randomized")
class RandomizedSinusoidalEncoding(PositionScheme, PositionalEncoding):
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

    option_names = ("randomized_max_position", "randomized_draw")

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
        return self.embed_at(emb, self.positions(batch, length, emb.device))

    @classmethod
    def add_options(cls, group):
        group.add(
            "--randomized_max_position",
            "-randomized_max_position",
            type=int,
            default=None,
            help="L of randomized positions (Ruoss et al. 2023; src/tgt_position_encoding "
            "randomized): in training a sequence of n tokens is embedded at a sorted random "
            "subset of n positions from 0..L-1; validation and translation use 0..n-1. Must be "
            ">= the longest training sequence (the paper: L = 2048 for lengths up to 40).",
        )
        group.add(
            "--randomized_draw",
            "-randomized_draw",
            choices=DRAWS,
            default=None,
            help="Randomized positions: 'sequence' (default) draws one subset per sequence, "
            "'batch' one per batch, shared by its sequences (the authors' code).",
        )

    @classmethod
    def check_options(cls, opt, used):
        super().check_options(opt, used)
        if not used:
            return
        if getattr(opt, "randomized_max_position", None) is None:
            raise ValueError("src/tgt_position_encoding 'randomized' needs randomized_max_position (L)")
        if opt.randomized_max_position < 1:
            raise ValueError(f"randomized_max_position must be >= 1, got {opt.randomized_max_position}")
        if getattr(opt, "randomized_draw", None) is None:
            opt.randomized_draw = "sequence"

    @classmethod
    def from_options(cls, dim, opt):
        return cls(dim, opt.position_encoding_type, max_position=opt.randomized_max_position,
                   draw=opt.randomized_draw)
