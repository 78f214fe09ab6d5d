"""Unknown configuration keys are errors, not silently ignored.

OpenNMT-py's commands parse with `parse_known_args` and drop what they do not
know, so a typo such as `shape_max_shif: 500` trains plain APE without a word.
Here a key that no OpenNMT-py command and no extension option knows stops the
command, with the config file and line it came from and the nearest known key.
Keys known to another command stay allowed: one YAML often serves both
`onmt_build_vocab` and `onmt_train`.
"""
import difflib
import functools
import re

from onmt_posenc.core.errors import UserError
from onmt_posenc.config.include import where_set


class UnknownOptionError(UserError, ValueError):
    pass


@functools.lru_cache(maxsize=None)
def command_parsers():
    """{command: its option parser} of onmt_train, onmt_translate and onmt_build_vocab (with the
    extension's options)."""
    from onmt import opts
    from onmt.utils.parse import ArgumentParser

    parsers = {}
    for command, add_options in (
        ("onmt_train", opts.train_opts),
        ("onmt_translate", opts.translate_opts),
        ("onmt_build_vocab", functools.partial(opts.data_prepare_opts, build_vocab_only=True)),
    ):
        parsers[command] = ArgumentParser()
        add_options(parsers[command])
    return parsers


@functools.lru_cache(maxsize=None)
def known_option_names():
    """Every option name of onmt_build_vocab, onmt_train and onmt_translate (with the extension's)."""
    return frozenset(s.lstrip("-") for parser in command_parsers().values() for s in parser._option_string_actions)


def unknown_keys(extra_args):
    """The option names among the leftovers of parse_known_args (values are skipped)."""
    keys = []
    for token in extra_args:
        if not token.startswith("-") or re.fullmatch(r"-[\d.e+-]+", token):
            continue
        key = token.lstrip("-").split("=", 1)[0]
        if key and key not in known_option_names():
            keys.append(key)
    return keys


def check_no_unknown_keys(extra_args, config_path=None):
    keys = unknown_keys(extra_args)
    if not keys:
        return
    lines = []
    for key in keys:
        line = f"unknown option '{key}' (set in {where_set(key, config_path)})"
        nearest = difflib.get_close_matches(key, known_option_names(), n=1, cutoff=0.6)
        if nearest:
            line += f"; did you mean '{nearest[0]}'?"
        lines.append(line)
    raise UnknownOptionError("\n".join(lines))
