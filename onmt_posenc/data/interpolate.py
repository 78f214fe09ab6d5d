"""`onmt-posenc interpolate`: INTERPOLATE's dev and test files, joined offline as the
`concat_pairs` transform joins training data (onmt_posenc.core.joining's grouping),
and translations of joined lines split back into sentences.

    onmt-posenc interpolate join -n 10 newstest2014.bpe.en newstest2014.interp.bpe.en [--docids FILE]
    onmt-posenc interpolate split --source newstest2014.interp.bpe.en hyp.interp hyp
"""
import sys

from onmt_posenc.core.arguments import one_token
from onmt_posenc.core.joining import (DEFAULT_N, DEFAULT_SEP, InterpolateError, check_no_separator, fit_to_slots, join_lines, read_docids, split_segments)
from onmt_posenc.core.text import check_not_an_input, read_lines, write_lines


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


def main(args):
    check_not_an_input(args.output, [args.input] if args.action == "join" else [args.hypotheses, args.source])
    if args.action == "join":
        join_file(args.input, args.output, args.n, args.sep, args.docids)
        return 0
    problems = split_file(args.hypotheses, args.source, args.output, args.sep)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"{len(problems)} line(s) had a wrong number of separators", file=sys.stderr)
    return 0
