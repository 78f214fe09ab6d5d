"""The extension's model options, added to OpenNMT-py's own model options.

They are saved in checkpoints with the rest of `opt`, so translation rebuilds
exactly the position scheme a model was trained with.
"""

POSITION_CHOICES = ("sinusoidal", "shape", "none")


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
            "else 'none'.",
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


def resolve_position_options(opt):
    """Check the options and fill in each side's position encoding.

    Raises ValueError naming the option at fault.
    """
    uses_shape = False
    for side in ("src", "tgt"):
        key = f"{side}_position_encoding"
        choice = getattr(opt, key, None)
        if choice is None:
            if opt.shape_max_shift is not None:
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
    return opt
