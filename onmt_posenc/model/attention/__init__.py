"""Self-attention variants, one file per method, each registered by name.

OpenNMT-py 3.5.1 computes Shaw's relative terms by materializing one embedding per
(query, key) pair on every call, never uses fused attention in the encoder, and
runs rotary (on CPU), ALiBi and T5 buckets on its plain path. The variants here
keep `MultiHeadedAttention`'s parameters, names, layer cache and calling
convention, and change only how the attention is computed:

- `absolute` (self_attention.py): absolute positions (APE, SHAPE, none), with
  PyTorch's fused `scaled_dot_product_attention` (SDPA) in encoder and decoder;
  the base class of the others.
- `shaw`: Shaw's key and value terms through the 2K+1 clipped distances:
  Q R_K^T gathered per pair; weights summed per distance, then @ R_V.
- `music`: Huang et al.'s keys-only relative logits, one learned distance
  embedding per layer and head, placed with the skew trick; an additive bias.
- `decay`: no positions; the attention weights multiplied by a linear ramp over
  the tokens a query sees (seed 003's decaying mask).
- `rotary`, `alibi`, `t5`: OpenNMT-py's rotary (`max_relative_positions: -1`),
  ALiBi (-2) and T5 buckets (`relative_positions_buckets`), computed as
  OpenNMT-py computes them, with SDPA.

On CUDA the variants with a relative term run on one fused Triton kernel (`fused_kernel/`:
online softmax, masks, dropout and the variant's relative term in one pass, each variant saying
its term in `kernel_terms`): by default ('auto', the attention_kernel option) once the kernel has
matched the PyTorch path in a first-use check in the process (`fused_kernel.first_use`). The
variants without a term (absolute positions, rotary) always take PyTorch's SDPA.

OpenNMT-py's options choose its own schemes (each variant's `chosen_by_onmt`,
`implied_by_onmt`); every variant with a `summary` is a choice of our
`relative_attention` option (with `max_relative_positions` > 0, or 0 for the
decaying mask). `relative_positions_side`
puts the variant in the encoder's or the decoder's self-attention only; the other
side's is `absolute`. `@register_attention("name")` and a class method `from_stock`
are all a new variant needs: every file in this folder is imported below. Each
variant's class says the rest of it, its options and its CTranslate2 export included
(`SelfAttention`). `install(model, opt)` swaps them into a freshly built OpenNMT-py model
(`onmt_posenc.hooks.plugin` calls it right after `build_task_specific_model`).
"""
import torch
from onmt.decoders.transformer import TransformerDecoderLayer
from onmt.encoders.transformer import TransformerEncoderLayer
from onmt.modules.multi_headed_attn import MultiHeadedAttention
from onmt.utils.logging import logger

from onmt_posenc.model.registry import import_every_module, registering

# relative_positions_side: the side each of its values puts positions in
SIDES = {"encoder": "src", "decoder": "tgt"}


def attention_scheme(relative_positions_buckets, max_relative_positions, relative_attention):
    """The self-attention variant a model's options choose (a name in onmt_posenc.model.attention):
    the one OpenNMT-py's own options choose (each variant's `chosen_by_onmt`: T5 buckets, rotary,
    ALiBi), else our relative_attention option, else the one OpenNMT-py's options imply without
    it (`implied_by_onmt`: Shaw's for max_relative_positions > 0, else absolute positions)."""
    buckets, distance = relative_positions_buckets or 0, max_relative_positions or 0
    chosen = [name for name, variant in ATTENTIONS.items() if variant.chosen_by_onmt(buckets, distance)]
    if chosen:
        return chosen[0]
    if relative_attention is not None:
        return relative_attention
    return next(name for name, variant in ATTENTIONS.items() if variant.implied_by_onmt(distance))


def attention_variant(opt):
    """The class of the variant that model options (resolved, or a stock module's attributes) choose."""
    return ATTENTIONS[attention_scheme(opt.relative_positions_buckets, opt.max_relative_positions,
                                       getattr(opt, "relative_attention", None))]


def attention_sides(opt):
    """The sides ('src', 'tgt') whose self-attention the attention scheme applies to."""
    side = getattr(opt, "relative_positions_side", None)
    return tuple(SIDES.values()) if side in (None, "both") else (SIDES[side],)


ATTENTIONS = {}


# Class decorator: the self-attention variant `name`.
register_attention = registering(ATTENTIONS, "attention")


def model_translate_options():
    """The onmt_translate options that change a model of some variant (each one's `translate_options`)."""
    return {option for variant in ATTENTIONS.values() for option in variant.translate_options}


def relative_attention_choices():
    """The values of the relative_attention option: every variant that has a `summary`, its line in
    the option's help (the others are chosen by OpenNMT-py's own options, see `attention_scheme`)."""
    return tuple(name for name, variant in ATTENTIONS.items() if variant.summary is not None)


def initialize(model):
    """Draw the own tables of our variants again (Music's distance tables), after
    OpenNMT-py initialized the model's parameters. OpenNMT-py's `param_init` draws
    them uniform in its range; its glorot re-draws only parameters named `weight`
    and leaves the tables as built under `replacement_for`'s forked RNG: the same
    numbers in every layer. Here one table after the other from the seeded RNG:
    independent per layer, reproducible."""
    for module in model.modules():
        if type(module) in ATTENTIONS.values() and hasattr(module, "reset_parameters"):
            module.reset_parameters()


# The attention_kernel option: the fused Triton kernel once it has proved itself in the process,
# always, never (see its help in options.py)
KERNEL_MODES = ("auto", "triton", "pytorch")


def kernel_mode(opt):
    """The attention_kernel option, 'auto' where unset (checkpoints made before it)."""
    return getattr(opt, "attention_kernel", None) or "auto"


def choose_kernel(model, model_opt, opt):
    """The running command's attention_kernel option (`opt`) for every self-attention of a built
    model that can take the kernel, and in the model's options (`model_opt`, what its
    checkpoints record). The kernel belongs to the run, not to the model: a checkpoint's option
    (the one it was trained with, perhaps on another machine, perhaps before 'auto' was the
    default) does not decide for onmt_translate or for a run resumed with train_from."""
    mode = model_opt.attention_kernel = kernel_mode(opt)
    refusals = {}
    for module in model.modules():
        if getattr(module, "takes_kernel", False):
            module.kernel = mode
        elif getattr(module, "kernel_refusal", None):
            refusals.setdefault(f"{type(module).__name__}: {module.kernel_refusal}", None)
    if mode == "triton" and refusals:  # asked for by name: say where it is not taken
        logger.warning("onmt-posenc: attention_kernel triton, but the fused Triton kernel does not take %s",
                       "; ".join(refusals))


def _unsupported(layer, attention, opt):
    """Why this layer's self-attention stays OpenNMT-py's (None: ours applies)."""
    if attention.num_kv > 0:
        return "grouped keys and values (num_kv)"
    if attention.parallel_gpu > 1:
        return "tensor parallelism"
    if getattr(layer, "sliding_window", 0) > 0:
        return "sliding_window"
    if "mha" in (getattr(opt, "use_ckpting", None) or []):
        return "use_ckpting mha"
    return None


def replacement_for(stock, self_attn_type, method=None, values=None, positions=True, kernel="auto",
                    full_context_alignment=False):
    """Our attention for one stock module, reusing its parameters
    (`method`, `values`: the relative_attention and relative_values options;
    `positions` False: this side has none in its attention, see relative_positions_side;
    `kernel`: the attention_kernel option, for a variant with a relative term, unless
    self_attn_type asks for the plain path; `full_context_alignment`: a decoder is also run
    without its future mask, so the mask is all it has: the fused kernel, whose decoder masks
    the future, and SDPA's causal flag are off)."""
    settings = dict(
        head_count=stock.head_count,
        model_dim=stock.linear_query.in_features,
        dropout=stock.dropout_p,
        is_decoder=stock.is_decoder,
        add_qkvbias=stock.linear_query.bias is not None,
    )
    fused = self_attn_type != "scaled-dot"  # OpenNMT-py's name for the plain path
    # Built under a forked RNG: the model's parameter initialization (after
    # building) then draws exactly the numbers it draws for the stock model.
    with torch.random.fork_rng(devices=[]):
        if positions:
            variant = ATTENTIONS[attention_scheme(stock.relative_positions_buckets, stock.max_relative_positions, method)]
        else:  # this side's attention takes no positions (absolute positions, or none)
            variant = ATTENTIONS[attention_scheme(0, 0, None)]
        attention = variant.from_stock(stock, settings, fused, values)
    attention.kernel_refusal = ("self_attn_type scaled-dot asks for the plain path" if not fused else
                                "it has no relative term for the kernel (PyTorch's SDPA runs)"
                                if not variant.kernel_covers() else
                                "full_context_alignment also runs the decoder without its future mask"
                                if full_context_alignment else None)
    attention.takes_kernel = attention.kernel_refusal is None
    attention.kernel = kernel if attention.takes_kernel else "pytorch"
    attention.always_causal = stock.is_decoder and not full_context_alignment
    for name in ("linear_keys", "linear_values", "linear_query", "final_linear"):
        setattr(attention, name, getattr(stock, name))
    return attention


def install(model, opt):
    """Replace the self-attention of every Transformer encoder and decoder layer
    of a freshly built model by ours, in place (before parameters are
    initialized or loaded). `opt` has gone through `resolve_attention_options`.
    Returns {side ('src', 'tgt'): its layers' self-attention in words, for the log}.

    Layers whose configuration we do not implement keep OpenNMT-py's module,
    unless the chosen method exists only here (Music, separate value table).
    """
    method, values = getattr(opt, "relative_attention", None), getattr(opt, "relative_values", None)
    sides = attention_sides(opt)
    needs_ours = (method is not None and not ATTENTIONS[method].computed_by_onmt(values)) or len(sides) < 2
    installed = False
    # side -> {what its layers' self-attention is: how many layers}, for the log
    described = {}
    for layer in model.modules():
        if not isinstance(layer, (TransformerEncoderLayer, TransformerDecoderLayer)):
            continue
        side = "tgt" if isinstance(layer, TransformerDecoderLayer) else "src"
        stock = layer.self_attn
        reason = None if type(stock) is not MultiHeadedAttention else _unsupported(layer, stock, opt)
        if type(stock) is not MultiHeadedAttention:  # e.g. the average attention decoder
            what = f"OpenNMT-py's {type(stock).__name__}"
        elif reason is None:
            layer.self_attn = replacement_for(stock, opt.self_attn_type, method, values, side in sides,
                                              kernel=kernel_mode(opt),
                                              full_context_alignment=getattr(opt, "full_context_alignment", False))
            installed = True
            what = f"{type(layer.self_attn).__name__}({layer.self_attn.extra_repr()})"
        elif needs_ours:
            raise ValueError(f"relative_attention {method}, relative_values {values}, relative_positions_side "
                             f"{getattr(opt, 'relative_positions_side', None)}: not available with {reason}")
        else:
            what = f"OpenNMT-py's {type(stock).__name__} ({reason})"
        counts = described.setdefault(side, {})
        counts[what] = counts.get(what, 0) + 1
    if needs_ours and not installed:
        raise ValueError(
            f"relative_attention {method}, relative_values {values}: needs a Transformer "
            "encoder-decoder model (encoder_type and decoder_type transformer)"
        )
    return {side: "; ".join(f"{count} x {what}" for what, count in counts.items())
            for side, counts in described.items()}


import_every_module(__name__, __path__)
