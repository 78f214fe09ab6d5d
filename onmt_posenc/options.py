"""The extension's model options, added to OpenNMT-py's own model options.

They are saved in checkpoints with the rest of `opt`, so translation rebuilds
exactly the position scheme a model was trained with.
"""

POSITION_CHOICES = ("sinusoidal", "shape", "perspe", "randomized", "cape", "none")
RANDOMIZED_DRAWS = ("sequence", "batch")
# CAPE's text recipe (Likhomanenko et al. 2021): Δmax, εmax, s.
CAPE_DEFAULTS = {"cape_max_global_shift": 5.0, "cape_max_local_shift": 0.5, "cape_max_global_scale": 1.03}
RELATIVE_ATTENTION_CHOICES = ("shaw", "music")
RELATIVE_VALUES_CHOICES = ("shared", "separate")


def add_model_options(parser):
    group = parser.add_argument_group("Position representations (onmt-posenc)")
    for side, where in (("src", "encoder"), ("tgt", "decoder")):
        group.add(
            f"--{side}_position_encoding",
            f"-{side}_position_encoding",
            choices=POSITION_CHOICES,
            default=None,
            help=f"Absolute position encoding of the {where} embeddings. Unset: 'shape' "
            "if shape_max_shift is set, else 'sinusoidal' with -position_encoding, "
            "else 'none'; the decoder's is 'perspe' if perspe_range is set. 'randomized' "
            "(Ruoss et al. 2023) and 'cape' (Likhomanenko et al. 2021) are chosen by name only.",
        )
    group.add(
        "--shape_max_shift",
        "-shape_max_shift",
        type=int,
        default=None,
        help="SHAPE's K: in training every sequence's positions are shifted by "
        "k ~ U{0..K}, drawn per sequence and per forward pass, independently for "
        "source and target. K=0 is plain APE.",
    )
    group.add(
        "--shape_inference_offset",
        "-shape_inference_offset",
        type=int,
        default=0,
        help="Fixed SHAPE offset for validation and translation: 0 as in the paper, "
        "K as in the authors' released code.",
    )
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
        choices=RANDOMIZED_DRAWS,
        default=None,
        help="Randomized positions: 'sequence' (default) draws one subset per sequence, "
        "'batch' one per batch, shared by its sequences (the authors' code).",
    )
    group.add(
        "--cape_max_global_shift",
        "-cape_max_global_shift",
        type=float,
        default=None,
        help="CAPE's Δmax (Likhomanenko et al. 2021; src/tgt_position_encoding cape): in "
        "training a sequence's positions (i + Δ + ε_i)·λ take Δ ~ U(-Δmax, Δmax), drawn per "
        "sequence. Default 5 (the paper's text recipe).",
    )
    group.add(
        "--cape_max_local_shift",
        "-cape_max_local_shift",
        type=float,
        default=None,
        help="CAPE's εmax: ε_i ~ U(-εmax, εmax) per token. Default 0.5; up to 0.5 keeps the "
        "tokens in order.",
    )
    group.add(
        "--cape_max_global_scale",
        "-cape_max_global_scale",
        type=float,
        default=None,
        help="CAPE's s: λ = exp(U(-log s, log s)) per sequence. Default 1.03. Validation and "
        "translation use positions 0..n-1; Δmax 0, εmax 0, s 1 is plain sinusoidal APE.",
    )
    group.add(
        "--relative_attention",
        "-relative_attention",
        choices=RELATIVE_ATTENTION_CHOICES,
        default=None,
        help="Relative self-attention when max_relative_positions > 0 (unset: 'shaw'). "
        "'shaw': Shaw et al. 2018, key and value terms, distances clipped at "
        "max_relative_positions. 'music': Huang et al. 2018 (Music Transformer), a "
        "distance embedding per layer and head, keys only, same clipping (causal in the "
        "decoder).",
    )
    group.add(
        "--relative_values",
        "-relative_values",
        choices=RELATIVE_VALUES_CHOICES,
        default=None,
        help="Shaw's relative tables (unset: 'shared'). 'shared': one table for keys and "
        "values, OpenNMT-py's parameterization (its checkpoints load unchanged). "
        "'separate': the paper's two tables.",
    )



def resolve_attention_options(opt):
    """Check the relative attention options and fill in their defaults.

    Raises ValueError naming the option at fault.
    """
    # OpenNMT-py: T5 buckets take precedence, max_relative_positions is then their max distance.
    t5_buckets = getattr(opt, "relative_positions_buckets", 0) > 0
    if opt.max_relative_positions <= 0 or t5_buckets:
        for key in ("relative_attention", "relative_values"):
            if getattr(opt, key, None) is not None:
                why = "relative_positions_buckets is set (T5 buckets)" if t5_buckets else \
                    "max_relative_positions is not > 0"
                raise ValueError(f"{key} is set but {why}")
        return opt
    if getattr(opt, "relative_attention", None) is None:
        opt.relative_attention = "shaw"
    if opt.relative_attention == "shaw" and getattr(opt, "relative_values", None) is None:
        opt.relative_values = "shared"
    if opt.relative_attention == "music":
        if getattr(opt, "relative_values", None) is not None:
            raise ValueError("relative_values applies to relative_attention shaw only (music has no value term)")
        if getattr(opt, "full_context_alignment", False):
            raise ValueError(
                "relative_attention music cannot be combined with full_context_alignment: the "
                "decoder's causal form has no embeddings for future positions"
            )
    return opt


def resolve_position_options(opt):
    """Check the options and fill in each side's position encoding.

    Raises ValueError naming the option at fault.
    """
    uses_shape = False
    for side in ("src", "tgt"):
        key = f"{side}_position_encoding"
        choice = getattr(opt, key, None)
        if choice is None:
            if side == "tgt" and opt.perspe_range is not None:
                choice = "perspe"
            elif opt.shape_max_shift is not None:
                choice = "shape"
            elif opt.position_encoding:
                choice = "sinusoidal"
            else:
                choice = "none"
            setattr(opt, key, choice)
        uses_shape |= choice == "shape"

    if opt.shape_max_shift is not None and opt.shape_max_shift < 0:
        raise ValueError(f"shape_max_shift must be >= 0, got {opt.shape_max_shift}")
    if opt.shape_inference_offset < 0:
        raise ValueError(f"shape_inference_offset must be >= 0, got {opt.shape_inference_offset}")
    if uses_shape and opt.shape_max_shift is None:
        raise ValueError("src/tgt_position_encoding 'shape' needs shape_max_shift (SHAPE's K)")
    if not uses_shape and opt.shape_max_shift is not None:
        raise ValueError(
            "shape_max_shift is set but neither src_position_encoding nor "
            "tgt_position_encoding is 'shape'"
        )
    if not uses_shape and opt.shape_inference_offset:
        raise ValueError("shape_inference_offset is set but no side uses SHAPE")
    _check_perspe_options(opt)
    _check_randomized_options(opt)
    _check_cape_options(opt)
    return opt


def _uses(opt, choice):
    return choice in (opt.src_position_encoding, opt.tgt_position_encoding)


def _refuse_unused(opt, keys, choice):
    for key in keys:
        if getattr(opt, key, None) is not None:
            raise ValueError(
                f"{key} is set but neither src_position_encoding nor tgt_position_encoding is '{choice}'"
            )


def _check_randomized_options(opt):
    if not _uses(opt, "randomized"):
        _refuse_unused(opt, ("randomized_max_position", "randomized_draw"), "randomized")
        return
    if getattr(opt, "randomized_max_position", None) is None:
        raise ValueError("src/tgt_position_encoding 'randomized' needs randomized_max_position (L)")
    if opt.randomized_max_position < 1:
        raise ValueError(f"randomized_max_position must be >= 1, got {opt.randomized_max_position}")
    if getattr(opt, "randomized_draw", None) is None:
        opt.randomized_draw = "sequence"


def _check_cape_options(opt):
    if not _uses(opt, "cape"):
        _refuse_unused(opt, CAPE_DEFAULTS, "cape")
        return
    for key, default in CAPE_DEFAULTS.items():
        if getattr(opt, key, None) is None:
            setattr(opt, key, default)
    for key in ("cape_max_global_shift", "cape_max_local_shift"):
        if getattr(opt, key) < 0:
            raise ValueError(f"{key} must be >= 0, got {getattr(opt, key)}")
    if opt.cape_max_global_scale < 1:
        raise ValueError(f"cape_max_global_scale must be >= 1, got {opt.cape_max_global_scale}")


def _check_perspe_options(opt):
    uses_perspe = "perspe" in (opt.src_position_encoding, opt.tgt_position_encoding)
    if opt.perspe_range is not None and opt.perspe_range < 1:
        raise ValueError(f"perspe_range must be >= 1, got {opt.perspe_range}")
    if uses_perspe and opt.perspe_range is None:
        raise ValueError("src/tgt_position_encoding 'perspe' needs perspe_range (perSPE's R)")
    if not uses_perspe:
        for key in ("perspe_range", "perspe_unit"):
            if getattr(opt, key) is not None:
                raise ValueError(
                    f"{key} is set but neither src_position_encoding nor tgt_position_encoding is 'perspe'"
                )
        return
    if opt.perspe_unit is None:
        opt.perspe_unit = "phrase"
    if opt.src_position_encoding == "perspe" and opt.perspe_unit != "token":
        raise ValueError(
            "src_position_encoding 'perspe' needs perspe_unit: token "
            "(phrase boundaries exist for the target only)"
        )
