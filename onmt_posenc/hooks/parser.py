"""Hooks into OpenNMT-py's option parsing (onmt.opts, onmt.utils.parse.ArgumentParser): the
extension's options, `include:`, unknown keys refused, a flag's `true`/`false` on the command line
read as it says, each side's position and attention options resolved wherever model options
are validated."""
import argparse
import functools
import re
import sys
from pathlib import Path

from onmt_posenc.config import include as config_include
from onmt_posenc.config import strict as strict_config
from onmt_posenc.model import options


def add_options():
    """Our model options join OpenNMT-py's `model_opts` (used by onmt_train and
    by `ArgumentParser.ckpt_model_opts`, which gives old checkpoints our defaults);
    attention_kernel also joins `translate_opts` (onmt_translate's own choice)."""
    from onmt import opts

    stock_model_opts = opts.model_opts
    stock_translate_opts = opts.translate_opts

    @functools.wraps(stock_model_opts)
    def model_opts(parser):
        stock_model_opts(parser)
        options.add_model_options(parser)

    @functools.wraps(stock_translate_opts)
    def translate_opts(parser, *args, **kwargs):
        stock_translate_opts(parser, *args, **kwargs)
        options.add_translate_options(parser)

    opts.model_opts = model_opts
    opts.translate_opts = translate_opts


def read_config_includes_and_flag_values():
    """OpenNMT-py's parser reads YAML with configargparse's YAMLConfigFileParser;
    ours adds `include:` (onmt_posenc.config.include). Its flags (store_true and
    store_false: `-position_encoding`, ...) are config_flags' (`-position_encoding false`
    means false), registered under argparse's names so that every option, OpenNMT-py's and
    ours, takes them; so is the type of its `type=bool` options (`penn: false` is false)."""
    from onmt.utils.parse import ArgumentParser

    from onmt_posenc.config import flags as config_flags

    stock_init = ArgumentParser.__init__

    @functools.wraps(stock_init)
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("config_file_parser_class", config_include.IncludingYAMLConfigFileParser)
        stock_init(self, *args, **kwargs)
        self.register("action", "store_true", config_flags.StoreTrueOrWord)
        self.register("action", "store_false", config_flags.StoreFalseOrWord)
        self.register("type", bool, config_flags.boolean_word)  # argparse looks types up here first

    ArgumentParser.__init__ = __init__


def reject_unknown_config_keys():
    from onmt.utils.parse import ArgumentParser

    stock_parse_known_args = ArgumentParser.parse_known_args

    @functools.wraps(stock_parse_known_args)
    def parse_known_args(self, *args, **kwargs):
        # Without this, argparse maps a config key that is a prefix of an option
        # (`shape_max_shif`) onto that option.
        self.allow_abbrev = False
        # For `error` below, which argparse calls without them.
        given = kwargs.get("args", args[0] if args else None)
        self.onmt_posenc_argv = list(sys.argv[1:] if given is None else given)
        namespace, extra = stock_parse_known_args(self, *args, **kwargs)
        try:
            strict_config.check_no_unknown_keys(extra, getattr(namespace, "config", None))
        except strict_config.UnknownOptionError as error:
            self.exit(2, f"{self.prog}: error: {error}\n")
        return namespace, extra

    ArgumentParser.parse_known_args = parse_known_args

    def error(self, message):
        """argparse prints its whole usage (200 lines for onmt_train) before the message:
        give the message alone, with where the option was set."""
        argv = getattr(self, "onmt_posenc_argv", sys.argv[1:])
        named = re.match(r"argument -+(\w+)", message)
        where = ""
        if named:
            where = f" (set in {config_include.where_set(named.group(1), _config_path(argv), argv)})"
        self.exit(2, f"{self.prog}: error: {message}{where}\n")

    ArgumentParser.error = error


def _config_path(argv):
    """The -config argument among a command's arguments (the parse failed: no namespace)."""
    for i, token in enumerate(argv):
        if token in ("-config", "--config") and i + 1 < len(argv):
            path = argv[i + 1]
        elif re.match(r"--?config=", token):
            path = token.split("=", 1)[1]
        else:
            continue
        return path if Path(path).is_file() else None  # a missing config: argparse's error is about it
    return None


def validate_options():
    """Resolve each side's position encoding wherever OpenNMT-py validates model options
    (onmt_train before training, and every checkpoint load)."""
    from onmt.utils.parse import ArgumentParser

    stock_validate = ArgumentParser.validate_model_opts.__func__

    @classmethod
    @functools.wraps(stock_validate)
    def validate_model_opts(cls, model_opt):
        # Ours first: they say more clearly what the stock checks also refuse. onmt_train
        # and the runner check the options before (naming file and line); what fails here
        # otherwise comes from a checkpoint being loaded, and ends in one line.
        try:
            options.resolve_position_options(model_opt)
            options.resolve_attention_options(model_opt)
        except ValueError as error:
            raise options.ModelOptionsError(str(error)) from None
        stock_validate(cls, model_opt)

    ArgumentParser.validate_model_opts = validate_model_opts
