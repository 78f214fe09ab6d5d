"""Safe checkpoint loading on torch >= 2.6.

Since torch 2.6 `torch.load` unpickles with `weights_only=True` and refuses
`argparse.Namespace`, the one non-tensor global that OpenNMT-py checkpoints hold
(the training options). We allow exactly that global, keep `weights_only=True`
always (even where a caller asks for False), and turn torch's refusal into an
error that names the file and the offending global. The refused object is never
constructed: the restricted unpickler stops before calling it.
"""
import argparse
import functools
import os
import pickle
import re
import zipfile

import torch

from onmt_posenc.core.errors import UserError

# Everything else in an OpenNMT-py checkpoint (tensors, OrderedDict, set, dict,
# list, str, numbers) is already allowed by torch's weights-only unpickler.
CHECKPOINT_GLOBALS = [argparse.Namespace]


class UnsafeCheckpointError(UserError, pickle.UnpicklingError):
    pass


class CheckpointError(UserError, ValueError):
    """A file that does not load as a checkpoint (cut short, or something else)."""


class OutputExistsError(UserError, OSError):
    """A file a command would write exists, and the command was not told to overwrite it."""


def _describe(source):
    return source if isinstance(source, (str, bytes)) or hasattr(source, "__fspath__") else "checkpoint"


def _not_a_file(path):
    return f"{path} {'is a directory' if os.path.isdir(path) else 'does not exist'}"


def _written_by_torch_save(path):
    """torch.save writes a zip archive, or with its legacy format a pickle, which
    opens with the PROTO opcode (0x80)."""
    if zipfile.is_zipfile(path):
        return True
    with open(path, "rb") as file:
        return file.read(1) == b"\x80"


def safe_load(original_load):
    """Wrap torch.load: weights-only unpickling with the OpenNMT-py allow-list."""
    if getattr(original_load, "onmt_posenc_safe", False):  # wrapped already (by the plugin)
        return original_load

    @functools.wraps(original_load)
    def load(f, *args, **kwargs):
        kwargs["weights_only"] = True
        if isinstance(f, (str, os.PathLike)):
            if not os.path.isfile(f):  # torch's OSError would be a traceback
                raise CheckpointError(_not_a_file(f))
            if not _written_by_torch_save(f):
                # unpickling text fails on whatever opcode its first byte happens to be
                # (an IndexError, a KeyError, ...), not always with an UnpicklingError
                raise CheckpointError(not_complete(f, "not a pickle of tensors"))
        try:
            with torch.serialization.safe_globals(CHECKPOINT_GLOBALS):
                loaded = original_load(f, *args, **kwargs)
        except pickle.UnpicklingError as error:
            found = re.search(r"GLOBAL ([\w.]+)", str(error))
            if not found:  # not a pickle of objects at all (a text file, say): not refused, unreadable
                raise CheckpointError(not_complete(_describe(f), error)) from None
            raise UnsafeCheckpointError(
                f"Refusing to load {_describe(f)}: it holds a pickled {found.group(1)}, which is not "
                f"part of an OpenNMT-py checkpoint. Nothing from it was run. Only tensors, plain "
                f"containers and argparse.Namespace are allowed."
            ) from None
        except (RuntimeError, EOFError) as error:
            # torch's errors for a cut zip archive or an empty file do not name the file;
            # with several models (averaging, ensembles) that matters. Other RuntimeErrors
            # (a CUDA map_location on a CPU machine) are not about the file.
            if isinstance(error, RuntimeError) and "PytorchStreamReader" not in str(error):
                raise
            raise CheckpointError(not_complete(_describe(f), error)) from None
        # a model and its options but no vocabulary: every command would fail on it later
        # with a KeyError (averaging, release, translation, the analyses)
        if isinstance(loaded, dict) and {"model", "opt"} <= set(loaded) and missing_parts(loaded):
            raise CheckpointError(incomplete(_describe(f), loaded))
        return loaded

    load.onmt_posenc_safe = True
    return load


def folder_checked_save(original_save):
    """Wrap torch.save: a path into a folder that does not exist is one line naming the
    folder (torch's RuntimeError is a traceback, after averaging or converting the model)."""
    if getattr(original_save, "onmt_posenc_checked", False):
        return original_save

    @functools.wraps(original_save)
    def save(obj, f, *args, **kwargs):
        if isinstance(f, (str, os.PathLike)):
            folder = os.path.dirname(os.fspath(f)) or "."
            if not os.path.isdir(folder):
                raise CheckpointError(f"cannot write {os.fspath(f)}: the folder {folder} does not exist")
        return original_save(obj, f, *args, **kwargs)

    save.onmt_posenc_checked = True
    return save


def not_complete(path, error):
    """The one line for a file that does not load, with torch's reason: its first sentence."""
    reason = re.split(r"\.\s", str(error).strip(), maxsplit=1)[0].rstrip(".") or "the file ends too early"
    if reason.startswith("Weights only load failed"):  # torch's preamble; the cause is further down
        reason = "not a pickle of tensors"
    return f"{path} is not a complete checkpoint ({reason})"


def missing_parts(checkpoint):
    """What an OpenNMT-py checkpoint needs and `checkpoint` lacks."""
    return [key for key in ("model", "opt", "vocab") if not isinstance(checkpoint, dict) or key not in checkpoint]


def incomplete(path, checkpoint):
    return f"{path} is not a complete checkpoint (no {', '.join(missing_parts(checkpoint))} in it)"


def check_complete(path):
    """Raise CheckpointError (UnsafeCheckpointError) unless `path` loads as an OpenNMT-py
    checkpoint. Cheap for the zip archives that torch.save writes: the tensors are
    memory-mapped, not read; only the pickled structure is."""
    if not os.path.isfile(path):
        raise CheckpointError(_not_a_file(path))
    checkpoint = safe_load(torch.load)(path, map_location="cpu", mmap=zipfile.is_zipfile(path))
    if missing_parts(checkpoint):
        raise CheckpointError(incomplete(path, checkpoint))


def is_complete(path):
    """Whether `path` loads as an OpenNMT-py checkpoint (check_complete): a file cut short
    by a killed save, or anything else, does not."""
    try:
        check_complete(path)
    except Exception:  # truncated zip, bad pickle, unsafe global, unreadable file: all "not complete"
        return False
    return True
