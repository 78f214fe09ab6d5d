"""CTranslate2 export of the extension's models, through the stock converter.

`onmt_release_model --format ctranslate2` and `ctranslate2.converters.OpenNMTPyConverter`
build a CTranslate2 model from an OpenNMT-py checkpoint in
`ctranslate2.converters.opennmt_py`. `install()` (run by `onmt_posenc.startup` once
that module is imported) wraps four of its functions so that they export what
`onmt_translate` computes:

- Absolute positions. CTranslate2 computes `embedding * scale + table[position]`
  per side. The table and the scale are read off the side's own position module
  (the one `onmt_translate` builds, with the checkpoint's buffers) in evaluation
  mode, so every scheme exports as it translates: APE, and perSPE, randomized
  positions and CAPE (augmentations in training only), as their sinusoid table,
  SHAPE as rows offset.. of its table (Kiyono et al. 2021 with the released
  code's inference offset; K = 0 is APE), and 'none' as a table of zeros
  (CTranslate2 would otherwise generate sinusoids for a side without a table)
  with scale 1: OpenNMT-py scales by sqrt(d) inside its
  position module, and a side without one is not scaled.
- Layer-norm epsilon. The stock converter leaves it unset for encoder-decoder
  models, and CTranslate2 then uses 1e-5 where OpenNMT-py uses `norm_eps`
  (1e-6). Models with large embeddings hardly notice; a side without the sqrt(d)
  scale feeds small vectors to its first layer norm, and its scores move by up
  to 1e-2, enough to change translations.
- Shaw et al. (2018) relative positions, with OpenNMT-py's one table for keys and
  values or with separate tables (`relative_values: separate`): CTranslate2's
  attention has both `relative_position_keys` and `relative_position_values`.

Refused, with the reason: Music Transformer relative attention (its distance
embeddings are per head, CTranslate2's relative tables are shared by the heads),
relative attention combined with an absolute encoding (a CTranslate2 stack has
either relative positions or a position table, never both), and rotary or ALiBi
positions in an encoder-decoder model (the converter builds those without them).

Flash attention: CTranslate2's `FlashMultiHeadAttention` (decoder self-attention,
`ctranslate2.Translator(..., flash_attention=True)`, CUDA only) has no relative
position code, and a decoder without relative positions adds generated sinusoids
instead, silently (CTranslate2 4.8's source). Shaw models therefore get (1) a
note in config.json, (2) `open_translator`, which refuses flash attention for
them, and (3) a one-row position table in the decoder: the normal path never
reads it, a decoder that does (the flash path) stops at the second target
position with CTranslate2's "No position encodings are defined for positions >= 1".
"""
import argparse
import collections
import functools
import json
from dataclasses import dataclass
from pathlib import Path

import torch

STACKS = {"src": "encoder", "tgt": "decoder"}
METADATA_KEY = "onmt_posenc"
FLASH_ATTENTION_NOTE = (
    "Do not run this model with flash_attention=True: CTranslate2's flash attention "
    "drops relative positions. onmt_posenc.export.open_translator refuses it; a "
    "decoder that runs it anyway fails with 'No position encodings are defined for "
    "positions >= 1'."
)


class NotExportableError(ValueError):
    """The model computes something CTranslate2 cannot."""


class FlashAttentionRefusedError(ValueError):
    """Flash attention would drop this model's relative positions."""


@dataclass(frozen=True)
class PositionTerm:
    """What one side's embedding layer adds at inference: `emb * scale + table[i]`."""

    scale: float
    table: torch.Tensor  # (positions, dim)

    def is_zero(self):
        return not self.table.any()


def model_options(checkpoint_opt):
    """The options `onmt_translate` builds the model from: OpenNMT-py's defaults
    under the checkpoint's values, position and attention choices resolved."""
    from onmt.utils.parse import ArgumentParser

    from onmt_posenc import options

    model_opt = ArgumentParser.ckpt_model_opts(checkpoint_opt)
    options.resolve_position_options(model_opt)
    return options.resolve_attention_options(model_opt)


def _position_module(model_opt, variables, side, dim):
    """The side's position module as `onmt_translate` builds it, with the
    checkpoint's buffers, in evaluation mode."""
    from onmt.modules import Embeddings

    from onmt_posenc.positions import install_position_encoding

    holder = Embeddings(dim, word_vocab_size=1, word_padding_idx=0)
    install_position_encoding(holder, getattr(model_opt, f"{side}_position_encoding"), model_opt)
    module = getattr(holder.make_embedding, "pe", None)
    if module is None:  # stock embeddings without position encoding
        return None
    prefix = f"{STACKS[side]}.embeddings.make_embedding.pe."
    module.load_state_dict({key[len(prefix):]: value for key, value in variables.items() if key.startswith(prefix)})
    return module.eval()


def position_term(model_opt, variables, side):
    """Read the scale and the position table off the side's position module."""
    from onmt_posenc.positions import ONMT_TABLE_ROWS

    dim = model_opt.enc_hid_size if side == "src" else model_opt.dec_hid_size
    module = _position_module(model_opt, variables, side, dim)
    if module is None:  # the word embedding alone: scale 1, no position term
        return PositionTerm(1.0, torch.zeros(ONMT_TABLE_ROWS, dim))
    if hasattr(module, "pe"):
        # SHAPE reads rows offset.. of its table, so that many fewer positions fit.
        positions = module.pe.size(0) - getattr(module, "inference_offset", 0)
    else:  # no table: as many positions as OpenNMT-py's sinusoid table has
        positions = ONMT_TABLE_ROWS
    # In float64 the probe's own rounding, (1 * scale + pe) - pe, stays far
    # below float32's resolution.
    module.double()
    with torch.no_grad():
        table = module(torch.zeros(1, positions, module.dim, dtype=torch.float64))[0]
        scale = module(torch.ones(1, 1, module.dim, dtype=torch.float64))[0, 0] - table[0]
    if not torch.allclose(scale, scale.mean().expand_as(scale), rtol=1e-9, atol=0):
        raise NotExportableError(
            f"{side}_position_encoding {getattr(model_opt, f'{side}_position_encoding')}: "
            "not embedding x scale + position table, which is all CTranslate2 computes"
        )
    return PositionTerm(scale.mean().item(), table.float())


def check_exportable(model_opt):
    """Raise NotExportableError for what CTranslate2 cannot run, saying why."""
    if model_opt.max_relative_positions < 0 and model_opt.decoder_type != "transformer_lm":
        raise NotExportableError(
            f"max_relative_positions {model_opt.max_relative_positions} (rotary or ALiBi) in an "
            "encoder-decoder model: CTranslate2's OpenNMT-py converter builds encoder-decoder "
            "models without them"
        )
    if model_opt.max_relative_positions > 0 and model_opt.relative_attention == "music":
        raise NotExportableError(
            "relative_attention music: its relative logits use a distance embedding per "
            "layer and head; CTranslate2's relative position tables (Shaw et al.) are "
            "shared by all heads of a layer, and its relative attention bias (T5) is "
            "one scalar per head and distance, independent of the query"
        )


def metadata(model_opt, sides=tuple(STACKS)):
    """What config.json records of the model's positions (key `onmt_posenc`)."""
    info = {f"{side}_position_encoding": getattr(model_opt, f"{side}_position_encoding") for side in sides}
    if "shape" in info.values():
        info["shape_inference_offset"] = model_opt.shape_inference_offset
    if model_opt.max_relative_positions > 0:
        info.update(
            max_relative_positions=model_opt.max_relative_positions,
            relative_attention=model_opt.relative_attention,
            relative_values=model_opt.relative_values,
            flash_attention=FLASH_ATTENTION_NOTE,
        )
    return info


def _flash_attention_tripwire(decoder_spec, dim):
    """A one-row position table that only a decoder without relative positions
    reads (in CTranslate2 4.8: the flash-attention decoder)."""
    from ctranslate2.specs.transformer_spec import PositionEncoderSpec

    tripwire = PositionEncoderSpec()
    tripwire.encodings = torch.zeros(1, dim)
    # Specs are frozen to the attributes their constructor made; a relative
    # decoder spec has no `position_encodings`, so it is added past the guard.
    vars(decoder_spec)["position_encodings"] = tripwire


def _exporting(stock_build_spec):
    """Wrap a converter function (opt, variables, ...) -> model spec: give it each
    side's position table, then set each side's embedding scale."""

    @functools.wraps(stock_build_spec)
    def build_spec(opt, variables, *args, **kwargs):
        model_opt = model_options(opt)
        relative = model_opt.max_relative_positions > 0
        terms, tables = {}, {}
        for side, stack in STACKS.items():
            if f"{stack}.embeddings.make_embedding.emb_luts.0.weight" not in variables:
                continue  # a decoder-only model has no encoder
            terms[side] = term = position_term(model_opt, variables, side)
            if relative and not term.is_zero():
                raise NotExportableError(
                    f"{side}_position_encoding {getattr(model_opt, f'{side}_position_encoding')} with "
                    "max_relative_positions > 0: a CTranslate2 stack has relative positions or "
                    "a position table, not both"
                )
            if not relative:
                tables[f"{stack}.embeddings.make_embedding.pe.pe"] = term.table
        spec = stock_build_spec(opt, collections.ChainMap(tables, variables), *args, **kwargs)
        for side, term in terms.items():
            getattr(spec, STACKS[side]).scale_embeddings = term.scale
        spec.config.layer_norm_epsilon = model_opt.norm_eps
        if relative:
            _flash_attention_tripwire(spec.decoder, terms["tgt"].table.size(1))
        spec.config.add_attribute(METADATA_KEY, metadata(model_opt, terms))
        return spec

    return build_spec


def _checking(stock_check_opt):
    """Wrap `check_opt(opt, num_source_embeddings)`: our refusals first, then the
    stock checks on the options as CTranslate2 sees them."""

    @functools.wraps(stock_check_opt)
    def check_opt(opt, num_source_embeddings):
        model_opt = model_options(opt)
        check_exportable(model_opt)
        as_stock = argparse.Namespace(**vars(model_opt))
        # Each side's absolute encoding is exported on its own (see _exporting),
        # in place of the stock rule "position_encoding xor max_relative_positions".
        as_stock.position_encoding = model_opt.max_relative_positions == 0
        # OpenNMT-py's fused kernel computes the same attention as scaled-dot.
        if as_stock.self_attn_type == "scaled-dot-flash":
            as_stock.self_attn_type = "scaled-dot"
        return stock_check_opt(as_stock, num_source_embeddings)

    return check_opt


def _separate_values(stock_set_attention):
    """Wrap `set_multi_head_attention(spec, variables, scope, ...)` for Shaw's
    separate key and value tables (`relative_values: separate`)."""

    @functools.wraps(stock_set_attention)
    def set_multi_head_attention(spec, variables, scope, *args, **kwargs):
        keys = variables.get(f"{scope}.relative_keys_embeddings.weight")
        if keys is None:
            return stock_set_attention(spec, variables, scope, *args, **kwargs)
        # The stock function reads OpenNMT-py's shared table as keys and values.
        shared = {f"{scope}.relative_positions_embeddings.weight": keys}
        stock_set_attention(spec, collections.ChainMap(shared, variables), scope, *args, **kwargs)
        spec.relative_position_values = variables[f"{scope}.relative_values_embeddings.weight"]

    return set_multi_head_attention


def install():
    """Make CTranslate2's OpenNMT-py converter export the extension's models: wraps
    `check_opt`, `_get_model_spec_seq2seq`, `_get_model_spec_lm` and
    `set_multi_head_attention` of `ctranslate2.converters.opennmt_py` (4.8)."""
    from ctranslate2.converters import opennmt_py

    opennmt_py.check_opt = _checking(opennmt_py.check_opt)
    opennmt_py._get_model_spec_seq2seq = _exporting(opennmt_py._get_model_spec_seq2seq)
    opennmt_py._get_model_spec_lm = _exporting(opennmt_py._get_model_spec_lm)
    opennmt_py.set_multi_head_attention = _separate_values(opennmt_py.set_multi_head_attention)


def read_metadata(model_dir):
    """The `onmt_posenc` entry of an exported model's config.json ({} if none)."""
    config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    return config.get(METADATA_KEY, {})


def open_translator(model_dir, **kwargs):
    """`ctranslate2.Translator(model_dir, **kwargs)`, refusing flash attention
    for a model whose relative positions it would drop."""
    import ctranslate2

    if kwargs.get("flash_attention") and "relative_attention" in read_metadata(model_dir):
        raise FlashAttentionRefusedError(f"{model_dir}: {FLASH_ATTENTION_NOTE}")
    return ctranslate2.Translator(str(model_dir), **kwargs)
