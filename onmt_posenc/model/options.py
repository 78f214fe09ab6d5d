"""The extension's model options, added to OpenNMT-py's own model options.

They are saved in checkpoints with the rest of `opt`, so translation rebuilds
exactly the position scheme a model was trained with.
"""

from onmt_posenc.core.errors import UserError
from onmt_posenc.model import word_embeddings


class ModelOptionsError(UserError, ValueError):
    """A model's options (from a checkpoint, at load) that the extension refuses."""


def add_model_options(parser):
    from onmt_posenc.model.attention import ATTENTIONS, SIDES, relative_attention_choices
    from onmt_posenc.model.positions import POSITION_ENCODINGS, implied_schemes_help

    group = parser.add_argument_group("Position representations (onmt-posenc)")
    for side, where in (("src", "encoder"), ("tgt", "decoder")):
        group.add(
            f"--{side}_position_encoding",
            f"-{side}_position_encoding",
            choices=tuple(POSITION_ENCODINGS),
            default=None,
            help=f"Absolute position encoding of the {where} embeddings. Unset: {implied_schemes_help()}. "
            "Every other scheme is chosen by name.",
        )
    for scheme in POSITION_ENCODINGS.values():
        scheme.add_options(group)
    word_embeddings.add_options(group)
    group.add(
        "--relative_attention",
        "-relative_attention",
        choices=relative_attention_choices(),
        default=None,
        help="Self-attention with positions of its own: " + "; ".join(
            f"'{name}': {ATTENTIONS[name].summary}" for name in relative_attention_choices())
        + ". Unset: " + ", ".join(f"'{name}' {variant.implied_when}" for name, variant in ATTENTIONS.items()
                                  if variant.implied_when) + ".",
    )
    group.add(
        "--relative_positions_side",
        "-relative_positions_side",
        choices=("both", *SIDES),
        default=None,
        help="The self-attention that takes positions in the attention (relative positions, "
        "rotary, ALiBi, T5 buckets, the decaying mask; unset: both). The other side's "
        "self-attention has none: give that side an absolute encoding with "
        "src_position_encoding / tgt_position_encoding, or none (the perSPE paper's Table 1).",
    )
    add_kernel_option(group)
    for variant in ATTENTIONS.values():
        variant.add_options(group)


def add_translate_options(parser):
    """onmt_translate's own attention_kernel (the run's choice, not the checkpoint's) and the
    rescaling of rotary positions for long inputs."""
    from onmt_posenc.model.attention.rotary_scaling import SCALINGS

    group = parser.add_argument_group("Position representations (onmt-posenc)")
    add_kernel_option(group)
    group.add(
        "--rotary_scaling",
        "-rotary_scaling",
        choices=SCALINGS,
        default=None,
        help="Rotary models (max_relative_positions -1): rescale the rotation for inputs longer than the longest "
        "training source, by the factor s = max(1, L / L_train) of each batch's longest source L: 'interpolation' "
        "(Chen et al. 2023: positions times 1/s), 'ntk' (NTK-aware: the base times s^(d/(d-2))), 'yarn' (Peng et "
        "al. 2023: interpolation per frequency by a ramp from 1 to 32 rotations over L_train, and q.k divided by "
        "the temperature t, sqrt(1/t) = 0.1 ln s + 1). Unset: the model's own rotation.",
    )
    group.add(
        "--rotary_training_length",
        "-rotary_training_length",
        type=int,
        default=None,
        help="L_train of rotary_scaling: the model's longest training source, in tokens (default: what the "
        "checkpoint records, longest_training_source; onmt_train records it).",
    )


def add_kernel_option(group):
    from onmt_posenc.model.attention import KERNEL_MODES

    group.add(
        "--attention_kernel",
        "-attention_kernel",
        choices=KERNEL_MODES,
        default="auto",
        help="The self-attention of the methods with a relative term (Shaw, Music, T5, ALiBi, the decaying mask) "
        "on CUDA, where Triton is installed: 'auto' takes the fused Triton kernel in float16 and bfloat16 "
        "(onmt_train's model_dtype fp16, onmt_translate's -precision fp16; in float32 its kernels spill registers, "
        "and PyTorch's paths run) once it has "
        "matched the PyTorch path, forward and gradients, on a small problem of the run's dtype and head size "
        "(checked at first use in each process; on a mismatch or a compile error, a warning says why and the "
        "PyTorch path runs); "
        "'triton' takes the kernel unchecked; 'pytorch' keeps PyTorch's paths. Methods without a term (APE, "
        "SHAPE, rotary, none) always take PyTorch's SDPA, and the CPU always PyTorch's paths. A choice of the "
        "command that runs, never of the checkpoint: onmt_translate and a run resumed with train_from take "
        "their own (default 'auto'), whatever the model was trained with.",
    )


def resolve_attention_options(opt):
    """Check the relative attention options and fill in their defaults.

    Raises ValueError naming the option at fault; also for two mistakes OpenNMT-py
    meets only with a bare assert when it builds the model, or a garbled message.
    """
    from onmt_posenc.model.attention import ATTENTIONS, attention_scheme, relative_attention_choices

    if getattr(opt, "position_encoding", False) and opt.max_relative_positions != 0:
        raise ValueError(
            f"position_encoding is true with max_relative_positions {opt.max_relative_positions}: OpenNMT-py's "
            "model takes absolute positions or positions in its attention, not both (position_encoding false "
            "for rotary, ALiBi or relative attention: `position_encoding: false` in a config, `-position_encoding "
            "false` on the command line)"
        )
    if opt.max_relative_positions < -2:
        raise ValueError(f"max_relative_positions must be >= -2 (-1: rotary, -2: ALiBi, 0: none, K > 0: "
                         f"relative attention up to distance K), got {opt.max_relative_positions}")
    # -1 is OpenNMT-py's "unset" (enc_hid_size and dec_hid_size apply); other values
    # below 1 were taken as unset too, and the model built with 500
    if getattr(opt, "hidden_size", -1) != -1 and opt.hidden_size < 1:
        raise ValueError(f"hidden_size must be >= 1, or -1 for enc_hid_size and dec_hid_size, got {opt.hidden_size}")
    check_embedding_sizes(opt)
    heads = getattr(opt, "heads", None)
    for option, dim in attention_dimensions(opt):
        if heads and dim % heads:
            raise ValueError(f"heads {heads} does not divide {option} {dim}: each head takes {option} / heads")
    if getattr(opt, "relative_positions_buckets", 0) > 0:
        # T5 buckets take precedence in OpenNMT-py; max_relative_positions is their max distance.
        if opt.max_relative_positions < 0:
            raise ValueError(f"relative_positions_buckets needs max_relative_positions >= 0, T5's max "
                             f"distance (T5 uses 128), got {opt.max_relative_positions}")
        # OpenNMT-py's Shaw (the variant max_relative_positions implies), which T5 buckets override,
        # and which this extension's checkpoints from before 2026-11-24 carry as filled-in defaults
        implied = attention_scheme(0, opt.max_relative_positions, None)
        for key, ignored in (("relative_attention", implied), ("relative_values", "shared")):
            value = getattr(opt, key, None)
            if value not in (None, ignored):
                raise ValueError(f"{key} {value} is set but relative_positions_buckets chooses T5's bias")
            setattr(opt, key, None)
        return opt
    side = getattr(opt, "relative_positions_side", None)
    scheme = attention_scheme(0, opt.max_relative_positions, getattr(opt, "relative_attention", None))
    if side is not None and scheme == attention_scheme(0, 0, None):  # the variant without positions
        raise ValueError(f"relative_positions_side {side} is set but no positions are in the attention "
                         "(max_relative_positions 0, no relative_positions_buckets, no relative_attention)")
    if scheme not in relative_attention_choices():  # OpenNMT-py's own options chose it: ours have nothing to say
        for key in ("relative_attention", "relative_values"):
            if getattr(opt, key, None) is not None:
                raise ValueError(f"{key} is set but max_relative_positions is not > 0")
        return opt
    ATTENTIONS[scheme].check_options(opt)  # the variant's own options (attention/<its file>.py)
    return opt


def transformer_stacks(opt):
    """(side, its model-size option) of each stack built of Transformer layers."""
    stacks = []
    if getattr(opt, "encoder_type", None) == "transformer":
        stacks.append(("src", "enc_hid_size"))
    if getattr(opt, "decoder_type", None) in ("transformer", "transformer_lm"):
        stacks.append(("tgt", "dec_hid_size"))
    return stacks


def attention_dimensions(opt):
    """(option, model dimension) of each side built of Transformer attention layers.
    hidden_size, when set, is what OpenNMT-py copies to enc_hid_size and dec_hid_size
    (`update_model_opts`)."""
    sizes = [size_option for _, size_option in transformer_stacks(opt)]
    if getattr(opt, "hidden_size", -1) > 0:
        return [("hidden_size", opt.hidden_size)] if sizes else []
    return [(size_option, getattr(opt, size_option)) for size_option in sizes if getattr(opt, size_option, None)]


def check_embedding_sizes(opt):
    """A Transformer adds positions and residuals to its embeddings with no projection
    in between: they must be of the model's size (OpenNMT-py fails in its first layer
    norm, with a shape in the message and no option)."""
    for side, size_option in transformer_stacks(opt):
        emb, dim = getattr(opt, f"{side}_word_vec_size", None), getattr(opt, size_option, None)
        if emb is not None and dim is not None and emb != dim:
            emb_option = "word_vec_size" if getattr(opt, "word_vec_size", -1) > 0 else f"{side}_word_vec_size"
            dim_option = "hidden_size" if getattr(opt, "hidden_size", -1) > 0 else size_option
            raise ValueError(f"{emb_option} {emb} differs from {dim_option} {dim}: a Transformer's embeddings "
                             "are of its model size")


def resolve_position_options(opt):
    """Check the options and fill in each side's position encoding.

    Raises ValueError naming the option at fault. Each scheme checks its own
    options (onmt_posenc.model.positions).
    """
    from onmt_posenc.model.positions import POSITION_ENCODINGS, side_schemes

    opt.src_position_encoding, opt.tgt_position_encoding = side_schemes(lambda key: getattr(opt, key, None))

    for name, scheme in POSITION_ENCODINGS.items():
        scheme.check_options(opt, used=name in (opt.src_position_encoding, opt.tgt_position_encoding))
    word_embeddings.check_options(opt)
    return opt
