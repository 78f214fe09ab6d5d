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

Adjacent in the file, however OpenNMT-py reads it: every data worker,
onmt_build_vocab thread and GPU rank reads only a striped subset of a corpus's
lines, so the N lines of a group never reach one transform together. Instead
one line of each group, its trigger, emits the whole group, and the transform
reads the other members from the corpus files itself (through an index of line
offsets); every other line yields nothing. Each member first goes through the
transforms listed before concat_pairs for that corpus, as the trigger did; if
one of them drops a member, the group is dropped. The trigger's place in the
group rotates with the group number, so each reader gets its share of groups
whatever the striping. This needs each example's file line: the plugin installs
a file-line numbering (hooks.data_pipeline.support_concat_pairs), because OpenNMT-py 3.5.1 numbers examples by a
formula that holds for a single reader only.

`<sep>` is a vocabulary special (get_specials). Tokenization transforms listed
before concat_pairs never see it; those listed after it tokenize around it
(hooks.data_pipeline.support_concat_pairs), so it is never split.
"""
import bisect
import functools
from array import array

from onmt.transforms import TransformPipe, get_transforms_cls, make_transforms, register_transform
from onmt.transforms.transform import Transform

from onmt_posenc.core.errors import UserError
from onmt_posenc.core.arguments import one_token, positive_int
from onmt_posenc.core.text import opennmt_tokens
from onmt_posenc.core.joining import (DEFAULT_N, DEFAULT_SEP, DOCIDS_KEY, InterpolateError, group_bounds, join_segments, read_docids)

NAME = "concat_pairs"


class ConcatPairsError(UserError, ValueError):
    pass


class CorpusLines:
    """Random access to the lines of a corpus's source and target files, checked once."""

    def __init__(self, cid, src_path, tgt_path, sep, n, docids_path=None):
        self.paths = (src_path, tgt_path)
        self.offsets = tuple(self._index(path, sep) for path in self.paths)
        lengths = [len(offsets) for offsets in self.offsets]
        if lengths[0] != lengths[1]:
            longer = self.paths[lengths.index(max(lengths))]
            raise ConcatPairsError(
                f"corpus {cid}: {src_path} has {lengths[0]} lines but {tgt_path} has {lengths[1]}; "
                f"{longer}:{min(lengths) + 1} has no partner line"
            )
        try:
            documents = read_docids(docids_path, lengths[0], src_path) if docids_path else None
        except InterpolateError as error:
            raise ConcatPairsError(f"corpus {cid}: {error}") from None
        self.starts = array("q", (start for start, _ in group_bounds(lengths[0], n, documents)))

    def group(self, line):
        """(number, start, end) of the group that holds `line`."""
        number = bisect.bisect_right(self.starts, line) - 1
        end = self.starts[number + 1] if number + 1 < len(self.starts) else len(self)
        return number, self.starts[number], end

    @staticmethod
    def _index(path, sep):
        """Byte offset of every line; a line holding the separator token is an error."""
        offsets = array("q")
        marker = sep.encode("utf-8")
        with open(path, "rb") as f:
            position = 0
            for number, line in enumerate(f, 1):
                offsets.append(position)
                position += len(line)
                if marker in line and sep in opennmt_tokens(line.decode("utf-8")):
                    raise ConcatPairsError(
                        f"{path}:{number}: the line already contains the concat_pairs separator "
                        f"{sep!r}; remove it or choose another concat_sep"
                    )
        return offsets

    def __len__(self):
        return len(self.offsets[0])

    def read(self, start, end):
        """Lines [start, end) of each file, as OpenNMT-py's token lists."""
        sides = []
        for path, offsets in zip(self.paths, self.offsets):
            with open(path, "rb") as f:
                f.seek(offsets[start])
                sides.append([opennmt_tokens(f.readline().decode("utf-8")) for _ in range(start, end)])
        return sides


@functools.lru_cache(maxsize=None)
def corpus_lines(cid, src_path, tgt_path, sep, n, docids_path=None):
    """One index per process: onmt_train warms up a transform for training and one for validation."""
    return CorpusLines(cid, src_path, tgt_path, sep, n, docids_path)


@register_transform(name=NAME)
class ConcatPairsTransform(Transform):
    """Join every concat_n adjacent pairs of a corpus into one pair, separated by concat_sep."""

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
    def _validate_options(cls, opts):
        for cid, corpus in (getattr(opts, "data", None) or {}).items():  # onmt_translate has no data
            if NAME in corpus["transforms"] and (corpus.get("path_align") or opts.n_src_feats):
                raise ValueError(f"corpus {cid}: concat_pairs joins plain text pairs only "
                                 "(no path_align, no source features)")

    @classmethod
    def get_specials(cls, opts):
        return [opts.concat_sep], [opts.concat_sep]

    def _parse_opts(self):
        self.n = self.opts.concat_n
        self.sep = self.opts.concat_sep

    def warm_up(self, vocabs=None):
        super().warm_up(None)
        # Kept (and pickled to data workers) for the transforms replayed on group members.
        self.vocabs = vocabs
        self._transforms_before = {}
        # Indexed here, in the main process, so that bad files stop the command before any
        # worker starts (an error inside a build-vocab thread leaves onmt_build_vocab hanging).
        corpora = getattr(self.opts, "data", None) or {}
        self._corpus_lines = {
            cid: corpus_lines(cid, corpus["path_src"], corpus["path_tgt"], self.sep, self.n, corpus.get(DOCIDS_KEY))
            for cid, corpus in corpora.items()
            if NAME in corpus.get("transforms", [])
        }

    def _lines(self, cid):
        if cid not in self._corpus_lines:
            raise ConcatPairsError(
                f"concat_pairs joins the corpora listed under `data:` only, not {cid!r}; "
                "join a file to translate with `onmt-posenc interpolate join`"
            )
        return self._corpus_lines[cid]

    def _before(self, cid):
        """The transforms listed before concat_pairs for this corpus, as one pipe."""
        if cid not in self._transforms_before:
            names = self.opts.data[cid]["transforms"]
            names = names[: names.index(NAME)]
            built = make_transforms(self.opts, get_transforms_cls(names), self.vocabs)
            self._transforms_before[cid] = TransformPipe.build_from([built[n] for n in names if n in built])
        return self._transforms_before[cid]

    @staticmethod
    def trigger(number, start, end):
        """The line of group `number`, [start, end), that emits it."""
        return start + number % (end - start)

    def apply(self, example, is_train=False, stats=None, **kwargs):
        cid, line = example["cid"], example["cid_line_number"]
        lines = self._lines(cid)
        number, start, end = lines.group(line)
        if line != self.trigger(number, start, end):
            return None
        srcs, tgts = lines.read(start, end)
        if (example["src_original"], example["tgt_original"]) != (srcs[line - start], tgts[line - start]):
            raise ConcatPairsError(
                f"{lines.paths[0]}:{line + 1}: OpenNMT-py numbered an example as this line, but its text "
                "differs; is the onmt-posenc plugin active (it numbers examples by file line)?"
            )
        members = []
        for i, (src, tgt) in enumerate(zip(srcs, tgts), start):
            member = example if i == line else self._member(cid, i, src, tgt, is_train)
            if member is None:
                return None
            members.append(member)
        joined = dict(example, cid_line_number=start)
        for field in ("src", "tgt", "src_original", "tgt_original"):
            joined[field] = join_segments([member[field] for member in members], self.sep)
        return joined

    def _member(self, cid, line, src, tgt, is_train):
        """A group member as the corpus reader makes it, through the transforms before ours."""
        member = {"src": src, "tgt": tgt, "src_original": list(src), "tgt_original": list(tgt),
                  "cid": cid, "cid_line_number": line}
        return self._before(cid).apply(member, is_train=is_train, corpus_name=cid)

    def _repr_args(self):
        return f"concat_n={self.n}, concat_sep={self.sep!r}"
