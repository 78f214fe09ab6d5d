"""Start-up hook: arm the extension in every Python process, act only on `import onmt`.

OpenNMT-py has no plugin mechanism and its `onmt_*` commands never import outside
packages. The wheel installs `onmt_posenc_startup.pth`, which imports this module
at interpreter start-up (also in the worker processes that multi-GPU training
spawns). It adds a meta-path finder that waits for the `onmt` package to finish
importing and then calls `onmt_posenc.hooks.plugin.activate()`. Nothing heavy is
imported here, so unrelated Python programs pay nothing.

`ONMT_POSENC` chooses how much of the extension a process gets:

- unset or `on`: all of it;
- `stock`: stock OpenNMT-py with safe checkpoint loading only (onmt_posenc.model.checkpoints):
  the baseline of A/B comparisons, since on torch >= 2.6 stock OpenNMT-py cannot load
  any checkpoint (translation, train_from, averaging fail on `weights_only`);
- `off`: nothing at all, exactly stock OpenNMT-py, checkpoint loading included.
"""
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
import warnings

ENV_SWITCH = "ONMT_POSENC"


MODES = ("on", "stock", "off")


def _value():
    return os.environ.get(ENV_SWITCH, "on").strip().lower()


def mode():
    """The value of ONMT_POSENC: 'on' (the default, also for an unknown value), 'stock' or
    'off' (also 0, false, no)."""
    value = _value()
    if value in ("off", "0", "false", "no"):
        return "off"
    return "stock" if value == "stock" else "on"


# Imported by OpenNMT-py at start-up for one transform that few runs use (`terminology`,
# spacy.load in its warm-up): about 1.2 of the ~3.3 s that every onmt_* command spends
# importing OpenNMT-py. Before `onmt` is imported, each gets a stand-in that imports the real
# module at the first lookup of anything it does not hold, so a command that never uses it
# never pays for it.
LOADED_ON_FIRST_USE = ("spacy",)


class _ImportedOnFirstUse(types.ModuleType):
    """A module's stand-in in sys.modules, holding only what `import` and `inspect` read of
    every module (importlib.util.LazyLoader's modules load on that read, so at `import`). No
    `__path__`: importing a submodule reads it, and so imports the real package first."""

    def __getattr__(self, name):
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), name)


def _defer_unused_imports():
    if mode() != "on":  # `stock` is the A/B baseline: OpenNMT-py's imports as they are
        return
    for name in LOADED_ON_FIRST_USE:
        spec = None if name in sys.modules else importlib.util.find_spec(name)
        if spec is not None:  # not installed: OpenNMT-py's own ImportError stays
            stand_in = _ImportedOnFirstUse(name)
            stand_in.__spec__, stand_in.__loader__, stand_in.__file__ = spec, spec.loader, spec.origin
            stand_in.__package__, stand_in.__cached__ = spec.parent, spec.cached
            sys.modules[name] = stand_in


def _activate_plugin():
    from onmt_posenc.hooks import commands, plugin

    if _value() not in (*MODES, "", "1", "true", "yes", "0", "false", "no"):
        print(f"onmt-posenc: ONMT_POSENC={os.environ[ENV_SWITCH]} is none of {', '.join(MODES)}: the extension "
              "stays on", file=sys.stderr)
    if mode() == "stock":
        commands.load_checkpoints_safely()
    else:
        plugin.activate()


def _prepare_converter():
    import onmt  # noqa: F401  (its import activates the plugin: safe checkpoint loading)

    from onmt_posenc.hooks import ctranslate2

    if mode() == "on":  # stock: the converter as CTranslate2 ships it
        ctranslate2.install()


# Module -> what to do once it has been imported. CTranslate2's OpenNMT-py
# converter (`onmt_release_model --format ctranslate2`, `ct2-opennmt-py-converter`,
# `OpenNMTPyConverter`) reads OpenNMT-py checkpoints: it needs the safe loading
# and the export, and only it does, so other commands never import CTranslate2.
AFTER_IMPORT = {
    "onmt": _activate_plugin,
    "ctranslate2.converters.opennmt_py": _prepare_converter,
}
BEFORE_IMPORT = {"onmt": _defer_unused_imports}


class _ActAfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the loaders of the modules in AFTER_IMPORT (and runs
    BEFORE_IMPORT's action first)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in AFTER_IMPORT:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        original_exec = spec.loader.exec_module

        def exec_module(module):
            # OpenNMT-py 3.5.1 uses torch.cuda.amp decorators that current torch
            # deprecates: identical warnings on every command, nothing to act on. For
            # the rest of the process, as some of its modules (sparse_losses) are
            # imported only later, by onmt_train and by each worker it spawns.
            warnings.filterwarnings(
                "ignore", message=r"`torch\.cuda\.amp\.custom_", category=FutureWarning, module=r"onmt\."
            )
            BEFORE_IMPORT.get(fullname, lambda: None)()
            original_exec(module)
            AFTER_IMPORT[fullname]()

        spec.loader.exec_module = exec_module
        return spec


if mode() != "off":
    sys.meta_path.insert(0, _ActAfterImport())
