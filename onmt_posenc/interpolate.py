"""INTERPOLATE (SHAPE paper): N adjacent sentences joined with a separator token.

Training data is joined on the fly by the `concat_pairs` transform; the dev and
test sets, which are translated and scored, are joined offline with the same
grouping, and translations are split back here:

    onmt-posenc interpolate join -n 10 newstest2014.bpe.en newstest2014.interp.bpe.en
    onmt-posenc interpolate split --source newstest2014.interp.bpe.en hyp.interp hyp

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
import os
import sys

from onmt_posenc.arguments import one_token

DEFAULT_N = 10
DEFAULT_SEP = "<sep>"
# concat_pairs' corpus key of a file with one document id per line: groups stay within documents
DOCIDS_KEY = "path_docids"


class InterpolateError(ValueError):
    pass


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
    """One token list: the segments' tokens with `sep` between segments (empty tokens dropped)."""
    joined = []
    for i, segment in enumerate(segments):
        if i:
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


def read_lines(path):
    """The lines of a text file, split on '\\n' only, as OpenNMT-py reads corpora."""
    try:
        with open(path, encoding="utf-8", newline="\n") as f:
            return [line[:-1] if line.endswith("\n") else line for line in f]
    except UnicodeDecodeError:
        # The decoder names neither the file nor the line: find them (one more read).
        from onmt_posenc.preflight import scan_text

        _, line, reason = scan_text(path)
        raise InterpolateError(f"{path}:{line}: not UTF-8 text ({reason})") from None


def check_no_separator(lines, path, sep):
    for number, line in enumerate(lines, 1):
        if sep in line.split():
            raise InterpolateError(f"{path}:{number}: the line already contains the separator {sep!r}")


def join_lines(lines, n, sep, documents=None):
    """The INTERPOLATE version of a file's lines: one line per group of n (within documents)."""
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


def join_file(in_path, out_path, n=DEFAULT_N, sep=DEFAULT_SEP, docids=None):
    lines = read_lines(in_path)
    check_no_separator(lines, in_path, sep)
    documents = read_docids(docids, len(lines), in_path) if docids else None
    write_lines(out_path, join_lines(lines, n, sep, documents))


def split_file(hyp_path, source_path, out_path, sep=DEFAULT_SEP):
    """Split joined translations back into sentences, one slot per sentence of the source line.

    Returns one message per hypothesis whose separator count differs from its
    source line's; such a line is still written as exactly that many sentences
    (see fit_to_slots), so the sentences of the other lines keep their place.
    """
    hyps, sources = read_lines(hyp_path), read_lines(source_path)
    if len(hyps) != len(sources):
        raise InterpolateError(
            f"{hyp_path} has {len(hyps)} lines but {source_path} has {len(sources)}: "
            "the translations must be of that source, line by line"
        )
    problems, sentences = [], []
    for number, (hyp, source) in enumerate(zip(hyps, sources), 1):
        slots = len(split_segments(source.split(), sep))
        segments = split_segments(hyp.split(), sep)
        if len(segments) != slots:
            problems.append(
                f"{hyp_path}:{number}: {len(segments) - 1} separators where the source has "
                f"{slots - 1}; written as {slots} sentences anyway"
            )
        sentences.extend(" ".join(segment) for segment in fit_to_slots(segments, slots))
    write_lines(out_path, sentences)
    return problems


def write_lines(path, lines):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(line + "\n" for line in lines)


def add_arguments(parser):
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    join = actions.add_parser("join", help="join every N lines of a file into one line")
    join.add_argument("input")
    join.add_argument("output")
    join.add_argument("-n", type=int, default=DEFAULT_N, help="sentences per line (default: %(default)s)")
    join.add_argument("--sep", type=one_token, default=DEFAULT_SEP, help="separator token (default: %(default)s)")
    join.add_argument("--docids", metavar="FILE",
                      help="one document id per line of the input: groups never cross a document")
    split = actions.add_parser("split", help="split joined translations back into one sentence per line")
    split.add_argument("hypotheses", help="translations of the joined source, one per line")
    split.add_argument("output")
    split.add_argument("--source", required=True, help="the joined source that was translated")
    split.add_argument("--sep", type=one_token, default=DEFAULT_SEP, help="separator token (default: %(default)s)")


def check_not_an_input(output, inputs):
    """Writing over an input would lose it before it is read whole."""
    for path in inputs:
        if os.path.exists(output) and os.path.exists(path) and os.path.samefile(output, path):
            raise InterpolateError(f"the output {output} is the input {path}; name another output file")


def main(args):
    try:
        check_not_an_input(args.output, [args.input] if args.action == "join" else [args.hypotheses, args.source])
        if args.action == "join":
            join_file(args.input, args.output, args.n, args.sep, args.docids)
            return 0
        problems = split_file(args.hypotheses, args.source, args.output, args.sep)
    except (InterpolateError, OSError, UnicodeDecodeError) as error:
        print(f"onmt-posenc interpolate: error: {error}", file=sys.stderr)
        return 2
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"{len(problems)} line(s) had a wrong number of separators", file=sys.stderr)
    return 0
