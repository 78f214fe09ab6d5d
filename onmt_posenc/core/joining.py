"""INTERPOLATE (SHAPE paper): N adjacent sentences joined with a separator token.

Training data is joined on the fly by the `concat_pairs` transform; the dev and
test sets, which are translated and scored, are joined offline with the same
grouping (`onmt-posenc interpolate`, onmt_posenc.data.interpolate).

Grouping: lines [0, N), [N, 2N), ... of a file; when the line count is not a
multiple of N the last group is shorter, so no line is dropped. An empty line
stays an empty segment between two separators, so a group of m lines always
has m - 1 separators.

Within documents: given one document id per line (`--docids`, the corpus key
`path_docids`, or a folder's docid-*.txt files in the runner), groups never
cross a document boundary. Each document is grouped on its own as above: N
adjacent lines, the document's last group shorter, a document of fewer than N
lines one shorter group (nothing is dropped; the paper joined neighbouring
sentences of one document, and a group of one sentence is a plain pair). A
document is a run of equal ids on adjacent lines.
"""
from onmt_posenc.core.errors import UserError
from onmt_posenc.core.text import read_lines

DEFAULT_N = 10
DEFAULT_SEP = "<sep>"
# concat_pairs' corpus key of a file with one document id per line: groups stay within documents
DOCIDS_KEY = "path_docids"


class InterpolateError(UserError, ValueError):
    """Lines that cannot be joined or split as asked."""


def group_bounds(n_lines, n, documents=None):
    """The [start, end) line ranges of the groups of a file of `n_lines` lines; with
    `documents` (one id per line), within each document (a run of equal ids)."""
    if n < 1:
        raise InterpolateError(f"the group size must be >= 1, got {n}")
    if documents is None:
        return [(start, min(start + n, n_lines)) for start in range(0, n_lines, n)]
    if len(documents) != n_lines:
        raise InterpolateError(f"{len(documents)} document ids for {n_lines} lines")
    edges = [i for i in range(n_lines + 1) if i in (0, n_lines) or documents[i] != documents[i - 1]]
    return [(start, min(start + n, last)) for first, last in zip(edges, edges[1:]) for start in range(first, last, n)]


def join_segments(segments, sep):
    """One token list: the segments' tokens with `sep` between segments (empty tokens dropped);
    `sep` None: nothing between them, the sentences run on as one (a plain space in the text)."""
    joined = []
    for i, segment in enumerate(segments):
        if i and sep is not None:
            joined.append(sep)
        joined.extend(token for token in segment if token)
    return joined


def split_segments(tokens, sep):
    """The inverse of join_segments: token lists between the separators."""
    segments = [[]]
    for token in tokens:
        if token == sep:
            segments.append([])
        else:
            segments[-1].append(token)
    return segments


def fit_to_slots(segments, slots):
    """Exactly `slots` segments: missing ones are empty, surplus ones go into the last slot."""
    if len(segments) < slots:
        return segments + [[] for _ in range(slots - len(segments))]
    return segments[: slots - 1] + [[token for segment in segments[slots - 1 :] for token in segment]]


def check_no_separator(lines, path, sep):
    for number, line in enumerate(lines, 1):
        if sep in line.split():
            raise InterpolateError(f"{path}:{number}: the line already contains the separator {sep!r}")


def join_lines(lines, n, sep, documents=None):
    """The INTERPOLATE version of a file's lines: one line per group of n (within documents);
    `sep` None joins them with a plain space (see join_segments)."""
    return [" ".join(join_segments([lines[i].split() for i in range(start, end)], sep))
            for start, end in group_bounds(len(lines), n, documents)]


def read_docids(path, n_lines, lines_of):
    """The document id of each line, from `path` (one per line) for the file `lines_of`
    of `n_lines` lines; a file of another length, or with an empty line, is named."""
    ids = read_lines(path)
    if len(ids) != n_lines:
        raise InterpolateError(f"{path} has {len(ids)} document ids but {lines_of} has {n_lines} lines")
    for number, value in enumerate(ids, 1):
        if not value.strip():
            raise InterpolateError(f"{path}:{number}: an empty document id")
    return [value.strip() for value in ids]


