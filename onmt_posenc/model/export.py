"""CTranslate2 export of the extension's models, through the stock converter.

`onmt_release_model --format ctranslate2` and `ctranslate2.converters.OpenNMTPyConverter`
build a CTranslate2 model from an OpenNMT-py checkpoint in
`ctranslate2.converters.opennmt_py`. `onmt_posenc.hooks.ctranslate2.install()` (run by `onmt_posenc.startup` once
that module is imported) wraps four of its functions so that they export what
`onmt_translate` computes. What is written for positions in the attention, or why it
is refused, each self-attention variant says in its file (`SelfAttention`'s export
class methods: `export_refusal`, `ctranslate2_attention`, `ctranslate2_layer`,
`export_record`, `survives_flash_attention`); this module asks them, never a name:

- Absolute positions. CTranslate2 computes `embedding * scale + table[position]`
  per side. The table and the scale are read off the side's own position module
  (the one `onmt_translate` builds, with the checkpoint's buffers) in evaluation
  mode, so every scheme exports as it translates: APE, and perSPE and CAPE
  (augmentations in training only), as their sinusoid table, randomized
  positions as the sinusoids of its evaluation positions, SHAPE as rows offset.. of its table (Kiyono et al. 2021 with the released
  code's inference offset; K = 0 is APE), and 'none' as a table of zeros
  (CTranslate2 would otherwise generate sinusoids for a side without a table)
  with its module's scale: OpenNMT-py scales by sqrt(d) inside its
  position module, and a side without one is not scaled, unless
  `word_embedding_scale` gives every side its scale (onmt_posenc.model.word_embeddings).
- Layer-norm epsilon. The stock converter leaves it unset for encoder-decoder
  models, and CTranslate2 then uses 1e-5 where OpenNMT-py uses `norm_eps`
  (1e-6). Models with large embeddings hardly notice; a side without the sqrt(d)
  scale feeds small vectors to its first layer norm, and its scores move by up
  to 1e-2, enough to change translations.
- Shaw et al. (2018) relative positions, with OpenNMT-py's one table for keys and
  values, with separate tables (`relative_values: separate`) or with the key term
  alone (`relative_values: none`, a value table of zeros): CTranslate2's
  attention has both `relative_position_keys` and `relative_position_values`.
- Rotary positions (`max_relative_positions: -1`) in an encoder-decoder model, in
  the self-attention of both stacks, with the model's `rotary_interleave`,
  `rotary_theta` and `rotary_dim`. OpenNMT-py rotates queries and keys, then
  scales; CTranslate2's rotary attention does the same and means the same by
  each option (0 dimensions: the whole head). The stock converter builds
  encoder-decoder models without rotary (CTranslate2 issues 1283, 1657), so the
  attributes that CTranslate2's own attention spec declares for them are added
  to its layers.
- T5's relative attention bias (`relative_positions_buckets: N`, with
  `max_relative_positions` as T5's max distance) in an encoder-decoder model.
  CTranslate2's bias uses OpenNMT-py's buckets (bidirectional in the encoder, the
  past only in the decoder) and is added where OpenNMT-py adds it, to the scaled
  q.k. OpenNMT-py learns a table per layer. CTranslate2 4.8.1 (its source) adds
  the first layer's table in every layer of a stack, as T5 shares one; 4.8.5
  (measured) adds each layer's own when the tables differ. The export asks for
  4.8.5, records that in config.json, and `open_translator` refuses an older
  CTranslate2.

A stack with positions in its self-attention has no position table in CTranslate2
(it never reads one), so these models export with 'none' on both sides only.

Refused, with the reason: Music Transformer relative attention (its distance
embeddings are per head, CTranslate2's relative tables are shared by the heads),
positions in the attention combined with an absolute encoding (a CTranslate2
stack has one or the other, never both), ALiBi (`max_relative_positions: -2`) in
an encoder-decoder model (OpenNMT-py adds it in the encoder too; CTranslate2 has
ALiBi in decoders only), T5's bias with a CTranslate2 older than 4.8.5, the
decaying mask (`relative_attention: decay`: no such term in CTranslate2), and
positions in one stack's attention only (`relative_positions_side`: the stock
converter builds both stacks' attention alike).

Flash attention: CTranslate2's `FlashMultiHeadAttention` (decoder self-attention,
`ctranslate2.Translator(..., flash_attention=True)`, CUDA only) has rotary and
ALiBi but no relative position code, and a decoder without relative positions
adds generated sinusoids instead, silently (CTranslate2 4.8's source). Shaw and
T5 models therefore get (1) a note in config.json, (2) `open_translator`, which
refuses flash attention for them, and (3) a one-row position table in the
decoder: the normal path never reads it, a decoder that does (the flash path)
stops at the second target position with CTranslate2's "No position encodings
are defined for positions >= 1".
"""
import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from onmt_posenc.core.errors import UserError

STACKS = {"src": "encoder", "tgt": "decoder"}
# Each stack's self-attention modules in OpenNMT-py (checkpoint keys), by layer.
SELF_ATTENTION_SCOPES = {
    "encoder": "encoder.transformer.{}.self_attn",
    "decoder": "decoder.transformer_layers.{}.self_attn",
}
METADATA_KEY = "onmt_posenc"
FLASH_ATTENTION_NOTE = (
    "Do not run this model with flash_attention=True: CTranslate2's flash attention "
    "drops relative positions. onmt_posenc.model.export.open_translator refuses it; a "
    "decoder that runs it anyway fails with 'No position encodings are defined for "
    "positions >= 1'."
)


class NotExportableError(UserError, ValueError):
    """The model computes something CTranslate2 cannot."""


class FlashAttentionRefusedError(UserError, ValueError):
    """Flash attention would drop this model's relative positions."""


class CTranslate2TooOldError(UserError, ValueError):
    """The installed CTranslate2 would compute this exported model differently."""


class OutputFolderError(UserError, ValueError):
    """The export would delete files that are not a CTranslate2 model's."""


# What CTranslate2 writes into a model folder (4.8): a folder holding only these is a
# previous export, which an export with `force` may replace.
EXPORT_FILES = re.compile(r"model\.bin|config\.json|((shared|source|target)_)?vocabulary\.(json|txt)|vmap\.txt")


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

    from onmt_posenc.model import options

    model_opt = ArgumentParser.ckpt_model_opts(checkpoint_opt)
    options.resolve_position_options(model_opt)
    return options.resolve_attention_options(model_opt)


def _position_module(model_opt, variables, side, dim):
    """The side's position module as `onmt_translate` builds it, with the
    checkpoint's buffers, in evaluation mode."""
    from onmt.modules import Embeddings

    from onmt_posenc.model.positions import install_position_encoding

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
    from onmt_posenc.model.positions import ONMT_TABLE_ROWS

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


def attention_variant(model_opt):
    """The class of the model's self-attention variant (onmt_posenc.model.attention): its
    file says how it exports."""
    from onmt_posenc.model.attention import attention_variant as chosen

    return chosen(model_opt)


def positions_in_the_attention(variant):
    """Does the variant put positions in the attention (all but absolute positions do)?"""
    from onmt_posenc.model.attention.self_attention import SelfAttention

    return variant is not SelfAttention


def attention_option(model_opt):
    """The option that puts positions in the attention, as the user set it."""
    if model_opt.relative_positions_buckets > 0:
        return f"relative_positions_buckets {model_opt.relative_positions_buckets}"
    return f"max_relative_positions {model_opt.max_relative_positions}"


def check_exportable(model_opt):
    """Raise NotExportableError for what CTranslate2 cannot run, saying why: each
    self-attention variant says it of itself (`export_refusal`, in its file)."""
    variant = attention_variant(model_opt)
    refusal = variant.export_refusal(model_opt)
    if refusal is not None:
        raise NotExportableError(refusal)
    if positions_in_the_attention(variant) and getattr(model_opt, "relative_positions_side", None) not in (None, "both"):
        raise NotExportableError(
            f"relative_positions_side {model_opt.relative_positions_side}: CTranslate2's OpenNMT-py converter "
            "builds the self-attention of both stacks alike, positions in the attention or none"
        )


def metadata(model_opt, sides=tuple(STACKS)):
    """What config.json records of the model's positions (key `onmt_posenc`): each side's
    scheme and what the schemes and the attention variant record of their options."""
    from onmt_posenc.model.positions import POSITION_ENCODINGS

    schemes = {f"{side}_position_encoding": getattr(model_opt, f"{side}_position_encoding") for side in sides}
    info = dict(schemes)
    for name in dict.fromkeys(schemes.values()):
        info.update(POSITION_ENCODINGS[name].export_record(model_opt))
    variant = attention_variant(model_opt)
    info.update(variant.export_record(model_opt))
    if not variant.survives_flash_attention:
        info["flash_attention"] = FLASH_ATTENTION_NOTE
    return info


def flash_attention_tripwire(decoder_spec, dim):
    """A one-row position table that only a decoder without relative positions
    reads (in CTranslate2 4.8: the flash-attention decoder)."""
    from ctranslate2.specs.transformer_spec import PositionEncoderSpec

    tripwire = PositionEncoderSpec()
    tripwire.encodings = torch.zeros(1, dim)
    # Specs are frozen to the attributes their constructor made; a relative
    # decoder spec has no `position_encodings`, so it is added past the guard.
    vars(decoder_spec)["position_encodings"] = tripwire


def positions_in_attention(spec, model_opt, variables, variant):
    """Add the variant's positions (rotary, T5's bias, ...) to the self-attention of every
    layer of an encoder-decoder spec that the stock converter built for absolute positions:
    the attributes of the variant's `ctranslate2_attention` (those CTranslate2's own
    `MultiHeadAttentionSpec` constructor declares for them, of their types), then each
    layer's values (`ctranslate2_layer`). The stacks lose their position tables:
    CTranslate2 never reads one in a stack with positions in its attention."""
    declared = variant.ctranslate2_attention(model_opt)
    for stack, scope in SELF_ATTENTION_SCOPES.items():
        stack_spec = getattr(spec, stack)
        delattr(stack_spec, "position_encodings")
        for i, layer in enumerate(stack_spec.layer):
            attention = layer.self_attention
            for name, value in vars(declared).items():
                # Specs are frozen to the attributes their constructor made: added past the guard.
                vars(attention).setdefault(name, value)
            variant.ctranslate2_layer(attention, model_opt, variables, scope.format(i), stack == "decoder")


def read_metadata(model_dir):
    """The `onmt_posenc` entry of an exported model's config.json ({} if none)."""
    config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    return config.get(METADATA_KEY, {})


def open_translator(model_dir, **kwargs):
    """`ctranslate2.Translator(model_dir, **kwargs)`, refusing flash attention
    for a model whose relative positions it would drop, and a CTranslate2 older
    than the model needs."""
    import ctranslate2

    from onmt_posenc.model.attention.self_attention import ctranslate2_before

    info = read_metadata(model_dir)
    if kwargs.get("flash_attention") and "flash_attention" in info:
        raise FlashAttentionRefusedError(f"{model_dir}: {FLASH_ATTENTION_NOTE}")
    needed = info.get("minimum_ctranslate2")
    if needed and ctranslate2_before(needed):
        raise CTranslate2TooOldError(
            f"{model_dir}: its self-attention is computed as OpenNMT-py computes it from CTranslate2 {needed} on "
            f"(config.json records minimum_ctranslate2); this is CTranslate2 {ctranslate2.__version__}"
        )
    return ctranslate2.Translator(str(model_dir), **kwargs)
