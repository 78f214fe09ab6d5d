"""`join_adjacent`: training examples of 1 to N adjacent pairs joined with a plain space,
the remedy Varis and Bojar (EMNLP 2021) found for inputs longer than any training sentence.

    data:
        capped:
            path_src: train.en
            path_tgt: train.de
            transforms: [filtertoolong, join_adjacent]
    join_adjacent_max: 3

Each pair of the corpus starts one example: itself and the k - 1 pairs after it in the
file, with k drawn from U{1..join_adjacent_max} each time the example is read: a new draw
every epoch, from the run's `seed`, the line and how many times this process has read it,
so that the draws do not depend on which data worker or build-vocab thread reads the line. Source and target are joined
with a plain space, no separator token: "X1 X2 X3" / "Y1 Y2 Y3", the form of the long
evaluation sets that `joined_sets` makes. So an epoch holds as many examples as pairs, each
pair is read (max + 1) / 2 times on average, and a third of the examples (at max 3) are
single pairs. The neighbours go through the transforms listed before join_adjacent, as the
starting pair did (onmt_posenc.data.transforms.adjacent_lines): under EXTRAPOLATE's
`filtertoolong`, the example stops before the first neighbour that the filter drops, so
only pairs within the cap are joined, and an example is never longer than max x the cap.
"""
import functools
import random
from array import array

from onmt.transforms import register_transform

from onmt_posenc.core.arguments import positive_int
from onmt_posenc.core.joining import DOCIDS_KEY, join_segments
from onmt_posenc.data.transforms.adjacent_lines import AdjacentLinesError, AdjacentLinesTransform, CorpusLines

NAME = "join_adjacent"


@functools.lru_cache(maxsize=None)
def corpus_lines(cid, src_path, tgt_path):
    """One index per process (onmt_train warms up a transform per corpus reader)."""
    return CorpusLines(cid, src_path, tgt_path)


@register_transform(name=NAME)
class JoinAdjacentTransform(AdjacentLinesTransform):
    """Each pair, joined with the next k - 1 pairs, k ~ U{1..join_adjacent_max}, by a plain space."""

    name = NAME

    @classmethod
    def add_options(cls, parser):
        group = parser.add_argument_group("Transform/JoinAdjacent (onmt-posenc, long inputs from short pairs)")
        group.add("--join_adjacent_max", "-join_adjacent_max", type=positive_int, default=3,
                  help="Most adjacent pairs joined into one example; the count is drawn from 1 to this for every "
                       "example each time it is read.")

    def _parse_opts(self):
        self.most = self.opts.join_adjacent_max
        self.seed = self.opts.seed

    def warm_up(self, vocabs=None):
        super().warm_up(vocabs)
        for cid, corpus in self.listed_on().items():
            if corpus.get(DOCIDS_KEY):
                raise AdjacentLinesError(f"corpus {cid}: join_adjacent joins neighbours in the file and reads no "
                                         f"document ids; remove {DOCIDS_KEY} or use concat_pairs")
            self._corpus_lines[cid] = corpus_lines(cid, corpus["path_src"], corpus["path_tgt"])
        # how many times this process has read each line: the epoch, for the lines it reads
        self._reads = {cid: array("L", bytes(array("L").itemsize * len(lines)))
                       for cid, lines in self._corpus_lines.items()}

    def count(self, cid, line):
        """How many pairs the example of `line` joins, drawn for this reading of it."""
        reads = self._reads[cid]
        draw = random.Random(f"{self.seed} {cid} {line} {reads[line]}").randint(1, self.most)
        reads[line] += 1
        return draw

    def apply(self, example, is_train=False, stats=None, **kwargs):
        cid, line = example["cid"], example["cid_line_number"]
        lines = self.lines(cid)
        end = min(line + self.count(cid, line), len(lines))
        srcs, tgts = lines.read(line, end)
        self.check_numbering(example, lines, line, srcs, tgts)
        members = [example]
        for i in range(line + 1, end):
            member = self.member(cid, i, srcs[i - line], tgts[i - line], is_train)
            if member is None:  # the cap (filtertoolong) drops it: the run of adjacent pairs ends here
                break
            members.append(member)
        joined = dict(example)
        for field in ("src", "tgt", "src_original", "tgt_original"):
            joined[field] = join_segments([member[field] for member in members], None)
        return joined

    def _repr_args(self):
        return f"join_adjacent_max={self.most}"
