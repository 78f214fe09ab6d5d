"""The one place that touches OpenNMT-py internals.

`activate()` runs once, right after `import onmt` (see `onmt_posenc.startup`).
Every hook below names the OpenNMT-py 3.5.1 function it wraps; when OpenNMT-py
changes, this file is where it breaks.
"""
import functools

import torch

from onmt_posenc import checkpoints, options, strict_config

_active = False


def activate():
    global _active
    if _active:
        return
    _active = True
    _register_transforms()
    _add_options()
    _reject_unknown_config_keys()
    _validate_options()
    _build_position_encodings()
    _load_checkpoints_safely()


def _register_transforms():
    """Transforms register themselves on import; that must precede every parser."""
    import onmt_posenc.transforms  # noqa: F401


def _add_options():
    """Our model options join OpenNMT-py's `model_opts` (used by onmt_train and
    by `ArgumentParser.ckpt_model_opts`, which gives old checkpoints our defaults)."""
    from onmt import opts

    stock_model_opts = opts.model_opts

    @functools.wraps(stock_model_opts)
    def model_opts(parser):
        stock_model_opts(parser)
        options.add_model_options(parser)

    opts.model_opts = model_opts


def _reject_unknown_config_keys():
    from onmt.utils.parse import ArgumentParser

    stock_parse_known_args = ArgumentParser.parse_known_args

    @functools.wraps(stock_parse_known_args)
    def parse_known_args(self, *args, **kwargs):
        # Without this, argparse maps a config key that is a prefix of an option
        # (`shape_max_shif`) onto that option.
        self.allow_abbrev = False
        namespace, extra = stock_parse_known_args(self, *args, **kwargs)
        try:
            strict_config.check_no_unknown_keys(extra, getattr(namespace, "config", None))
        except strict_config.UnknownOptionError as error:
            self.exit(2, f"{self.prog}: error: {error}\n")
        return namespace, extra

    ArgumentParser.parse_known_args = parse_known_args


def _validate_options():
    """Resolve each side's position encoding wherever OpenNMT-py validates model options
    (onmt_train before training, and every checkpoint load)."""
    from onmt.utils.parse import ArgumentParser

    stock_validate = ArgumentParser.validate_model_opts.__func__

    @classmethod
    @functools.wraps(stock_validate)
    def validate_model_opts(cls, model_opt):
        stock_validate(cls, model_opt)
        options.resolve_position_options(model_opt)

    ArgumentParser.validate_model_opts = validate_model_opts


def _build_position_encodings():
    """Replace the `pe` module that `build_embeddings` made with the chosen scheme."""
    from onmt import model_builder

    stock_build_embeddings = model_builder.build_embeddings

    @functools.wraps(stock_build_embeddings)
    def build_embeddings(opt, vocabs, for_encoder=True):
        embeddings = stock_build_embeddings(opt, vocabs, for_encoder=for_encoder)
        side = "src" if for_encoder else "tgt"
        choice = getattr(opt, f"{side}_position_encoding", None)
        if choice is None:  # a caller that skipped validation: resolve now
            choice = getattr(options.resolve_position_options(opt), f"{side}_position_encoding")
        install_position_encoding(embeddings, choice, opt)
        return embeddings

    model_builder.build_embeddings = build_embeddings


def install_position_encoding(embeddings, choice, opt):
    """Put the position module for `choice` at `embeddings.make_embedding.pe`."""
    from onmt.modules.embeddings import PositionalEncoding

    from onmt_posenc import positions

    dim = embeddings.embedding_size
    if choice == "sinusoidal":
        module = PositionalEncoding(dim, opt.position_encoding_type)
    elif choice == "shape":
        module = positions.ShiftedSinusoidalEncoding(
            dim,
            opt.position_encoding_type,
            max_shift=opt.shape_max_shift,
            inference_offset=opt.shape_inference_offset,
        )
    else:
        module = positions.NoPositionEncoding(dim)
    # Embeddings.forward passes `step` to its last module only when this flag is set.
    embeddings.position_encoding = True
    embeddings.make_embedding.add_module("pe", module)


def _load_checkpoints_safely():
    """Every OpenNMT-py checkpoint load (translate, train_from, average, release,
    the CTranslate2 converter) goes through torch.load."""
    if not getattr(torch.load, "onmt_posenc_safe", False):
        torch.load = checkpoints.safe_load(torch.load)
