"""The word embeddings' initialisation and scale, as options of their own.

OpenNMT-py ties both to other choices. Its `param_init_glorot` draws the word
embeddings Glorot-uniform like every other matrix: a shared 16,000 x 128 table
starts at RMS 0.011, 0.13 after the sqrt(d) scale, beside the sinusoid's 0.71. And
it multiplies by sqrt(d) inside `PositionalEncoding.forward`, so a side without
absolute positions (relative attention) has no scale at all. Small models compared
under those defaults compare three embedding scales, not their position methods.

- `word_embedding_init: normal` draws them N(0, d^-1/2) (Vaswani et al. 2017,
  fairseq), RMS 1 after the sqrt(d) scale, with a zero padding row, whatever
  `param_init` does to the other weights.
- `word_embedding_scale: sqrt_d | none` multiplies a side's word embeddings by
  sqrt(d) or by 1, with or without absolute positions added. The side's position
  module applies it (`PositionScheme.embedding_scale`); a side without one gets
  `NoPositionEncoding` for sqrt(d).

Unset, both keep stock OpenNMT-py's behaviour, so its checkpoints and the runs made
before these options load and train as they did.
"""
import math

import torch

INITS = ("param_init", "normal")
SCALES = {"sqrt_d": math.sqrt, "none": lambda dim: 1.0}


def add_options(group):
    group.add(
        "--word_embedding_init",
        "-word_embedding_init",
        choices=INITS,
        default="param_init",
        help="How a new model's word embeddings are drawn: 'param_init', as param_init / param_init_glorot "
        "draw every weight (OpenNMT-py's; Glorot gives a 16,000 x 128 table entries of RMS 0.011); "
        "'normal', N(0, d^-1/2) with a zero padding row (Vaswani et al. 2017, fairseq): RMS 1 after "
        "the sqrt(d) scale. A model trained on from a checkpoint (train_from) keeps the checkpoint's.",
    )
    group.add(
        "--word_embedding_scale",
        "-word_embedding_scale",
        choices=tuple(SCALES),
        default=None,
        help="What each side's word embeddings are multiplied by before positions are added: 'sqrt_d' "
        "or 'none' (1), on every side alike, with or without absolute positions. Unset: OpenNMT-py's, "
        "sqrt(d) on a side with an absolute position encoding, 1 on a side without (position_encoding "
        "false: relative attention, rotary, ALiBi).",
    )


def check_options(opt):
    """Raise ValueError for what the options cannot mean together."""
    if getattr(opt, "word_embedding_init", "param_init") != "normal":
        return
    for side in ("enc", "dec"):
        if getattr(opt, f"pre_word_vecs_{side}", None):
            raise ValueError(f"word_embedding_init normal with pre_word_vecs_{side}: pretrained vectors are "
                             "the embeddings' start (word_embedding_init param_init keeps them)")


def scale(opt, dim):
    """The factor that `word_embedding_scale` sets for embeddings of `dim` features (None: unset,
    OpenNMT-py's rule)."""
    choice = getattr(opt, "word_embedding_scale", None)
    return None if choice is None else SCALES[choice](dim)


def initialize(model, opt):
    """Draw a new model's word embeddings as `word_embedding_init` says, after OpenNMT-py
    initialized every parameter (a table shared by both sides, or with the generator, is
    drawn once per side: the same distribution)."""
    if getattr(opt, "word_embedding_init", "param_init") != "normal":
        return
    for stack in (getattr(model, "encoder", None), getattr(model, "decoder", None)):
        embeddings = getattr(stack, "embeddings", None)
        if embeddings is None:
            continue
        table = embeddings.word_lut
        with torch.no_grad():
            table.weight.normal_(0.0, table.embedding_dim ** -0.5)
            if table.padding_idx is not None:
                table.weight[table.padding_idx].zero_()
