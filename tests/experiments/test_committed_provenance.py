"""Every committed run that started from another model (`train_from`: the INTERPOLATE-warm runs)
names that model by a committed record: its record's `warm_start` gives the source run, the file
and its SHA-256, and the source's own record, in the same results.json or in the folder's
`sources/` (a source made again for the warm run, beside a VANILLA row made elsewhere), carries
that SHA-256 as `model_sha256`, with the same method, K and seed."""
import functools
import json

import pytest
from conftest import REPO

RESULTS = REPO / "recipes" / "experiments" / "results"


@functools.cache  # read once: every warm-started run of the folder looks its source up in them
def records(folder):
    """The folder's records: results.json's runs, then sources/*/result.json."""
    stored = json.loads((RESULTS / folder / "results.json").read_text(encoding="utf-8"))["runs"]
    return stored + [json.loads(path.read_text(encoding="utf-8"))
                     for path in sorted((RESULTS / folder).glob("sources/*/result.json"))]


def warm_started():
    return [(folder.name, record) for folder in sorted(p.parent for p in RESULTS.glob("*/results.json"))
            for record in records(folder.name) if (record.get("config") or {}).get("train_from")]


def source_of(folder, record):
    """The committed record of the model `record` started from, or None."""
    start = record.get("warm_start")
    if not start or start["from"] != record["config"]["train_from"]:
        return None
    found = [r for r in records(folder) if r["id"] == start["source"] and r.get("model_sha256") == start["sha256"]]
    return found[0] if found else None


def test_the_check_reads_warm_started_runs():
    assert warm_started(), "no committed run starts from another model: the check reads nothing"


@pytest.mark.parametrize("folder, record", warm_started(), ids=lambda value: value if isinstance(value, str) else value["id"])
def test_a_warm_started_run_has_a_source_record_of_the_same_method_and_seed(folder, record):
    source = source_of(folder, record)
    assert source is not None, f"{folder}: {record['id']} names no committed record of the model it started from"
    assert source["status"] == "finished"
    assert [source[key] for key in ("method", "K", "seed")] == [record[key] for key in ("method", "K", "seed")]
    assert source["data"] != record["data"] and not (source.get("config") or {}).get("train_from")


def test_a_superseded_runs_source_is_a_committed_record():
    superseded = sorted(RESULTS.glob("*/superseded/*/warm_start.json"))
    assert superseded
    for path in superseded:
        start = json.loads(path.read_text(encoding="utf-8"))
        folder = path.parents[2].name
        assert any(r.get("model_sha256") == start["sha256"] for r in records(folder)), path
