"""Flags (argparse's store_true and store_false options, such as OpenNMT-py's
`-position_encoding`) that read a `true` or `false` after them on the command line, and
OpenNMT-py's `type=bool` options (the normalize transform's `penn`, ...) read as the word says.

argparse's flags take no value: `-position_encoding false` sets the flag, and `false` is
left over, which OpenNMT-py's `parse_known_args` drops without a word, so the command line
said false and the model got positions. Here the flag alone is still true, `-flag true` and
`-flag false` mean what they say (`false` overrides a config's `flag: true`: configargparse
skips a config key the command line gives), and any other word is refused in one line
that names the YAML form. The classes stay argparse's flags to configargparse, which turns
a config's `flag: true` into the bare flag and `flag: false` into nothing.

A `type=bool` option is `bool(text)`: configargparse passes YAML's `penn: false` as the text
'False', which is true.
"""
import argparse

TRUE_WORDS = ("true", "yes", "on", "1")
FALSE_WORDS = ("false", "no", "off", "0")


def boolean_word(text):
    """The argparse type of a `type=bool` option: a word that says true or false."""
    if text.lower() in TRUE_WORDS:
        return True
    if text.lower() in FALSE_WORDS:
        return False
    raise argparse.ArgumentTypeError(f"expects true or false, got {text!r}")


class _FlagOrWord:
    """The flag, or the flag and one word: `true` (the flag given) or `false` (not given)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.nargs = "?"
        self.metavar = "true|false"

    def __call__(self, parser, namespace, values, option_string=None):
        if not isinstance(values, str):  # the flag alone: argparse passes its const
            given = True
        elif values.lower() in TRUE_WORDS:
            given = True
        elif values.lower() in FALSE_WORDS:
            given = False
        else:
            key = self.option_strings[-1].lstrip("-")
            raise argparse.ArgumentError(
                self, f"expects true or false (or nothing: true), got {values!r}; in a YAML config: `{key}: true` or `{key}: false`")
        setattr(namespace, self.dest, self.const if given else not self.const)


class StoreTrueOrWord(_FlagOrWord, argparse._StoreTrueAction):
    pass


class StoreFalseOrWord(_FlagOrWord, argparse._StoreFalseAction):
    pass
