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
def known_option_names():
    """Every option name of onmt_build_vocab, onmt_train and onmt_translate (with the extension's)."""
    from onmt import opts
    from onmt.utils.parse import ArgumentParser

    names = set()
    for add_options in (
        opts.train_opts,
        opts.translate_opts,
        functools.partial(opts.data_prepare_opts, build_vocab_only=True),
    ):
        parser = ArgumentParser()
        add_options(parser)
        names.update(s.lstrip("-") for s in parser._option_string_actions)
    return frozenset(names)


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
