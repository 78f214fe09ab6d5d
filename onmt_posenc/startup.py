"""Start-up hook: arm the extension in every Python process, act only on `import onmt`.

OpenNMT-py has no plugin mechanism and its `onmt_*` commands never import outside
packages. The wheel installs `onmt_posenc_startup.pth`, which imports this module
at interpreter start-up (also in the worker processes that multi-GPU training
spawns). It adds a meta-path finder that waits for the `onmt` package to finish
importing and then calls `onmt_posenc.plugin.activate()`. Nothing heavy is
imported here, so unrelated Python programs pay nothing.

`ONMT_POSENC=off` leaves OpenNMT-py stock (for A/B comparisons).
"""
import importlib.abc
import importlib.machinery
import os
import sys
import warnings

ENV_SWITCH = "ONMT_POSENC"


def enabled():
    return os.environ.get(ENV_SWITCH, "on").strip().lower() not in ("off", "0", "false", "no")


class _ActivateAfterOnmt(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the loader of `onmt` to activate the plugin after it."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "onmt":
            return None
        sys.meta_path.remove(self)  # one shot, and lets the real finders answer
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        original_exec = spec.loader.exec_module

        def exec_module(module):
            # OpenNMT-py 3.5.1 uses torch.cuda.amp decorators that current torch
            # deprecates: six identical warnings on every command, nothing to act on.
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=r"`torch\.cuda\.amp\.custom_", category=FutureWarning)
                original_exec(module)
            from onmt_posenc import plugin

            plugin.activate()

        spec.loader.exec_module = exec_module
        return spec


if enabled() and "onmt" not in sys.modules:
    sys.meta_path.insert(0, _ActivateAfterOnmt())
