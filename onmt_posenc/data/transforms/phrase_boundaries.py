"""Target phrase boundaries for perSPE, read from a file made offline.

The paper chunks the target when the data is built, not during training, so
training runs at baseline speed (Oka et al. 2022, section 4). Each training
corpus names its boundary file beside its target, as OpenNMT-py does for
alignments (`path_align`):

    data:
        corpus_1:
            path_src: train.en
            path_tgt: train.ja
            path_tgt_phrases: train.ja.phrases    # onmt-posenc chunk-ja train.ja train.ja.phrases
            transforms: [tgt_phrases]

The file has one line per target line and one phrase index per target token,
counting from 0 in token order ("0 0 1 1 1 2"). It is read beside the target
file, whose line is checked against the example's text, so a file made from
another target, or a misnumbered line, stops training with the file and line.
The transform `tgt_phrases` attaches the indices to each training example
(after every transform that changes the target); validation and translation read none,
since perSPE perturbs nothing there. `attach_phrase_groups` then adds them to
the batch's target tensor, which carries them to the decoder.
"""
import mmap
import os
from array import array

import torch
from onmt.constants import CorpusName
from onmt.transforms import register_transform
from onmt.transforms.transform import Transform

from onmt_posenc.core.errors import UserError
from onmt_posenc.core.text import opennmt_tokens

NAME = "tgt_phrases"
PATH_KEY = "path_tgt_phrases"
EXAMPLE_KEY = "tgt_phrases"


class PhraseFileError(UserError, ValueError):
    pass


class Lines:
    """Random access to the lines of a file as OpenNMT-py's corpus reader splits
    them (on b"\\n"); memory-mapped, so data-loader processes share the pages."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            self._data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if os.path.getsize(path) else b""
        self._starts = array("q", [0])
        at = self._data.find(b"\n")
        while at != -1:
            self._starts.append(at + 1)
            at = self._data.find(b"\n", at + 1)
        if self._starts[-1] != len(self._data):  # a last line without its newline
            self._starts.append(len(self._data))

    def __len__(self):
        return len(self._starts) - 1

    def __getitem__(self, number):
        return self._data[self._starts[number] : self._starts[number + 1]].decode("utf-8")


class PhraseFile:
    """A boundary file, read beside the target file it was made from."""

    def __init__(self, path, target_path):
        self.phrases, self.targets = Lines(path), Lines(target_path)
        if len(self.phrases) != len(self.targets):
            raise PhraseFileError(
                f"{path} has {len(self.phrases)} lines but the target {target_path} has "
                f"{len(self.targets)}: the boundary file must be made from this very target file"
            )

    def ids(self, line_number, original, n_tokens):
        """The phrase indices of target line `line_number` (0-based), whose text the corpus
        reader gave as `original` (its tokens) and which reaches this transform as `n_tokens`."""
        where = f"{self.phrases.path}:{line_number + 1}"
        if line_number >= len(self.phrases):
            raise PhraseFileError(f"{where}: no such line (the file has {len(self.phrases)})")
        # The reader's line number must name the line it read (OpenNMT-py 3.5.1 misnumbers
        # lines when several data workers or GPUs share a corpus).
        if opennmt_tokens(self.targets[line_number]) != original:
            raise PhraseFileError(
                f"{self.targets.path}:{line_number + 1} is not the line the corpus reader gave as "
                f"line {line_number + 1}: the reader's line numbers are wrong"
            )
        fields = self.phrases[line_number].split()
        if len(fields) != n_tokens:
            raise PhraseFileError(
                f"{where}: {len(fields)} phrase indices for a target of {n_tokens} tokens. The file "
                f"must be made from the target as the model reads it (after any subword "
                f"segmentation), and `{NAME}` must come after every transform that changes the target."
            )
        try:
            ids = [int(field) for field in fields]
        except ValueError:
            raise PhraseFileError(f"{where}: phrase indices must be integers, got {' '.join(fields)!r}") from None
        previous = -1
        for token, phrase in enumerate(ids):
            if phrase not in (previous, previous + 1) or (token == 0 and phrase != 0):
                raise PhraseFileError(
                    f"{where}: phrase indices must count from 0 in token order, each the same "
                    f"as the previous one or one more; token {token + 1} has {phrase} after {previous}"
                )
            previous = phrase
        return ids


@register_transform(name=NAME)
class TargetPhrasesTransform(Transform):
    """Attach each training target's phrase indices (example["tgt_phrases"]) from the
    corpus's `path_tgt_phrases` file; a missing file or line is an error."""

    @classmethod
    def _validate_options(cls, opts):
        corpora = getattr(opts, "data", None)
        if not isinstance(corpora, dict):  # onmt_translate: no corpora, nothing read
            return
        for name, corpus in corpora.items():
            if name == CorpusName.VALID or NAME not in (corpus.get("transforms") or []):
                continue
            path = corpus.get(PATH_KEY)
            if path is None:
                raise PhraseFileError(
                    f"corpus '{name}' uses the {NAME} transform but sets no {PATH_KEY} "
                    f"(make one with `onmt-posenc chunk-ja`)"
                )
            if not os.path.isfile(path):
                raise PhraseFileError(f"corpus '{name}': {PATH_KEY} {path} does not exist")

    def _parse_opts(self):
        corpora = getattr(self.opts, "data", None)
        self.corpora = corpora if isinstance(corpora, dict) else {}
        self.files = {}

    def phrase_file(self, corpus_name):
        if corpus_name not in self.files:
            corpus = self.corpora.get(corpus_name, {})
            if corpus.get(PATH_KEY) is None:
                raise PhraseFileError(f"corpus '{corpus_name}' uses the {NAME} transform but sets no {PATH_KEY}")
            self.files[corpus_name] = PhraseFile(corpus[PATH_KEY], corpus["path_tgt"])
        return self.files[corpus_name]

    def apply(self, example, is_train=False, stats=None, **kwargs):
        if not is_train:  # perSPE perturbs training positions only
            return example
        phrase_file = self.phrase_file(example["cid"])
        example[EXAMPLE_KEY] = phrase_file.ids(
            example["cid_line_number"], example["tgt_original"], len(example["tgt"])
        )
        return example


def attach_phrase_groups(tensor_batch, minibatch, left_pad=False):
    """Append the phrase groups of `minibatch` (the examples `tensorify` just made
    `tensor_batch` from) to `tensor_batch["tgt"]` as one more column.

    Groups follow the target tensor: 0 for the start token and padding (never
    perturbed), 1 + phrase index for each token, one more group for the end
    token. Riding in the target tensor, they go wherever the target goes
    (device, `tgt[:, :-1]` for the decoder input) and the decoder's Embeddings
    hand them to the perSPE module (`onmt_posenc.hooks.data_pipeline.carry_target_phrases`).
    """
    carried = [EXAMPLE_KEY in example for example, _ in minibatch]
    if not any(carried):
        return tensor_batch
    if not all(carried):
        example = minibatch[carried.index(False)][0]
        raise PhraseFileError(
            f"corpus '{example['cid']}' has no target phrases while others in the batch do: "
            f"add the {NAME} transform and {PATH_KEY} to it"
        )
    target = tensor_batch["tgt"]
    length = target.size(1)
    rows = []
    for example, _ in minibatch:
        phrases = example[EXAMPLE_KEY]
        if len(example["tgt"]["tgt_ids"]) != len(phrases) + 2:
            raise PhraseFileError(
                f"corpus '{example['cid']}' line {example['cid_line_number'] + 1}: {len(phrases)} phrase "
                f"indices but {len(example['tgt']['tgt_ids']) - 2} target tokens reached the model; a "
                f"transform after {NAME} changed the target (list {NAME} last)"
            )
        groups = [0] + [phrase + 1 for phrase in phrases] + [phrases[-1] + 2 if phrases else 1]
        padding = [0] * (length - len(groups))
        rows.append(padding + groups if left_pad else groups + padding)
    groups = torch.tensor(rows, dtype=target.dtype, device=target.device)
    tensor_batch["tgt"] = torch.cat([target, groups[:, :, None]], dim=2)
    return tensor_batch
