"""Checks that stop onmt_train, onmt_build_vocab and onmt_translate early, in one line,
when what a config asks for is not on this machine (a corpus file, a vocabulary, GPUs,
a complete checkpoint) or cannot be read (bad values, corpora that are not UTF-8, empty
or of unequal line counts).

OpenNMT-py checks the corpus files inside each training process, so a recipe for 8
GPUs run where the data or the GPUs are missing spawns 8 workers that fail one by
one in tracebacks. hooks/commands.py runs these checks in the parent, before any worker.
"""
import copy
import multiprocessing
import os
import re
import sys
from pathlib import Path

import yaml

from onmt_posenc.core.errors import UserError
from onmt_posenc.model import checkpoints
from onmt_posenc.config import include as config_include
from onmt_posenc.core.text import scan_text

# The corpus keys that name a file OpenNMT-py (or our tgt_phrases transform) reads.
PATH_KEYS = ("path_src", "path_tgt", "path_txt", "path_align", "path_tgt_phrases", "path_docids")
# `onmt-posenc prepare-wmt16 build` writes the WMT16 files of the recipes into a
# folder of this name.
WMT16_FOLDER = "wmt16_en_de"


class PreflightError(UserError):
    """What is missing and how to get it, in one line."""


def exit_on_error(check, *args):
    """Run a check; on failure end the command with its one line (no traceback), as
    argparse does."""
    try:
        check(*args)
    except PreflightError as error:
        raise SystemExit(f"{Path(sys.argv[0]).name}: error: {error}") from None


def making_command(key, path, corpus):
    """The command that writes a missing data file, where the project knows it."""
    if key == "path_tgt_phrases":
        return f"onmt-posenc chunk-ja {corpus.get('path_tgt', 'TARGET')} {path}"
    folder = Path(path).parent
    if folder.name == WMT16_FOLDER:
        raw = folder.parent / "wmt16_raw"
        return f"onmt-posenc prepare-wmt16 download {raw} && onmt-posenc prepare-wmt16 build {raw} {folder}"
    return None


def check_corpora(data, opt=None):
    """Every file the `data` corpora name exists, and (with `opt`, the command's
    options) is UTF-8 text, not empty, with as many source as target lines. `data`
    is the YAML text or the mapping (OpenNMT-py replaces the text by the mapping
    when it validates it)."""
    corpora = yaml.safe_load(data) if isinstance(data, str) else data
    for name, corpus in (corpora or {}).items():
        for key in PATH_KEYS:
            path = corpus.get(key)
            if path is None or os.path.isfile(path):
                continue
            command = making_command(key, path, corpus)
            # Relative paths are the usual surprise: say where they were looked for.
            how = f"make it with: {command}" if command else f"paths are relative to {os.getcwd()}"
            raise PreflightError(f"corpus '{name}': {key} {path} does not exist; {how}")
    # A spawned training process: its parent has read the files already (see the cost in scan_text).
    if opt is None or multiprocessing.parent_process() is not None:
        return
    for name, corpus in (corpora or {}).items():
        check_corpus_text(name, corpus)
        transforms = corpus.get("transforms")
        if transforms is None:  # as OpenNMT-py: the default transforms
            transforms = getattr(opt, "transforms", None) or []
        if "concat_pairs" in transforms:
            check_concat_pairs(name, corpus, getattr(opt, "concat_sep", None), getattr(opt, "concat_n", None))


def check_corpus_text(name, corpus, keys=("path_src", "path_tgt")):
    """OpenNMT-py reads corpora as UTF-8 (a bad byte ends it in a traceback, from a
    data worker), counts no lines (an empty corpus gives an empty vocabulary, then an
    IndexError in training) and pairs lines silently (a shorter target drops the rest
    of the source). `keys`: the corpus's source and target keys, as its file names them."""
    counts = {}
    for key in keys:
        path = corpus.get(key)
        if path is None:
            continue
        lines, bad_line, reason = scan_text(path)
        if bad_line is not None:
            raise PreflightError(f"corpus '{name}': {path}:{bad_line}: not UTF-8 text ({reason})")
        if lines == 0:
            raise PreflightError(f"corpus '{name}': {key} {path} is empty")
        counts[key] = (path, lines)
    if len(counts) == 2:
        (src, n_src), (tgt, n_tgt) = counts.values()
        if n_src != n_tgt:
            longer = src if n_src > n_tgt else tgt
            # concat_pairs' wording (onmt_posenc/data/transforms/concat_pairs.py), for every corpus
            raise PreflightError(f"corpus '{name}': {src} has {n_src} lines but {tgt} has {n_tgt}; "
                                 f"{longer}:{min(n_src, n_tgt) + 1} has no partner line")


def check_concat_pairs(name, corpus, sep, n):
    """INTERPOLATE's own checks (a line holding the separator, document ids) in the parent
    process. The index is cached per process, so the transform reuses it where it runs here."""
    from onmt_posenc.core.joining import DEFAULT_N, DEFAULT_SEP, DOCIDS_KEY
    from onmt_posenc.data.transforms import adjacent_lines, concat_pairs

    try:
        concat_pairs.corpus_lines(name, corpus["path_src"], corpus["path_tgt"], sep or DEFAULT_SEP, n or DEFAULT_N,
                                  corpus.get(DOCIDS_KEY))
    except adjacent_lines.AdjacentLinesError as error:
        raise PreflightError(str(error)) from None


def check_text_file(path):
    """A file read as UTF-8 lines by an onmt-posenc command: name the first bad line."""
    _, bad_line, reason = scan_text(path)
    if bad_line is not None:
        raise PreflightError(f"{path}:{bad_line}: not UTF-8 text ({reason})")


def check_vocabularies(opt):
    """onmt_train reads the vocabularies that onmt_build_vocab wrote."""
    names = ["src_vocab"] + ([] if opt.share_vocab else ["tgt_vocab"])
    for name in names:
        path = getattr(opt, name)
        if path and not os.path.isfile(path):
            config = f"-config {opt.config} " if getattr(opt, "config", None) else ""
            raise PreflightError(f"{name} {path} does not exist; make it with: onmt_build_vocab {config}-n_sample -1")


def check_gpus(world_size, gpu_ranks, found):
    """onmt_train starts one process per entry of gpu_ranks, each on its own local GPU;
    world_size > 1 without gpu_ranks starts none and trains nothing."""
    wanted = len(gpu_ranks) if gpu_ranks else (world_size if world_size > 1 else 0)
    if wanted <= found:
        return
    if found == 0:
        override = "`-world_size 1 -gpu_ranks` (no ranks: train on the CPU)"
    else:
        override = f"`-world_size {found} -gpu_ranks {' '.join(str(rank) for rank in range(found))}`"
    raise PreflightError(
        f"world_size {world_size} with gpu_ranks {list(gpu_ranks)} asks for {wanted} GPUs, "
        f"{found} found; on this machine add {override}"
    )


def check_model_options(opt, argv=None):
    """The extension's model options (options.py) as onmt_train will resolve them, on a
    copy, naming where the option at fault was set: options.py's messages start with it."""
    from onmt.utils.parse import ArgumentParser

    from onmt_posenc.model import options

    resolved = copy.copy(opt)
    ArgumentParser.update_model_opts(resolved)  # hidden_size, word_vec_size to each side's, as onmt_train does
    try:
        options.resolve_position_options(copy.copy(resolved))
        options.resolve_attention_options(copy.copy(resolved))
    except ValueError as error:
        raise PreflightError(f"{error}{where(str(error), opt, argv)}") from None


# Counts of updates: OpenNMT-py takes 0 or less without a word and then trains without
# end (train_steps), or fails with a ZeroDivisionError at the first update (the others).
SCHEDULE_STEPS = ("train_steps", "valid_steps", "save_checkpoint_steps")


def check_schedule(opt, argv=None):
    for key in SCHEDULE_STEPS:
        value = getattr(opt, key, None)
        if value is not None and value < 1:
            message = f"{key} must be >= 1, got {value}"
            raise PreflightError(message + where(message, opt, argv))


def where(message, opt, argv=None):
    """' (set in FILE:LINE)' for the first option that `message` names and that the
    config or the command line sets; '' if none."""
    for word in re.findall(r"[a-z]\w*", message):
        if not hasattr(opt, word):
            continue
        place = config_include.where_set(word, getattr(opt, "config", None), argv)
        if place != "the command line" or config_include.on_command_line(word, argv):
            return f" (set in {place})"
    return ""


def check_checkpoint(path, option):
    """`path` (the value of `option`) loads as a checkpoint; a file cut short by a killed
    save, or another file, is named in one line (torch's own error does not name it)."""
    try:
        checkpoints.check_complete(path)
    except checkpoints.UnsafeCheckpointError as error:
        raise PreflightError(str(error)) from None
    except checkpoints.CheckpointError as error:
        raise PreflightError(f"{option} {error}") from None


def check_training(opt, gpus_found, argv=None):
    """All of the above for onmt_train: options first (wrong wherever it trains), then data."""
    check_model_options(opt, argv)
    check_schedule(opt, argv)
    check_corpora(opt.data, opt)
    check_vocabularies(opt)
    if opt.train_from:
        check_checkpoint(opt.train_from, "train_from")
    check_gpus(opt.world_size, opt.gpu_ranks, gpus_found)


def check_translation(opt, gpus_found):
    """onmt_translate opens its output file before it loads the models: check them (and
    the GPU) first, so that a failure leaves no empty output behind."""
    for path in opt.models:
        check_checkpoint(path, "model")
    src = getattr(opt, "src", None)
    if src:
        if not os.path.isfile(src):
            raise PreflightError(f"src {src} {'is a directory' if os.path.isdir(src) else 'does not exist'}")
        check_text_file(src)
        if scan_text(src)[0] == 0:  # the stock translator fails on it with an UnboundLocalError
            raise PreflightError(f"src {src} is empty: nothing to translate")
    folder = os.path.dirname(opt.output) or "."
    if not os.path.isdir(folder):
        raise PreflightError(f"output {opt.output}: the folder {folder} does not exist")
    if opt.beam_size < 1:
        raise PreflightError(f"beam_size must be >= 1, got {opt.beam_size}")
    if opt.gpu >= gpus_found:  # -gpu -1 (the default) is the CPU
        override = "`-gpu -1` (translate on the CPU)" if gpus_found == 0 else "`-gpu 0`"
        raise PreflightError(f"gpu {opt.gpu} asks for GPU {opt.gpu}, {gpus_found} found; "
                             f"on this machine add {override}")
