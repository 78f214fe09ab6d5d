"""The committed runs can be made again: a results folder's COMMANDS.md, where its experiment
file has changed since, says in a section "With today's `FILE.yaml`" which `--set` overrides
give its runs' configs; today's file with them must make every finished run's config as
results.json stores it (the data folders' paths apart: the machine's; `settings_of` leaves out
`gpu_ranks` itself)."""
import json
import re
import shlex

import pytest
from conftest import REPO

from onmt_posenc import experiments
from onmt_posenc.experiments.file.reading import read_experiment_file
from onmt_posenc.experiments.file.spec import FOLDER_FILES
from onmt_posenc.experiments.running.data_preparation import corpus_files
from onmt_posenc.experiments.running.opennmt_config import run_config
from onmt_posenc.experiments.running.state import settings_of
from onmt_posenc.experiments.running.store import data_dir

RESULTS = REPO / "recipes" / "experiments" / "results"
TODAY = re.compile(r"^## With today's `([\w-]+\.yaml)`\n(.*?)(?=^## |\Z)", re.M | re.S)
SH_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.M | re.S)


def documented():
    """(folder, experiment file, its --set overrides) of each COMMANDS.md's "With today's" section."""
    found = []
    for commands in sorted(RESULTS.glob("*/COMMANDS.md")):
        for name, section in TODAY.findall(commands.read_text(encoding="utf-8")):
            words = [w for block in SH_BLOCK.findall(section) for w in shlex.split(block)]
            overrides = [value for flag, value in zip(words, words[1:]) if flag == "--set"]
            found.append(pytest.param(commands.parent.name, name, overrides, id=commands.parent.name))
    return found


def test_the_sections_are_found():
    assert {p.values[0] for p in documented()} >= {"demo", "multi30k", "multi30k-questions", "positions",
                                                    "small_enja"}
    assert all(p.values[2] for p in documented()), "a section without a ```sh block of --set overrides"


@pytest.mark.parametrize("folder, name, overrides", documented())
def test_todays_file_with_the_documented_overrides_makes_the_committed_configs(folder, name, overrides, tmp_path):
    # The data folders: stand-ins with one line a file (configs name their paths only)
    fake = tmp_path / "data"
    fake.mkdir()
    for file in FOLDER_FILES:
        (fake / file).write_text("a b\n", encoding="utf-8")
    path = REPO / "recipes" / "experiments" / name
    data = read_experiment_file(path, overrides)[0].get("data") or {}
    labels = [label for label, setting in data.items() if isinstance(setting, dict) and "folder" in setting]
    experiment = experiments.load(path, [*overrides, *(f"data.{label}.folder={fake}" for label in labels)],
                                  output=tmp_path / "runs")
    runs = {run.id: run for run in experiment.runs}
    records = json.loads((RESULTS / folder / "results.json").read_text(encoding="utf-8"))["runs"]
    finished = [r for r in records if r["status"] == "finished"]
    assert finished
    for record in finished:
        assert record["id"] in runs, f"{folder}: {record['id']} is not a run of {name} with {overrides}"
        run = runs[record["id"]]
        made = settings_of(run_config(experiment, run, corpus_files(experiment.data[run.data],
                                                                    data_dir(experiment, run.data))))
        stored = settings_of(record["config"])
        differ = {key: (stored.get(key), made.get(key)) for key in {*stored, *made} - {"data"}
                  if stored.get(key) != made.get(key)}
        assert not differ, f"{folder}: {record['id']}: (stored, today's file makes) {differ}"
