"""A data setting's files, made ready for its runs: generated (the synthetic task), cut to
their `lines`, joined (INTERPOLATE), and where the runner finds them."""
import dataclasses
import json
import os
import random
from pathlib import Path
from typing import NamedTuple

from onmt_posenc.core import joining as interpolate
from onmt_posenc.core.text import opennmt_tokens, read_lines
from onmt_posenc.data import chunk_japanese, synthetic
from onmt_posenc.experiments.file.spec import SAMPLE_SEED, SETTING_TRANSFORMS, FilePair
from onmt_posenc.experiments.running.store import file_digest, phrase_file, write_text_atomically


class EvalSet(NamedTuple):
    src: Path
    tgt: Path  # what the model reads (teacher forcing)
    ref: Path  # what BLEU compares with


def _require_file(path):
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}")


def _copy_lines(pair, directory, name, join):
    """The files of `pair` in `directory`, cut to their first `lines` and joined `join` per
    line (with <sep> or a plain space, its `joint`), within the documents of its document ids
    (copied, cut, where not joined)."""
    copies, counts = {}, None
    for side in ("src", "tgt", "ref", *(() if join else ("docids",))):
        source = getattr(pair, side)
        if source is None:
            continue
        _require_file(source)
        whole = read_lines(source)
        lines = whole[: pair.lines]
        if pair.sample:
            lines = [whole[i] for i in sample_lines(len(whole), pair.sample, source)]
        if join:
            if side == "src" and pair.separator is not None:
                interpolate.check_no_separator(lines, source, pair.separator)
            documents = None
            if pair.docids is not None:
                _require_file(pair.docids)
                documents = interpolate.read_docids(pair.docids, len(whole), source)[: len(lines)]
            lines = interpolate.join_lines(lines, join, pair.separator, documents)
        if not lines:
            raise ValueError(f"evaluation set {name}: {source} has no lines")
        if copies and len(lines) != counts:
            raise ValueError(f"evaluation set {name}: {source} has {len(lines)} lines where {pair.src} has {counts}")
        counts = len(lines)
        copies[side] = directory / f"{name}.{side}"
        write_text_atomically(copies[side], "".join(line + "\n" for line in lines))
    return EvalSet(copies["src"], copies["tgt"], copies.get("ref", copies["tgt"]))


def sample_lines(count, size, path):
    """The line numbers of `train_sample`: `size` of `count` drawn without replacement from
    SAMPLE_SEED, in file order (the same for every file of a pair, every run and machine)."""
    if size > count:
        raise ValueError(f"train_sample: {size} pairs, but {path} has {count} lines; lower it")
    return sorted(random.Random(SAMPLE_SEED).sample(range(count), size))


def corpus_files(setting, directory):
    """The training and validation files of a data setting where prepare_data puts or
    finds them, without writing anything: {"train": (src, tgt), "valid": (src, tgt) or None,
    "docids": {"train": path or None, "valid": path or None}}."""
    directory = Path(directory)

    def place(pair, name):
        cut = setting.synthetic is not None or pair.lines or pair.sample
        return (directory / f"{name}.src", directory / f"{name}.tgt") if cut else (pair.src, pair.tgt)

    def documents(pair, name):
        if pair is None or pair.docids is None:
            return None
        return directory / f"{name}.docids" if pair.lines or pair.sample else pair.docids

    if setting.synthetic is not None:
        return {"train": place(None, "train"), "valid": place(None, "valid"), "docids": {"train": None, "valid": None}}
    return {"train": place(setting.train, "train"), "valid": place(setting.valid, "valid") if setting.valid else None,
            "docids": {"train": documents(setting.train, "train"), "valid": documents(setting.valid, "valid")}}


def prepare_data(setting, directory):
    """The files of a data setting: {"train": (src, tgt), "valid": (src, tgt) or None,
    "eval": {name: EvalSet}}.

    Synthetic data is generated here (once: the same task writes the same files).
    Evaluation sets are written into `directory`, cut to their `lines` and, in
    an INTERPOLATE setting, joined N sentences per line. Training and validation
    files are used in place unless cut: the runner's OpenNMT-py config applies
    the data setting's transforms to them (see opennmt_config.corpora)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "eval").mkdir(exist_ok=True)
    if setting.synthetic is not None:
        marker = directory / "task.json"
        wanted = json.dumps(setting.synthetic.__dict__, sort_keys=True)
        if not marker.is_file() or marker.read_text(encoding="utf-8") != wanted:
            synthetic.write_corpus(directory, setting.synthetic)
            write_text_atomically(marker, wanted)

        def generated(name):
            return FilePair(directory / f"{name}.src", directory / f"{name}.tgt")

        setting = dataclasses.replace(setting, train=generated("train"), valid=generated("valid"),
                                      eval_sets={name: generated(name) for name in synthetic.EVAL_SETS})
    for name, pair in (("train", setting.train), ("valid", setting.valid)):
        if pair is not None and (pair.lines or pair.sample):
            _copy_lines(pair, directory, name, None)
    files = corpus_files(setting, directory)
    for path in [*(path for part in ("train", "valid") for path in files[part] or ()),
                 *filter(None, files["docids"].values())]:
        _require_file(path)
    return {**files, "eval": {name: _copy_lines(pair, directory / "eval", name, setting.interpolate or pair.join)
                              for name, pair in setting.eval_sets.items()}}


def prepare_phrases(files, directory, say):
    """The phrase file of a data setting's training target (`onmt-posenc chunk-ja`'s), made
    once and made again when the target or the chunker's version changes (the target's SHA-256
    and the version are kept beside it). MeCab and its dictionary are imported only to make the
    file: a machine that is given the made file, such as a GPU machine the batch's data was
    carried to, needs neither."""
    target, phrases = files["train"][1], phrase_file(directory)
    digest, stamp = f"{file_digest(target)} chunk-ja {chunk_japanese.CHUNKER_VERSION}", phrases.with_suffix(".sha256")
    if phrases.is_file() and stamp.is_file() and stamp.read_text(encoding="utf-8").strip() == digest:
        return phrases
    say(f"target phrases of {target} for perSPE (chunk-ja)")
    temporary = phrases.with_name(f".{phrases.name}.{os.getpid()}.tmp")
    chunk_japanese.chunk_file(target, temporary)
    os.replace(temporary, phrases)
    write_text_atomically(stamp, digest + "\n")
    return phrases


# The transform of join_training (onmt_posenc.data.transforms.join_adjacent)
JOIN_ADJACENT = next(name for name, key in SETTING_TRANSFORMS.items() if key == "join_training")


def longest_training_example(directory, config):
    """{"source": tokens, "target": tokens}: the longest source and the longest target a run
    trained on, after every transform, what the analyses call seen.

    The training corpus that `onmt_build_vocab -dump_samples` wrote as the transforms made it
    (EXTRAPOLATE's filter, INTERPOLATE's joining, any tokenization) gives the single examples.
    Under join_training (`join_adjacent`, built into the samples one pair at a time: see
    RunExecutor.execute) an example joins up to join_adjacent_max adjacent pairs that the
    filter keeps, stopping before the first it drops (data/transforms/join_adjacent.py): the
    longest such run of each side is measured on the corpus file, line by line, and its single
    pairs must be the samples' (else the transforms are not the ones measured here)."""
    samples = Path(directory, "sample")
    longest = {}
    for side, suffix in (("source", "src"), ("target", "tgt")):
        paths = sorted(samples.glob(f"*.{suffix}"))
        if not paths:
            raise FileNotFoundError(f"no training samples in {samples}; onmt_build_vocab writes them with -dump_samples")
        longest[side] = max(len(opennmt_tokens(line)) for path in paths for line in read_lines(path))
    for cid, corpus in (config.get("data") or {}).items():
        transforms = corpus.get("transforms") or []
        if JOIN_ADJACENT not in transforms:
            continue
        before = transforms[: transforms.index(JOIN_ADJACENT)]
        if set(before) - {"filtertoolong"}:
            raise ValueError(f"corpus {cid}: the longest joined example is measured with filtertoolong alone before "
                             f"{JOIN_ADJACENT}, not {before}")
        joined, singles = longest_adjacent_runs(
            [len(line.split()) for line in read_lines(corpus["path_src"])],
            [len(line.split()) for line in read_lines(corpus["path_tgt"])],
            config.get("join_adjacent_max", 3), (config.get("src_seq_length"), config.get("tgt_seq_length"))
            if "filtertoolong" in before else None)
        if any(singles[side] > longest[side] for side in singles):
            raise ValueError(f"corpus {cid}: its longest kept pair ({singles}) is longer than the training samples' "
                             f"({longest}): the transforms before {JOIN_ADJACENT} are not the ones measured")
        longest = {side: max(longest[side], joined[side]) for side in longest}
    return longest


def longest_adjacent_runs(src_lengths, tgt_lengths, most, limits):
    """({"source", "target"} of the longest joins of 1 to `most` adjacent kept pairs, the same of
    the single kept pairs), from each line's tokens counted. `limits`: filtertoolong's
    (src_seq_length, tgt_seq_length), which keeps a pair of at most src_seq_length source
    tokens and tgt_seq_length - 2 target tokens (OpenNMT-py's rule: room for <s> and </s>; an
    empty line is one empty token to it, and none once joined: `join_segments`); None: every
    pair kept."""
    if limits is None:
        kept = [True] * len(src_lengths)
    else:
        kept = [max(s, 1) <= limits[0] and max(t, 1) <= limits[1] - 2 for s, t in zip(src_lengths, tgt_lengths)]
    joined, singles = {"source": 0, "target": 0}, {"source": 0, "target": 0}
    for start in range(len(kept)):
        if not kept[start]:
            continue  # dropped before join_adjacent sees it
        singles = {"source": max(singles["source"], src_lengths[start]),
                   "target": max(singles["target"], tgt_lengths[start])}
        end = start
        while end < min(start + most, len(kept)) and kept[end]:
            end += 1
        joined = {"source": max(joined["source"], sum(src_lengths[start:end])),
                  "target": max(joined["target"], sum(tgt_lengths[start:end]))}
    return joined, singles
