"""What the transforms that build a training example from a pair and its neighbours in the
corpus file share: `concat_pairs` (INTERPOLATE's fixed groups, with <sep>) and
`join_adjacent` (runs of adjacent pairs joined with a plain space, EXTRAPOLATE's remedy).

Adjacent in the file, however OpenNMT-py reads it: every data worker, onmt_build_vocab
thread and GPU rank reads only a striped subset of a corpus's lines, so neighbours never
reach one transform together. Instead the transform reads them from the corpus files
itself, through an index of line offsets (CorpusLines), and passes each through the
transforms listed before it for that corpus, as the reader passed the example itself
(`member`; a neighbour they drop is None). This needs each example's file line: the
plugin installs a file-line numbering (hooks.data_pipeline.support_concat_pairs), because
OpenNMT-py 3.5.1 numbers examples by a formula that holds for a single reader only.
"""
from array import array

from onmt.transforms import TransformPipe, get_transforms_cls, make_transforms
from onmt.transforms.transform import Transform

from onmt_posenc.core.errors import UserError
from onmt_posenc.core.text import opennmt_tokens


class AdjacentLinesError(UserError, ValueError):
    pass


class CorpusLines:
    """Random access to the lines of a corpus's source and target files, checked once:
    paired line by line, and with `sep`, no line holding that token."""

    def __init__(self, cid, src_path, tgt_path, sep=None):
        self.paths = (src_path, tgt_path)
        self.offsets = tuple(self._index(path, sep) for path in self.paths)
        lengths = [len(offsets) for offsets in self.offsets]
        if lengths[0] != lengths[1]:
            longer = self.paths[lengths.index(max(lengths))]
            raise AdjacentLinesError(
                f"corpus {cid}: {src_path} has {lengths[0]} lines but {tgt_path} has {lengths[1]}; "
                f"{longer}:{min(lengths) + 1} has no partner line"
            )

    @staticmethod
    def _index(path, sep):
        """Byte offset of every line; a line holding the separator token is an error."""
        offsets = array("q")
        marker = sep.encode("utf-8") if sep is not None else None
        with open(path, "rb") as f:
            position = 0
            for number, line in enumerate(f, 1):
                offsets.append(position)
                position += len(line)
                if marker is not None and marker in line and sep in opennmt_tokens(line.decode("utf-8")):
                    raise AdjacentLinesError(
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


class AdjacentLinesTransform(Transform):
    """A transform that reads an example's neighbours in its corpus file. Subclasses set
    `name` (their registered name) and build `self._corpus_lines` ({corpus id: CorpusLines}
    of the corpora that list them) in warm_up, after this class's."""

    name = None

    @classmethod
    def _validate_options(cls, opts):
        for cid, corpus in (getattr(opts, "data", None) or {}).items():  # onmt_translate has no data
            if cls.name in corpus["transforms"] and (corpus.get("path_align") or opts.n_src_feats):
                raise ValueError(f"corpus {cid}: {cls.name} joins plain text pairs only "
                                 "(no path_align, no source features)")

    def warm_up(self, vocabs=None):
        super().warm_up(None)
        # Kept (and pickled to data workers) for the transforms replayed on neighbours.
        self.vocabs = vocabs
        self._transforms_before = {}
        self._corpus_lines = {}

    def listed_on(self):
        """{corpus id: corpus} of the corpora whose transforms list this one. Indexed in
        warm_up, in the main process, so that bad files stop the command before any worker
        starts (an error inside a build-vocab thread leaves onmt_build_vocab hanging)."""
        corpora = getattr(self.opts, "data", None) or {}
        return {cid: corpus for cid, corpus in corpora.items() if self.name in corpus.get("transforms", [])}

    def lines(self, cid):
        if cid not in self._corpus_lines:
            raise AdjacentLinesError(f"{self.name} joins the corpora listed under `data:` only, not {cid!r}; "
                                     "join a file to translate with `onmt-posenc interpolate join`")
        return self._corpus_lines[cid]

    def check_numbering(self, example, lines, start, srcs, tgts):
        """The example's text is its file line's (srcs, tgts: lines from `start`), as it must be
        for its neighbours to be the file's."""
        line = example["cid_line_number"]
        if (example["src_original"], example["tgt_original"]) != (srcs[line - start], tgts[line - start]):
            raise AdjacentLinesError(
                f"{lines.paths[0]}:{line + 1}: OpenNMT-py numbered an example as this line, but its text "
                "differs; is the onmt-posenc plugin active (it numbers examples by file line)?"
            )

    def _before(self, cid):
        """The transforms listed before this one for this corpus, as one pipe."""
        if cid not in self._transforms_before:
            names = self.opts.data[cid]["transforms"]
            names = names[: names.index(self.name)]
            built = make_transforms(self.opts, get_transforms_cls(names), self.vocabs)
            self._transforms_before[cid] = TransformPipe.build_from([built[n] for n in names if n in built])
        return self._transforms_before[cid]

    def member(self, cid, line, src, tgt, is_train):
        """A neighbour as the corpus reader makes it, through the transforms before this one."""
        member = {"src": src, "tgt": tgt, "src_original": list(src), "tgt_original": list(tgt),
                  "cid": cid, "cid_line_number": line}
        return self._before(cid).apply(member, is_train=is_train, corpus_name=cid)
