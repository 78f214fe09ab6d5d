"""Absolute position encodings, one file per scheme, each registered by name.

A scheme is one small module with OpenNMT-py's `PositionalEncoding` calling
convention, `forward(emb, step=None)`, so it drops into
`Embeddings.make_embedding.pe` and keeps the parameter names of a plain APE model.
Augmentation happens only under `self.training`; evaluation is a fixed encoding.

`@register_position_encoding("name")` makes a scheme a choice of
`src_position_encoding`/`tgt_position_encoding`; its class methods (see
`PositionScheme`) add, check and read its own options. Every file in this folder
is imported below, so adding a scheme is one new file (plus its tests): the
options, the model builder and the runner find it here.
"""
import math

import torch

from onmt_posenc.model.registry import check_minimums, import_every_module, registering, settings_text

# OpenNMT-py's sinusoid table has this many rows; SHAPE's and perSPE's add room.
ONMT_TABLE_ROWS = 5000

POSITION_ENCODINGS = {}

# Class decorator: the scheme `name` of src/tgt_position_encoding.
register_position_encoding = registering(POSITION_ENCODINGS, "position encoding")


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


class PositionScheme:
    """What a registered scheme says about itself to the rest of the package: its options
    (by default none), which options imply it, its name in the claims, the data its runs
    need, and what its CTranslate2 export records. `value_of(key)` is an option's value
    (None if unset), from parsed options or from an experiment's config alike."""

    # Its own options: setting one while no side uses the scheme is an error.
    option_names = ()
    # Of the schemes that `implied_by` the options, a side gets the one of the lowest rank.
    implied_rank = 0
    # When `implied_by` holds, in words, for the help of {side}_position_encoding (None: never)
    implied_when = None
    # What the word embeddings are multiplied by before positions are added: None is
    # OpenNMT-py's sqrt(d); `install_position_encoding` sets word_embedding_scale's.
    embedding_scale = None
    # The attributes that hold the module's own settings (SHAPE's max_shift, ...), shown in the
    # model print and in the log line that says each side's positions (`described`)
    settings = ()
    # {option: the least value it takes}, checked by `check_minimums` and written into the
    # experiment file's JSON Schema (onmt-posenc schema)
    option_minimums = {}

    @classmethod
    def implied_by(cls, value_of, side):
        """Is this the scheme of a side ('src', 'tgt') whose {side}_position_encoding is unset?"""
        return False

    @classmethod
    def role(cls, value_of):
        """The scheme's name in the claims' method roles (experiments.claims_batch.ROLES)."""
        return cls.name

    @classmethod
    def needs_target_phrases(cls, value_of):
        """Does a decoder with this scheme train on the phrases of each training target? The
        runner then makes the phrase file (`onmt-posenc chunk-ja`) of the data setting and
        reads it with the tgt_phrases transform, which hands the phrase groups to the
        module's `phrases(groups)` context (hooks.data_pipeline)."""
        return False

    @classmethod
    def export_record(cls, opt):
        """The model options that a CTranslate2 export's config.json records of it."""
        return {}

    @classmethod
    def add_options(cls, group):
        """Add the scheme's options to OpenNMT-py's model options."""

    @classmethod
    def check_options(cls, opt, used):
        """Check the scheme's options and fill in their defaults; `used`: a side uses
        the scheme. Raise ValueError naming the option at fault. By default the
        options of a scheme no side uses are refused."""
        if used:
            return
        for key in cls.option_names:
            if getattr(opt, key, None) is not None:
                raise ValueError(
                    f"{key} is set but neither src_position_encoding nor tgt_position_encoding is '{cls.name}'"
                )

    @classmethod
    def from_options(cls, dim, opt):
        """The module for one side of `dim` features (None: no position module)."""
        return cls(dim, opt.position_encoding_type)

    @classmethod
    def check_minimums(cls, opt):
        """Raise ValueError for an option of `option_minimums` set below its least value."""
        check_minimums(cls.option_minimums, opt)

    def extra_repr(self):
        scale = "sqrt(d)" if self.embedding_scale is None else self.embedding_scale
        return ", ".join(filter(None, (settings_text(self), f"embedding_scale={scale}")))

    def scaled(self, emb):
        """The word embeddings times the side's scale: sqrt(d) (OpenNMT-py's), or word_embedding_scale's."""
        return emb * (math.sqrt(self.dim) if self.embedding_scale is None else self.embedding_scale)

    def embed_at(self, emb, positions):
        """For a scheme built on OpenNMT-py's sinusoid table (`self.pe`, `self.dim`): its
        APE sum, emb * sqrt(d) + PE(p), at the integer positions `positions`
        (batch x length, or length for every sequence) instead of 0..n-1."""
        return self.scaled(emb) + self.pe[positions, 0]

    def embed_at_real(self, emb, positions):
        """The APE sum at real-valued positions (batch x length, or length for every
        sequence), the sinusoids computed (`sinusoids`) rather than read off the
        table: off the integer grid, or past its rows. For a scheme that keeps
        `self.frequencies` (`sinusoid_frequencies`) and `self.enc_type`."""
        pe = sinusoids(positions, self.frequencies.to(emb.device), self.enc_type)
        return self.scaled(emb) + pe.to(self.pe.dtype)


def implied_schemes_help():
    """What a side gets when {side}_position_encoding is unset, in words, from the schemes' own."""
    schemes = sorted((s for s in POSITION_ENCODINGS.values() if s.implied_when), key=lambda s: s.implied_rank)
    return ", else ".join(f"'{scheme.name}' {scheme.implied_when}" for scheme in schemes)


def side_schemes(value_of):
    """The (encoder, decoder) scheme names the options choose: {side}_position_encoding where
    set, else the scheme the other options imply (`PositionScheme.implied_by`)."""
    def implied(side):
        schemes = [scheme for scheme in POSITION_ENCODINGS.values() if scheme.implied_by(value_of, side)]
        return min(schemes, key=lambda scheme: scheme.implied_rank).name

    return tuple(value_of(f"{side}_position_encoding") or implied(side) for side in ("src", "tgt"))


def described(choice, module):
    """A side's positions in the words of the log: the scheme's name, its module's class and
    settings (`PositionScheme.extra_repr`)."""
    if module is None:
        return f"{choice} (no position module, no sqrt(d) scale: OpenNMT-py's embeddings without position_encoding)"
    return f"{choice}, {type(module).__name__}({module.extra_repr()})"


def install_position_encoding(embeddings, choice, opt):
    """Put the position module of scheme `choice` at `embeddings.make_embedding.pe`, with the
    side's word-embedding scale (`word_embedding_scale`; unset, OpenNMT-py's: sqrt(d) where a
    module adds positions, none where no module is); the module, or None where none is."""
    from onmt_posenc.model import word_embeddings
    from onmt_posenc.model.positions.none import NoPositionEncoding

    dim = embeddings.embedding_size
    module = POSITION_ENCODINGS[choice].from_options(dim, opt)
    scale = word_embeddings.scale(opt, dim)
    if module is None and scale not in (None, 1.0):
        module = NoPositionEncoding(dim)  # a side without positions scaled all the same
    if module is None:
        return None
    module.embedding_scale = scale
    # Embeddings.forward passes `step` to its last module only when this flag is set.
    embeddings.position_encoding = True
    embeddings.make_embedding.add_module("pe", module)
    return module


import_every_module(__name__, __path__)
