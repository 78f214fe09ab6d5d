"""The package's structure holds: its import contract (pyproject.toml, import-linter), and
what is stored outside it still loads after modules move: committed results and checkpoints."""
import json
import re
import sys
import zipfile

import pytest
from conftest import REPO, TOY_ENDE, command, head, run, tiny_transformer, write_yaml


def test_the_import_contract_holds():
    """Layers one way (core <- config <- model, data <- hooks <- startup <- analysis <-
    experiments <- cli), model and data apart, no cycles: a change that breaks it fails here."""
    result = run([command("lint-imports"), "--config", REPO / "pyproject.toml", "--no-cache"], cwd=REPO,
                 expect_ok=False)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "Contracts: 3 kept, 0 broken." in result.stdout


def modules_importing_opennmt():
    """The package's modules that import OpenNMT-py as they load (`import onmt...` at the top)."""
    names = []
    for path in sorted((REPO / "onmt_posenc").rglob("*.py")):
        if re.search(r"^(from|import) onmt[. ]", path.read_text(encoding="utf-8"), re.MULTILINE):
            parts = path.relative_to(REPO).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


@pytest.mark.parametrize("module", modules_importing_opennmt())
def test_a_module_imports_first_in_a_fresh_interpreter(module):
    """Importing OpenNMT-py activates the extension (startup), which imports the package's
    transforms and hooks: a module that imports OpenNMT-py as it loads must not be reached
    again half-loaded (`import onmt_posenc.data.transforms` alone failed so)."""
    run([sys.executable, "-c", f"import {module}"], cwd=REPO)


@pytest.mark.parametrize("path", sorted((REPO / "recipes" / "experiments" / "results").glob("**/result*.json")),
                         ids=lambda p: str(p.relative_to(REPO / "recipes" / "experiments" / "results")))
def test_committed_results_load(path):
    """Every committed run record is one the report can use (records.record_problem)."""
    from onmt_posenc.experiments.running.records import record_problem

    stored = json.loads(path.read_text(encoding="utf-8"))
    records = stored["runs"] if "runs" in stored else [stored]
    # a report's stale and missing runs are listed, not used
    used = [record for record in records if record["status"] in ("finished", "failed")]
    assert used and [record_problem(record) for record in used] == [None] * len(used)


def test_checkpoints_name_no_module_of_the_package(tmp_path):
    """A checkpoint pickles the options (argparse.Namespace) and tensors only, no class of
    onmt_posenc: moving the package's modules cannot break loading a checkpoint made before."""
    config = write_yaml(tmp_path / "m.yaml", tiny_transformer(tmp_path, train_steps=1, save_model=str(tmp_path / "m"),
                                                              shape_max_shift=5, max_relative_positions=0))
    run([command("onmt_build_vocab"), "-config", config, "-n_sample", "-1"])
    run([command("onmt_train"), "-config", config])
    with zipfile.ZipFile(tmp_path / "m_step_1.pt") as archive:
        data = archive.read(next(name for name in archive.namelist() if name.endswith("data.pkl")))
    assert b"onmt_posenc" not in data
    src = head(TOY_ENDE / "src-test.txt", tmp_path / "test.src", 3)
    run([command("onmt_translate"), "-model", tmp_path / "m_step_1.pt", "-src", src, "-output", tmp_path / "hyp",
         "-max_length", "5"])
