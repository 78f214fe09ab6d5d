"""The package as a lab gets it (README "Two commands", docs/install.md): the sdist builds from
the source and holds what a build, the tests and its licenses need (the wheel is built from it);
the wheel carries the start-up hook, the license and a long description whose links need no
repository; installed into a fresh virtualenv it arms the stock onmt_* commands, and a step of
the install left out is named in one line.

The fresh virtualenvs are made offline: `venv --without-pip`, the wheel installed by this
Python's pip (`pip --python`, without its dependencies), and torch, OpenNMT-py and the other
dependencies taken from this venv's site-packages through a `.pth` line to a folder of links to
them. A `.pth` file in a folder reached so is never run, so the only start-up hook of a fresh
venv is its wheel's; left out of the links are this venv's own onmt-posenc and, for the venv of
a user who skipped that step, OpenNMT-py.
"""
import re
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest
from conftest import REPO, run

from onmt_posenc import __version__ as VERSION

SITE_PACKAGES = Path(sysconfig.get_paths()["purelib"])
OPENNMT = ("onmt", "OpenNMT_py-")  # OpenNMT-py's package and its dist-info
EXTENSION_OPTIONS = "Position representations (onmt-posenc):"  # the group the extension adds to onmt_train -h


def build(target, source, out):
    """hatchling's own build of `target` (wheel or sdist) from the folder `source`."""
    run([sys.executable, "-m", "hatchling", "build", "-t", target, "-d", out], cwd=source)
    return next(Path(out).glob("*.whl" if target == "wheel" else "*.tar.gz"))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The sdist built from the repository, and the wheel built from the sdist unpacked."""
    folder = tmp_path_factory.mktemp("built")
    sdist = build("sdist", REPO, folder / "dist")
    with tarfile.open(sdist) as archive:
        archive.extractall(folder / "unpacked", filter="data")
    source = folder / "unpacked" / f"onmt_posenc-{VERSION}"
    wheel = build("wheel", source, folder / "dist")
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(f"onmt_posenc-{VERSION}.dist-info/METADATA").decode("utf-8")
    return {"sdist": sdist, "source": source, "wheel": wheel, "metadata": metadata}


def linked_site_packages(folder, without=()):
    """A folder of links to this venv's site-packages, less its onmt-posenc and `without`."""
    folder.mkdir()
    ours = ("onmt_posenc", "_editable_impl_onmt_posenc")
    for entry in SITE_PACKAGES.iterdir():
        if not entry.name.startswith(ours + tuple(without)) and entry.suffix != ".pth":
            (folder / entry.name).symlink_to(entry)
    return folder


def fresh_venv(folder, wheel, without=()):
    """A new virtualenv with the wheel installed and this venv's packages (less `without`) linked."""
    run([sys.executable, "-m", "venv", "--without-pip", folder])
    python = folder / "bin" / "python"
    site = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    links = linked_site_packages(folder / "linked", without)
    (site / "linked.pth").write_text(f"{links}\n", encoding="utf-8")
    run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "-q", wheel])
    return folder


def user_env(**extra):
    """The tests' environment less a PYTHONPATH that names a clone (an empty one is none), as a
    user's shell has it."""
    return {"PYTHONPATH": "", **extra}


def test_the_sdist_holds_the_source_the_tests_and_every_data_license(built):
    with tarfile.open(built["sdist"]) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    for needed in ("LICENSE", "DATA_LICENSES.md", "README.md", "pyproject.toml", "Makefile", ".ci/run",
                   "onmt_posenc_startup.pth", "tests/data/README.md", "recipes/experiments/schema.json"):
        assert needed in names
    kept = {p.relative_to(REPO).as_posix() for folder in ("onmt_posenc", "tests", "docs", "recipes", "tools")
            for p in (REPO / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    # all but the plots of the reports and pages (no test reads them; a repository's kept files hold some,
    # an sdist's none)
    assert not any(name.endswith(".png") for name in names)
    assert sorted(name for name in kept - names if not name.endswith(".png")) == []
    # every corpus under tests/data has its license stated at the sdist's root
    licenses = (built["source"] / "DATA_LICENSES.md").read_text(encoding="utf-8")
    corpora = sorted(p.name for p in (built["source"] / "tests" / "data").iterdir() if p.is_dir())
    assert len(corpora) == 5 and [c for c in corpora if f"`tests/data/{c}/`" not in licenses] == []


def readme_pip_block():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    return re.search(r"```sh\n(pip install .*?)```", readme, re.DOTALL).group(1)


def test_the_wheel_carries_the_hook_the_license_and_a_description_without_repository_links(built):
    with zipfile.ZipFile(built["wheel"]) as wheel:
        names = set(wheel.namelist())
    assert {"onmt_posenc_startup.pth", f"onmt_posenc-{VERSION}.dist-info/licenses/LICENSE",
            "onmt_posenc/installation.py"} <= names
    assert not any(name.startswith(("tests/", "recipes/", "docs/")) for name in names)
    headers, description = built["metadata"].split("\n\n", 1)
    assert f"Version: {VERSION}\n" in headers
    assert "License-Expression: MIT" in headers and "Author: the onmt-posenc authors" in headers
    assert "Classifier: Intended Audience :: Science/Research" in headers
    assert not re.search(r"^Requires-Dist: opennmt-py", headers, re.IGNORECASE | re.MULTILINE)  # --no-deps, apart
    assert readme_pip_block() in description and "requires torch<2.3` is expected and" in description
    assert readme_pip_block() in (REPO / "docs" / "install.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)]*)\)", description)
    assert [link for link in links if not link.startswith("https://")] == []


@pytest.fixture(scope="module")
def armed(built, tmp_path_factory):
    return fresh_venv(tmp_path_factory.mktemp("armed") / "venv", built["wheel"])


def test_the_wheel_in_a_fresh_venv_arms_the_stock_commands(armed):
    assert run([armed / "bin" / "onmt-posenc", "--version"], env=user_env()).stdout == f"onmt-posenc {VERSION}\n"
    # OpenNMT-py's own console script (this venv's onmt_train file), run by the fresh venv's Python
    stock = [armed / "bin" / "python", Path(sys.executable).parent / "onmt_train", "-h"]
    assert EXTENSION_OPTIONS in run(stock, env=user_env()).stdout
    assert EXTENSION_OPTIONS not in run(stock, env=user_env(ONMT_POSENC="off")).stdout


def test_doctor_in_a_fresh_venv_finds_everything_and_says_where(built, armed):
    import torch

    done = run([armed / "bin" / "onmt-posenc", "doctor"], env=user_env())
    found = dict(line.split(":", 1) for line in done.stdout.splitlines() if ":" in line)
    assert found["onmt-posenc"].strip().startswith(f"{VERSION} ({armed}/lib/")
    assert found["OpenNMT-py"].strip().startswith("3.5.1 ")
    assert found["torch"].strip() == torch.__version__
    required = re.findall(r"^Requires-Dist: (.*)$", built["metadata"], re.MULTILINE)
    assert found["dependencies"].strip() == f"all {len([r for r in required if 'extra ==' not in r])} installed"
    hook = found["start-up hook"]
    assert f"{armed}/lib/" in hook and "onmt_posenc_startup.pth" in hook and "the extension's options" in hook
    assert found["ONMT_POSENC"].strip() == "unset: the whole extension (the default)"
    assert done.stdout.endswith("everything the extension needs is installed\n") and done.stderr == ""
    off = run([armed / "bin" / "onmt-posenc", "doctor"], env=user_env(ONMT_POSENC="off"))
    assert "ONMT_POSENC=off: the hook is not armed, every onmt_* command runs stock OpenNMT-py" in off.stdout
    assert "ONMT_POSENC:   'off': nothing of the extension\n" in off.stdout


def test_without_opennmt_py_doctor_and_a_command_name_the_missing_step(built, tmp_path):
    venv = fresh_venv(tmp_path / "venv", built["wheel"], without=OPENNMT)
    fix = "`pip install --no-deps opennmt-py==3.5.1` installs it (its torch<2.3 pin left out)"
    doctor = run([venv / "bin" / "onmt-posenc", "doctor"], env=user_env(), expect_ok=False)
    assert doctor.returncode == 1
    assert f"OpenNMT-py:    not installed: {fix}\n" in doctor.stdout
    assert doctor.stderr == "onmt-posenc doctor: 1 problem(s), each with its fix above\n"
    command = run([venv / "bin" / "onmt-posenc", "run", REPO / "recipes/experiments/demo.yaml"], env=user_env(),
                  expect_ok=False)
    assert (command.returncode, command.stderr) == (
        2, f"onmt-posenc run: error: needs OpenNMT-py 3.5.1, which is not installed; {fix}\n")
    # a command that imports OpenNMT-py only as it works, to load the model
    (tmp_path / "model.pt").write_bytes(b"")
    (tmp_path / "valid.src").write_text("a b c\n", encoding="utf-8")
    analysis = run([venv / "bin" / "onmt-posenc", "shift-invariance", "--model", tmp_path / "model.pt", "--src",
                    tmp_path / "valid.src"], env=user_env(), expect_ok=False)
    assert (analysis.returncode, analysis.stderr) == (
        2, f"onmt-posenc shift-invariance: error: needs OpenNMT-py 3.5.1, which is not installed; {fix}\n")


def test_without_the_dependencies_doctor_names_each_step(built, tmp_path):
    """The wheel alone (`pip install --no-deps`, no torch, no OpenNMT-py): the commands still
    start, and say what to install."""
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv])
    run([sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--no-deps", "--no-index",
         "-q", built["wheel"]])
    doctor = run([venv / "bin" / "onmt-posenc", "doctor"], env=user_env(), expect_ok=False)
    assert doctor.returncode == 1 and doctor.stderr == "onmt-posenc doctor: 3 problem(s), each with its fix above\n"
    assert "torch:         not installed: `pip install torch==X.Y.Z` installs it" in doctor.stdout
    assert "OpenNMT-py:    not installed: `pip install --no-deps opennmt-py==3.5.1`" in doctor.stdout
    required = [r for r in re.findall(r"^Requires-Dist: (.*)$", built["metadata"], re.MULTILINE) if "extra ==" not in r]
    assert re.search(rf"^dependencies:  {len(required)} of {len(required)} missing \(.*\btorch\b.*\): this package's "
                     "dependencies are missing", doctor.stdout, re.MULTILINE)
    evaluate = run([venv / "bin" / "onmt-posenc", "evaluate", "--help"], env=user_env(), expect_ok=False)
    assert evaluate.returncode == 2 and len(evaluate.stderr.splitlines()) == 1
    assert evaluate.stderr.startswith("onmt-posenc evaluate: error: needs the Python module ")
    assert "install onmt-posenc again without --no-deps" in evaluate.stderr
