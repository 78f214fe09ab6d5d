"""`onmt-posenc doctor`: what this Python has of what the extension needs, and the fix for
each thing it lacks.

The extension runs inside OpenNMT-py 3.5.1's own commands, which pip installs apart from
this package: OpenNMT-py 3.5.1 pins `torch<2.3`, so it goes in with `--no-deps`
(docs/install.md), and this package cannot require it without that pin. What each step of
the install brings is checked here: torch (and CUDA, Triton), OpenNMT-py, this package's
dependencies, the start-up hook (`onmt_posenc_startup.pth`) and what it does in a fresh
interpreter, and `ONMT_POSENC`. The fixes are the ones `onmt-posenc` names when a command
finds a module missing (cli.py).
"""
import importlib.metadata
import json
import os
import re
import site
import subprocess
import sys

import onmt_posenc
from onmt_posenc.startup import ENV_SWITCH, MODES, mode

OPENNMT_VERSION = "3.5.1"
OPENNMT_FIX = f"`pip install --no-deps opennmt-py=={OPENNMT_VERSION}` installs it (its torch<2.3 pin left out)"
OLDEST_TORCH = (2, 6)
TORCH_FIX = ("`pip install torch==X.Y.Z` installs it, X.Y.Z the torch >= 2.6 you want, pinned exactly (unpinned, "
             "pip may bring a multi-GB CUDA build)")
DEPENDENCIES_FIX = ("this package's dependencies are missing (installed with --no-deps?): install onmt-posenc again "
                    "without --no-deps (in a clone: `pip install .`, or `make setup` with the tests' packages)")
STARTUP_FILE = "onmt_posenc_startup.pth"


def fix_for_missing(module):
    """The one-line fix for a missing top-level module a command needs."""
    if module == "onmt":
        return f"needs OpenNMT-py {OPENNMT_VERSION}, which is not installed; {OPENNMT_FIX}"
    if module == "torch":
        return f"needs PyTorch, which is not installed; {TORCH_FIX}"
    return f"needs the Python module {module!r}, which is not installed; {DEPENDENCIES_FIX}"


def _version(distribution):
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_opennmt():
    """(ok, what was found)"""
    found = _version("OpenNMT-py")
    if found is None:
        return False, f"not installed: {OPENNMT_FIX}"
    if found != OPENNMT_VERSION:
        return False, (f"{found}, but the extension patches OpenNMT-py {OPENNMT_VERSION} only: "
                       f"`pip install --no-deps opennmt-py=={OPENNMT_VERSION}` replaces it")
    return True, f"{found} (its torch<2.3 pin, which pip reports, does not apply: the extension runs it on torch >= 2.6)"


def _major_minor(version):
    return tuple(int(part) for part in re.findall(r"\d+", version)[:2])


def check_torch():
    """(ok, what was found about torch, what about CUDA)"""
    try:
        import torch
    except ImportError:
        return False, f"not installed: {TORCH_FIX}", "unknown (no torch)"
    if _major_minor(torch.__version__) < OLDEST_TORCH:
        return False, f"{torch.__version__}, older than 2.6: {TORCH_FIX}", "not checked"
    if torch.version.cuda is None:
        return True, torch.__version__, "none: a CPU build of torch (training and translation run on the CPU)"
    if not torch.cuda.is_available():
        return True, torch.__version__, f"torch built for CUDA {torch.version.cuda}, but no CUDA device is visible"
    names = sorted({torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())})
    return True, torch.__version__, (f"CUDA {torch.version.cuda}, {torch.cuda.device_count()} device(s): "
                                     f"{', '.join(names)}")


def check_triton():
    """What was found about Triton: optional, it only runs the fused attention kernel (on CUDA)."""
    found = _version("triton")
    if found is None:
        return ("not installed (optional: `attention_kernel: triton`, the fused kernel, needs it and a CUDA "
                "device; without it attention runs on PyTorch)")
    return f"{found} (the fused kernel, `attention_kernel: triton`, runs where a CUDA device is visible)"


def check_dependencies():
    """(ok, what was found): this package's own requirements (not the tests' extra) present."""
    try:
        requirements = importlib.metadata.requires("onmt-posenc") or []
    except importlib.metadata.PackageNotFoundError:
        return False, (f"onmt-posenc is not installed as a package (imported from {os.path.dirname(onmt_posenc.__file__)}):"
                       " `pip install .` in its clone installs it, its dependencies and the start-up hook")
    names = [re.match(r"[A-Za-z0-9._-]+", r).group(0) for r in requirements if "extra ==" not in r]
    missing = [name for name in names if _version(name) is None]
    if missing:
        return False, f"{len(missing)} of {len(names)} missing ({', '.join(missing)}): {DEPENDENCIES_FIX}"
    return True, f"all {len(names)} installed"


# Run in a fresh interpreter, as every onmt_* command starts: did the .pth import the start-up
# hook, did it arm the import finder, and does `import onmt` then add the extension's options?
FRESH_INTERPRETER = """
import json, sys
found = {"startup": "onmt_posenc.startup" in sys.modules,
         "armed": any(type(finder).__name__ == "_ActAfterImport" for finder in sys.meta_path)}
import onmt_posenc
found["package"] = onmt_posenc.__path__[0]
try:
    from onmt.bin.train import _get_parser
    found["options"] = any("-shape_max_shift" in action.option_strings for action in _get_parser()._actions)
except ImportError as error:
    found["options"] = f"{type(error).__name__}: {error}"
print(json.dumps(found))
"""


def startup_files():
    directories = [*site.getsitepackages(), site.getusersitepackages()]
    return [os.path.join(d, STARTUP_FILE) for d in directories if os.path.isfile(os.path.join(d, STARTUP_FILE))]


def check_startup_hook(opennmt_usable):
    """(ok, what was found): the .pth in place, and what it does in a fresh interpreter under
    this environment (ONMT_POSENC included). Without a usable OpenNMT-py (or torch), a problem
    counted already, what the hook adds to it is not checked."""
    files = startup_files()
    if not files:
        return False, (f"{STARTUP_FILE} is in none of this Python's site-packages ({sys.prefix}): the stock "
                       f"onmt_* commands run without the extension; `pip install .` in the clone installs it")
    done = subprocess.run([sys.executable, "-c", FRESH_INTERPRETER], capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return False, f"{files[0]} is there, but a fresh interpreter fails at start-up: {last}"
    found = json.loads(done.stdout.strip().splitlines()[-1])
    where = f"{files[0]}; a fresh {sys.executable} imports onmt_posenc from {found['package']}"
    if not found["startup"]:
        return False, f"{where}, but did not run the hook (started with -S or -I?)"
    if mode() == "off":
        return True, f"{where}; ONMT_POSENC=off: the hook is not armed, every onmt_* command runs stock OpenNMT-py"
    if not found["armed"]:
        return False, f"{where}, but the hook did not arm"
    if isinstance(found["options"], str):
        if not opennmt_usable:
            return True, f"{where}; the hook is armed (what it adds to OpenNMT-py is checked once OpenNMT-py and torch are)"
        return False, f"{where}; importing OpenNMT-py failed: {found['options']}"
    if mode() == "stock":
        return True, f"{where}; ONMT_POSENC=stock: onmt_* commands get safe checkpoint loading only"
    if not found["options"]:
        return False, f"{where}, but after `import onmt` onmt_train has none of the extension's options"
    return True, f"{where}; after `import onmt` onmt_train has the extension's options (-shape_max_shift, ...)"


def describe_switch():
    value = os.environ.get(ENV_SWITCH)
    meaning = {"on": "the whole extension", "stock": "stock OpenNMT-py with safe checkpoint loading only",
               "off": "nothing of the extension"}[mode()]
    if value is None:
        return f"unset: {meaning} (the default)"
    known = value.strip().lower() in (*MODES, "", "1", "true", "yes", "0", "false", "no")
    return f"{value!r}: {meaning}" + ("" if known else f" ({value!r} is none of {', '.join(MODES)})")


def add_arguments(parser):
    parser.description = ("check this Python's installation: OpenNMT-py, torch and CUDA, Triton, the package's "
                          "dependencies, the start-up hook in a fresh interpreter, ONMT_POSENC; exits 1 when "
                          "something needed is missing, naming the fix")


def main(args):
    opennmt_ok, opennmt = check_opennmt()
    torch_ok, torch_found, cuda = check_torch()
    dependencies_ok, dependencies = check_dependencies()
    hook_ok, hook = check_startup_hook(opennmt_ok and torch_ok)
    lines = [("onmt-posenc", f"{onmt_posenc.__version__} ({os.path.dirname(onmt_posenc.__file__)})"),
             ("OpenNMT-py", opennmt), ("torch", torch_found), ("CUDA", cuda), ("Triton", check_triton()),
             ("dependencies", dependencies), ("start-up hook", hook), (ENV_SWITCH, describe_switch())]
    for name, found in lines:
        print(f"{name + ':':<15}{found}")
    problems = [not ok for ok in (opennmt_ok, torch_ok, dependencies_ok, hook_ok)].count(True)
    if problems:
        print(f"onmt-posenc doctor: {problems} problem(s), each with its fix above", file=sys.stderr)
        return 1
    print("everything the extension needs is installed")
    return 0
