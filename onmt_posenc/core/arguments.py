"""Argument types for the project's commands. A value out of range is argparse's own
one-line error naming the option (`argument --width: must be >= 1, got 0`), before
any work starts."""
import argparse


def _int(text):
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


def positive_int(text):
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text):
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def is_one_token(text):
    """A non-empty string without white space, e.g. the `<sep>` separator."""
    return bool(text) and not any(c.isspace() for c in text)


def one_token(text):
    """One whitespace-free token, e.g. the `<sep>` separator."""
    if not is_one_token(text):
        raise argparse.ArgumentTypeError(f"must be one token without spaces, got {text!r}")
    return text
