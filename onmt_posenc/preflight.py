"""Checks that stop onmt_train and onmt_build_vocab early, in one line, when what a
config asks for is not on this machine: a corpus file, a vocabulary, GPUs.

OpenNMT-py checks the corpus files inside each training process, so a recipe for 8
GPUs run where the data or the GPUs are missing spawns 8 workers that fail one by
one in tracebacks. plugin.py runs these checks in the parent, before any worker.
"""
import os
import sys
from pathlib import Path

import yaml

# The corpus keys that name a file OpenNMT-py (or our tgt_phrases transform) reads.
PATH_KEYS = ("path_src", "path_tgt", "path_txt", "path_align", "path_tgt_phrases")
# `onmt-posenc prepare-wmt16 build` writes the WMT16 files of the recipes into a
# folder of this name.
WMT16_FOLDER = "wmt16_en_de"


class PreflightError(Exception):
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


def check_corpora(data):
    """Every file the `data` corpora name exists. `data` is the YAML text or the
    mapping (OpenNMT-py replaces the text by the mapping when it validates it)."""
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


def check_training(opt, gpus_found):
    """All of the above for onmt_train, data first (it is needed wherever it trains)."""
    check_corpora(opt.data)
    check_vocabularies(opt)
    check_gpus(opt.world_size, opt.gpu_ranks, gpus_found)
