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
import pickle
import re

import torch

# Everything else in an OpenNMT-py checkpoint (tensors, OrderedDict, set, dict,
# list, str, numbers) is already allowed by torch's weights-only unpickler.
CHECKPOINT_GLOBALS = [argparse.Namespace]


class UnsafeCheckpointError(pickle.UnpicklingError):
    pass


def _describe(source):
    return source if isinstance(source, (str, bytes)) or hasattr(source, "__fspath__") else "checkpoint"


def safe_load(original_load):
    """Wrap torch.load: weights-only unpickling with the OpenNMT-py allow-list."""

    @functools.wraps(original_load)
    def load(f, *args, **kwargs):
        kwargs["weights_only"] = True
        try:
            with torch.serialization.safe_globals(CHECKPOINT_GLOBALS):
                return original_load(f, *args, **kwargs)
        except pickle.UnpicklingError as error:
            found = re.search(r"GLOBAL ([\w.]+)", str(error))
            culprit = found.group(1) if found else "object outside the allow-list"
            raise UnsafeCheckpointError(
                f"Refusing to load {_describe(f)}: it holds a pickled {culprit}, which is not "
                f"part of an OpenNMT-py checkpoint. Nothing from it was run. Only tensors, plain "
                f"containers and argparse.Namespace are allowed."
            ) from None

    load.onmt_posenc_safe = True
    return load


def is_complete(path):
    """Whether `path` loads as an OpenNMT-py checkpoint (weights-only, with the allow-list):
    a file cut short by a killed save, or anything else, does not."""
    try:
        with torch.serialization.safe_globals(CHECKPOINT_GLOBALS):
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # truncated zip, bad pickle, unsafe global, unreadable file: all "not complete"
        return False
    return isinstance(checkpoint, dict) and {"model", "opt"} <= set(checkpoint)
