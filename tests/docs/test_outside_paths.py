"""Committed files name no path outside the repository that a user would have to have.

`../shared` (a folder beside the project's own checkout) must appear nowhere in the README, the
docs, the recipes and their committed results, the package or the tools. Absolute paths of the
project's machines (`/root/`, `/work/`) must not appear in what tells a user what to run: the
READMEs, docs/ and the results' COMMANDS.md (the results' records, results.json and the run
configs, keep the paths their runs were made at).
"""
import re

from conftest import REPO

SCANNED = [REPO / "README.md", REPO / "Makefile", REPO / "pyproject.toml",
           *(path for root in ("docs", "recipes", "onmt_posenc", "tools")
             for path in sorted((REPO / root).rglob("*")) if path.is_file() and "__pycache__" not in path.parts)]
INSTRUCTIONS = [path for path in SCANNED if path.suffix == ".md" and path.name != "report.md"
                and not path.name.startswith("report-")]


def hits(paths, pattern):
    found = []
    for path in paths:
        text = path.read_bytes().decode("utf-8", errors="replace")
        found += [f"{path.relative_to(REPO)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
                  for m in re.finditer(pattern, text)]
    return found


def test_no_committed_file_names_the_folder_beside_the_checkout():
    assert len(SCANNED) > 100 and REPO / "recipes/experiments/results/kftt/README.md" in SCANNED
    found = hits(SCANNED, r"\.\./shared\S*")
    assert not found, "\n".join(found)


def test_no_readme_doc_or_commands_file_names_a_machine_path():
    names = {path.relative_to(REPO).as_posix() for path in INSTRUCTIONS}
    assert {"README.md", "docs/data.md", "recipes/experiments/results/small_enja/COMMANDS.md",
            "recipes/experiments/results/kftt/README.md"} <= names
    found = hits(INSTRUCTIONS, r"(?<![\w.~-])/(?:root|work)/\S*")
    assert not found, "\n".join(found)
