"""Hooks into CTranslate2's OpenNMT-py converter (ctranslate2.converters.opennmt_py, 4.8):
the extension's models exported as `onmt_translate` computes them (what and why:
onmt_posenc.model.export). The start-up hook installs them when the converter is imported,
by `onmt_release_model --format ctranslate2`, `ct2-opennmt-py-converter` or the API."""
import argparse
import collections
import functools
from pathlib import Path

import torch

from onmt_posenc.model.export import (EXPORT_FILES, METADATA_KEY, STACKS, NotExportableError, OutputFolderError,
                                      attention_option, attention_variant, check_exportable, flash_attention_tripwire,
                                      metadata, model_options, position_term, positions_in_attention,
                                      positions_in_the_attention)


def _exporting(stock_build_spec):
    """Wrap a converter function (opt, variables, ...) -> model spec: give it each
    side's position table, then set each side's embedding scale and add the positions in
    the attention that it leaves out (rotary, T5's bias: the variant's `ctranslate2_attention`)."""

    @functools.wraps(stock_build_spec)
    def build_spec(opt, variables, *args, **kwargs):
        model_opt = model_options(opt)
        variant = attention_variant(model_opt)
        terms, tables = {}, {}
        for side, stack in STACKS.items():
            if f"{stack}.embeddings.make_embedding.emb_luts.0.weight" not in variables:
                continue  # a decoder-only model has no encoder
            terms[side] = term = position_term(model_opt, variables, side)
            if positions_in_the_attention(variant) and not term.is_zero():
                raise NotExportableError(
                    f"{side}_position_encoding {getattr(model_opt, f'{side}_position_encoding')} with "
                    f"{attention_option(model_opt)}: a CTranslate2 stack has positions in its "
                    "attention or a position table, not both"
                )
            tables[f"{stack}.embeddings.make_embedding.pe.pe"] = term.table
        stock_leaves_out = variant.ctranslate2_attention(model_opt) is not None
        if stock_leaves_out:
            # max_relative_positions (T5's max distance, the window of a variant, ...) would make
            # it build Shaw layers and look for their tables: it builds absolute ones instead.
            opt = argparse.Namespace(**vars(opt))
            opt.max_relative_positions = 0
        spec = stock_build_spec(opt, collections.ChainMap(tables, variables), *args, **kwargs)
        for side, term in terms.items():
            getattr(spec, STACKS[side]).scale_embeddings = term.scale
        spec.config.layer_norm_epsilon = model_opt.norm_eps
        if stock_leaves_out:
            positions_in_attention(spec, model_opt, variables, variant)
        if not variant.survives_flash_attention:
            flash_attention_tripwire(spec.decoder, terms["tgt"].table.size(1))
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
    separate key and value tables (`relative_values: separate`), or its key table
    alone (`relative_values: none`: a value table of zeros adds no value term)."""

    @functools.wraps(stock_set_attention)
    def set_multi_head_attention(spec, variables, scope, *args, **kwargs):
        keys = variables.get(f"{scope}.relative_keys_embeddings.weight")
        if keys is None:
            return stock_set_attention(spec, variables, scope, *args, **kwargs)
        # The stock function reads OpenNMT-py's shared table as keys and values.
        shared = {f"{scope}.relative_positions_embeddings.weight": keys}
        stock_set_attention(spec, collections.ChainMap(shared, variables), scope, *args, **kwargs)
        values = variables.get(f"{scope}.relative_values_embeddings.weight")
        spec.relative_position_values = torch.zeros_like(keys) if values is None else values

    return set_multi_head_attention


def _keeping_other_files(convert):
    """`force` makes CTranslate2 delete the output folder before it writes the model,
    whatever it holds, and `onmt_release_model --format ctranslate2` always sets it:
    `--output runs` would delete a folder of runs. Replace only a previous export."""

    @functools.wraps(convert)
    def checked(self, output_dir, *args, **kwargs):
        folder = Path(output_dir)
        if folder.exists() and not folder.is_dir():
            raise OutputFolderError(f"cannot export into {folder}: it is a file, not a folder")
        if folder.is_dir():
            others = sorted(path.name for path in folder.iterdir() if not EXPORT_FILES.fullmatch(path.name))
            if others:
                shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
                raise OutputFolderError(
                    f"refusing to export into {folder}: exporting replaces the whole folder, and it holds "
                    f"{shown}, not a CTranslate2 model's files; choose a new folder"
                )
        return convert(self, output_dir, *args, **kwargs)

    return checked


def install():
    """Make CTranslate2's OpenNMT-py converter export the extension's models: wraps
    `check_opt`, `_get_model_spec_seq2seq`, `_get_model_spec_lm` and
    `set_multi_head_attention` of `ctranslate2.converters.opennmt_py` (4.8), and
    its `convert`, which would delete whatever the output folder holds."""
    from ctranslate2.converters import opennmt_py

    opennmt_py.OpenNMTPyConverter.convert = _keeping_other_files(opennmt_py.OpenNMTPyConverter.convert)
    opennmt_py.check_opt = _checking(opennmt_py.check_opt)
    opennmt_py._get_model_spec_seq2seq = _exporting(opennmt_py._get_model_spec_seq2seq)
    opennmt_py._get_model_spec_lm = _exporting(opennmt_py._get_model_spec_lm)
    opennmt_py.set_multi_head_attention = _separate_values(opennmt_py.set_multi_head_attention)
