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
from onmt_posenc.config.include import config_chain


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


def on_command_line(key, argv):
    """Whether `argv` (the command's arguments) sets `-key`/`--key`."""
    return any(re.fullmatch(rf"--?{re.escape(key)}(=.*)?", token) for token in argv or ())


def where_set(key, config_path, argv=None):
    """'file:line' of a top-level YAML key (the including file wins), or 'the command line'
    (also where `argv` sets it: the command line overrides the config)."""
    if config_path and not on_command_line(key, argv):
        pattern = re.compile(rf"^{re.escape(key)}\s*:")
        for path in reversed(config_chain(config_path)):
            with open(path, encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    if pattern.match(line):
                        return f"{path}:{number}"
    return "the command line"


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
