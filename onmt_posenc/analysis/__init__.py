"""The SHAPE paper's analyses, each usable on any trained OpenNMT-py model and
each an `onmt-posenc` command of its own:

    swapped            move the first sentence of INTERPOLATE examples to the end
    joined_lines       a translation of joined sentences line by line: separators, length, X1
    shift_invariance   encoder hidden states under position offsets
    length_buckets     BLEU and the gain over a baseline by source length
    token_nll          which model gives gold tokens the lower NLL, by position x frequency
    speed              training throughput of models against a baseline, same batches
    position_ablation  features and perplexity with the position encoding removed

The commands check their options and files before they load a model, so that a
mistake costs no model loading or translating.
"""
import os

from onmt_posenc.core.errors import UserError
from onmt_posenc.core.text import read_lines


class AnalysisError(UserError, ValueError):
    """Bad input to an analysis command."""


def labelled(pairs, option, what):
    """{label: value} of a repeated command-line option `--option LABEL=WHAT`."""
    values = {}
    for pair in pairs:
        label, sep, value = pair.partition("=")
        if not sep or not label:
            raise AnalysisError(f"--{option} expects LABEL={what}, got {pair!r}")
        if label in values:  # a dict would keep only the last one, silently
            raise AnalysisError(f"--{option}: the label {label!r} is given twice ({values[label]} and {value})")
        values[label] = value
    return values


def read_texts(paths, limit=None):
    """The lines of text files that go together line by line (a source, its references,
    translations), the first `limit` of each. The first file must have text in those
    lines and every file as many lines as the first, else an AnalysisError names them."""
    texts = []
    for path in paths:
        lines = read_lines(path)  # not UTF-8: an InterpolateError naming the file and line
        if not texts and not any(line.strip() for line in lines[:limit]):
            raise AnalysisError(f"{path} is empty" if not lines else
                                f"{path} has no text in its first {len(lines[:limit])} lines")
        if texts and len(lines) != len(texts[0]):
            raise AnalysisError(f"{paths[0]} has {len(texts[0])} lines but {path} has {len(lines)}; "
                                "they must match line by line")
        texts.append(lines)
    return [lines[:limit] for lines in texts]


def not_a_folder(folder):
    """Why `folder` cannot be used or made as a folder ('is not a folder', naming the file
    where a parent is one), or None."""
    for path in (folder, *folder.parents):
        if path.exists():
            if path.is_dir():
                return None
            return "is not a folder" + ("" if path == folder else f" ({path} is a file)")
    return None


def check_outputs(args, *options):
    """Outputs are written after the work: a folder that is not there must stop the
    command before it, not after (with the other outputs unwritten)."""
    for option in options:
        path = getattr(args, option)
        if path is None:
            continue
        name, folder = "--" + option.replace("_", "-"), os.path.dirname(path) or "."
        if os.path.isdir(path):
            raise AnalysisError(f"{name} {path} is a directory; name a file")
        if not os.path.isdir(folder):
            raise AnalysisError(f"{name} {path}: the folder {folder} does not exist")
        if option.endswith("plot"):
            check_plot_format(name, path)


def check_plot_format(name, path):
    """matplotlib takes the format from the extension; it refuses an unknown one only once
    the figure is drawn, and adds '.png' to a name without one."""
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    extension = os.path.splitext(path)[1].lstrip(".").lower()
    if extension not in formats:
        said = f"a .{extension} file" if extension else "no extension"
        raise AnalysisError(f"{name} {path}: {said}; name the image format by the extension, one of "
                            f"{', '.join('.' + f for f in sorted(formats))} (e.g. .png)")
