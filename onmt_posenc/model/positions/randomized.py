"""Randomized positions (Ruoss et al. 2023)."""

import torch
from onmt.modules.embeddings import PositionalEncoding, SequenceTooLongError

from onmt_posenc.model.positions import ONMT_TABLE_ROWS, PositionScheme, register_position_encoding, sinusoid_frequencies

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

    Evaluation and incremental decoding (`step` given) use fixed positions, the
    mean of the training draw for a sequence of M tokens (M = eval_length):
    the k-th smallest of a uniform M-subset of {0..L-1} has mean
    k(L+1)/(M+1) - 1, so token i (0-based) sits at round((i+1)(L+1)/(M+1)) - 1,
    evenly spread over 0..L-1 as a training sequence of M tokens is; tokens past
    the M-th go on at the same spacing, past L-1 (sinusoids computed, not read
    off the table). Set M to the longest training sequence the decoder reads (<s>
    and the target's tokens); the source uses the same M. Measured on the
    synthetic EXTRAPOLATE task, L = 256: M = 25 (the longest training sequence)
    79.5 test BLEU, M = 36 88.6, M = 48 (the longest test sequence) 66.2, M = L
    9.7 (recipes/experiments/results/positions/randomized-eval-rule.md).

    Departures. (1) The authors draw at test time too, but a decoder that emits
    one token at a time cannot draw a sorted n-subset before it knows n, so
    evaluation uses one fixed position per index, the same for both sides and for
    every length: a fixed table, as CTranslate2 needs. M = L gives 0..n-1, APE's
    positions, all in the first few rows a training sequence uses.
    (2) The module sees the padded length n, not each sentence's length m: a
    shorter sentence takes the first m of its n sorted positions, still a sorted
    subset of {0..L-1}, but drawn from the lower part of the range (about the
    first m/n of it); in evaluation a shorter sentence likewise takes the first m
    positions. L = M = n gives 0..n-1 in training and evaluation, APE bit for bit.
    """

    option_names = ("randomized_max_position", "randomized_eval_length", "randomized_draw")
    option_minimums = {"randomized_max_position": 1}
    settings = ("max_position", "eval_length", "draw")

    def __init__(self, dim, enc_type, max_position, eval_length, draw="sequence", max_len=ONMT_TABLE_ROWS):
        # Every training position is a row below L.
        super().__init__(dim, enc_type, max_len=max(max_len, max_position))
        self.max_position = max_position
        self.eval_length = eval_length
        self.draw = draw
        # A plain tensor, not a buffer: OpenNMT-py's checkpoint loader wants every
        # buffer in the checkpoint, and APE checkpoints have `pe` alone.
        self.enc_type = enc_type
        self.frequencies = sinusoid_frequencies(dim, enc_type)

    def evaluation_positions(self, first, length, device):
        """round(k(L+1)/(M+1)) - 1 for tokens k = first+1..first+length, in integer
        arithmetic (exact; k - 1 when M = L)."""
        k = torch.arange(first + 1, first + length + 1, device=device)
        return (2 * k * (self.max_position + 1) + self.eval_length + 1) // (2 * (self.eval_length + 1)) - 1

    def positions(self, batch, length, device):
        """Sorted random n-subsets of {0..L-1}, (batch, length): the indices of
        the n largest of L uniform keys are a uniform n-subset, for every row
        at once (no loop over the batch)."""
        rows = batch if self.draw == "sequence" else 1
        keys = torch.rand(rows, self.max_position, device=device)
        chosen = keys.topk(length, dim=1, sorted=False).indices
        return chosen.sort(dim=1).values.expand(batch, length)

    def forward(self, emb, step=None):
        batch, length, _ = emb.shape
        if not self.training or step is not None:
            first = step or 0
            # As many tokens as APE's table has rows; their positions may lie past the
            # table, so the sinusoids are computed (equal to the table's rows where it has them).
            if first + length > self.pe.size(0):
                raise SequenceTooLongError(
                    f"Sequence is {first + length} but randomized positions evaluate at most "
                    f"{self.pe.size(0)} tokens, as many as the sinusoid table's rows."
                )
            return self.embed_at_real(emb, self.evaluation_positions(first, length, emb.device).float())
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
            "subset of n positions from 0..L-1. Must be >= the longest training sequence "
            "(the paper: L = 2048 for lengths up to 40).",
        )
        group.add(
            "--randomized_eval_length",
            "-randomized_eval_length",
            type=int,
            default=None,
            help="M of randomized positions: validation and translation embed token i at "
            "round((i+1)(L+1)/(M+1)) - 1, the mean training positions of a sequence of M "
            "tokens, spread over 0..L-1. Set it to the longest training sequence the decoder "
            "reads, <s> and the target's tokens (1 <= M <= L; M = L gives 0..n-1, far outside "
            "what training shows).",
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
        cls.check_minimums(opt)
        if getattr(opt, "randomized_eval_length", None) is None:
            raise ValueError(
                "src/tgt_position_encoding 'randomized' needs randomized_eval_length (M), the "
                "longest training sequence the decoder reads (<s> and the target's tokens): "
                "evaluation spreads positions as a training draw of M tokens does. A checkpoint "
                "made before this option evaluated at 0..n-1, which is M = L: set "
                "randomized_eval_length in its 'opt' to load it (docs/methods.md)"
            )
        if not 1 <= opt.randomized_eval_length <= opt.randomized_max_position:
            raise ValueError(
                f"randomized_eval_length must be between 1 and randomized_max_position "
                f"({opt.randomized_max_position}), got {opt.randomized_eval_length}"
            )
        if getattr(opt, "randomized_draw", None) is None:
            opt.randomized_draw = "sequence"

    @classmethod
    def from_options(cls, dim, opt):
        return cls(dim, opt.position_encoding_type, max_position=opt.randomized_max_position,
                   eval_length=opt.randomized_eval_length, draw=opt.randomized_draw)
