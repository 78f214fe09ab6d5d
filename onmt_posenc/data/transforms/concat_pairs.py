"""`concat_pairs`: the SHAPE paper's INTERPOLATE setting as an OpenNMT-py transform.

    data:
        wmt16:
            path_src: data/wmt16_en_de/train.bpe.en
            path_tgt: data/wmt16_en_de/train.bpe.de
            transforms: [concat_pairs]
    concat_n: 10
    concat_sep: "<sep>"

Lines [gN, gN + N) of a corpus become one example, "X1 <sep> ... <sep> XN" on
the source side and "Y1 <sep> ... <sep> YN" on the target side. The grouping
is onmt_posenc.core.joining's, so training data joined here and dev/test sets
joined offline agree: the last group of a corpus is shorter when its line count
is not a multiple of N (no line is dropped), and an empty line stays an empty
segment between two separators. A corpus with `path_docids` (one document id per
line) is grouped within documents: no group crosses a document boundary.

One line of each group, its trigger, emits the whole group, reading the other members
from the corpus files (onmt_posenc.data.transforms.adjacent_lines: each member goes
through the transforms listed before concat_pairs for that corpus, as the trigger did; if
one of them drops a member, the group is dropped); every other line yields nothing. The
trigger's place in the group rotates with the group number, so each reader gets its share
of groups whatever the striping.

`<sep>` is a vocabulary special (get_specials). Tokenization transforms listed
before concat_pairs never see it; those listed after it tokenize around it
(hooks.data_pipeline.support_concat_pairs), so it is never split.
"""
import bisect
import functools
from array import array

from onmt.transforms import register_transform

from onmt_posenc.core.arguments import one_token, positive_int
from onmt_posenc.core.joining import (DEFAULT_N, DEFAULT_SEP, DOCIDS_KEY, InterpolateError, group_bounds, join_segments,
                                      read_docids)
from onmt_posenc.data.transforms.adjacent_lines import AdjacentLinesError, AdjacentLinesTransform, CorpusLines

NAME = "concat_pairs"


class GroupedLines(CorpusLines):
    """A corpus's lines (no line holding `sep`) and its groups of `n`, within documents where
    `docids_path` names one id per line."""

    def __init__(self, cid, src_path, tgt_path, sep, n, docids_path=None):
        super().__init__(cid, src_path, tgt_path, sep)
        try:
            documents = read_docids(docids_path, len(self), src_path) if docids_path else None
        except InterpolateError as error:
            raise AdjacentLinesError(f"corpus {cid}: {error}") from None
        self.starts = array("q", (start for start, _ in group_bounds(len(self), n, documents)))

    def group(self, line):
        """(number, start, end) of the group that holds `line`."""
        number = bisect.bisect_right(self.starts, line) - 1
        end = self.starts[number + 1] if number + 1 < len(self.starts) else len(self)
        return number, self.starts[number], end


@functools.lru_cache(maxsize=None)
def corpus_lines(cid, src_path, tgt_path, sep, n, docids_path=None):
    """One index per process: onmt_train warms up a transform for training and one for validation."""
    return GroupedLines(cid, src_path, tgt_path, sep, n, docids_path)


@register_transform(name=NAME)
class ConcatPairsTransform(AdjacentLinesTransform):
    """Join every concat_n adjacent pairs of a corpus into one pair, separated by concat_sep."""

    name = NAME

    @classmethod
    def add_options(cls, parser):
        group = parser.add_argument_group("Transform/ConcatPairs (onmt-posenc, INTERPOLATE)")
        group.add(
            "--concat_n",
            "-concat_n",
            type=positive_int,
            default=DEFAULT_N,
            help="Number of adjacent pairs joined into one example (the last group of a corpus "
            "may be shorter).",
        )
        group.add(
            "--concat_sep",
            "-concat_sep",
            type=one_token,
            default=DEFAULT_SEP,
            help="Token put between the joined sentences; added to both vocabularies.",
        )

    @classmethod
    def get_specials(cls, opts):
        return [opts.concat_sep], [opts.concat_sep]

    def _parse_opts(self):
        self.n = self.opts.concat_n
        self.sep = self.opts.concat_sep

    def warm_up(self, vocabs=None):
        super().warm_up(vocabs)
        self._corpus_lines = {
            cid: corpus_lines(cid, corpus["path_src"], corpus["path_tgt"], self.sep, self.n, corpus.get(DOCIDS_KEY))
            for cid, corpus in self.listed_on().items()
        }

    @staticmethod
    def trigger(number, start, end):
        """The line of group `number`, [start, end), that emits it."""
        return start + number % (end - start)

    def apply(self, example, is_train=False, stats=None, **kwargs):
        cid, line = example["cid"], example["cid_line_number"]
        lines = self.lines(cid)
        number, start, end = lines.group(line)
        if line != self.trigger(number, start, end):
            return None
        srcs, tgts = lines.read(start, end)
        self.check_numbering(example, lines, start, srcs, tgts)
        members = []
        for i, (src, tgt) in enumerate(zip(srcs, tgts), start):
            member = example if i == line else self.member(cid, i, src, tgt, is_train)
            if member is None:
                return None
            members.append(member)
        joined = dict(example, cid_line_number=start)
        for field in ("src", "tgt", "src_original", "tgt_original"):
            joined[field] = join_segments([member[field] for member in members], self.sep)
        return joined

    def _repr_args(self):
        return f"concat_n={self.n}, concat_sep={self.sep!r}"
