"""One runner at a time on a run (running/locks.py): two `onmt-posenc run` on the same output
folder train each run once, the second skipping what the first holds; the report names the
runs being worked on; a runner killed with SIGKILL leaves no stale lock, and the next one
resumes its run. Real runs of the scaled-down demo, without analyses."""
import json
import os
import signal
import socket
import subprocess
import time

from conftest import REPO, command, run
from runner_helpers import DEMO, LONG, SCALED_DOWN, overrides

from onmt_posenc import experiments
from onmt_posenc.experiments.report import command as report
from onmt_posenc.experiments.running.grid_records import collect
from onmt_posenc.experiments.running.locks import LOCK, held_by
from onmt_posenc.experiments.running.store import run_dir

QUICK = [*SCALED_DOWN, "analyses={}"]


def runner(output, pairs, **popen):
    """`onmt-posenc run` on the scaled-down demo, started in the background (stderr a pipe)."""
    args = [command("onmt-posenc"), "run", DEMO, "--output", output, *overrides(pairs)]
    return subprocess.Popen([str(a) for a in args], cwd=REPO, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, **popen)


def onmt_train_invocations(directory):
    log = (directory / "logs" / "train.log").read_text(encoding="utf-8")
    return sum(line.startswith("$ ") and "onmt_train" in line.split()[1] for line in log.splitlines())


def test_two_runners_on_one_folder_train_each_run_once(tmp_path):
    output = tmp_path / "out"
    pairs = [*QUICK, "grid.method=[ape, shape]"]
    first, second = runner(output, pairs), runner(output, pairs)
    said = {}
    for process in (first, second):
        said[process.pid] = process.communicate(timeout=LONG)[1]
        assert process.returncode == 0, said[process.pid][-3000:]
    loaded = experiments.load(DEMO, pairs, output=output)
    assert [r.id for r in loaded.runs] == ["synthetic/ape/seed1", "synthetic/shape/seed1"]
    for each in loaded.runs:
        directory = run_dir(loaded, each)
        assert json.loads((directory / "result.json").read_text())["resumed_from"] is None
        assert onmt_train_invocations(directory) == 1, each.id
        assert held_by(directory) is None  # given back by both
    host = socket.gethostname()
    # each skipped what the other held, naming it; a run is trained by one of them only
    skipped = [f"held by another runner (pid {other} on {host})" in said[pid]
               for pid, other in ((first.pid, second.pid), (second.pid, first.pid))]
    assert any(skipped)
    trained = [text.count("] train\n") for text in said.values()]
    assert sum(trained) == 2


def test_a_runner_killed_with_sigkill_leaves_no_lock_and_the_next_resumes_its_run(tmp_path):
    """While it trains, the report names the run as worked on (pid and host). Killed with
    SIGKILL, the runner's onmt_train still holds the lock while it lives; once it is killed too
    (the job's process group, as a scheduler kills it), the OS has given the lock back and the
    next runner resumes the run from its checkpoint."""
    output = tmp_path / "out"
    pairs = [*QUICK, "grid.method=[ape]"]
    loaded = experiments.load(DEMO, pairs, output=output)
    directory = run_dir(loaded, loaded.runs[0])
    process = runner(output, pairs, start_new_session=True)
    for line in process.stderr:
        if "[1/1 synthetic/ape/seed1] train step 12/16" in line:
            os.kill(process.pid, signal.SIGKILL)  # the runner alone: its onmt_train goes on, holding the lock
            break
    assert process.wait(timeout=60) == -signal.SIGKILL
    holder = f"pid {process.pid} on {socket.gethostname()}"
    assert held_by(directory) == holder
    [record] = collect(loaded)
    assert record["runner"] == holder and record["status"] == "missing"
    os.killpg(process.pid, signal.SIGKILL)  # and the rest of its job, as a scheduler kills it
    text = report.write(loaded, [record]).read_text(encoding="utf-8")
    assert "1 being worked on by a runner now." in text
    assert f"| synthetic/ape/seed1 | missing | – | – | being worked on now by a runner ({holder}); " in text
    deadline = time.time() + 30
    while held_by(directory) is not None and time.time() < deadline:
        time.sleep(0.2)
    assert (directory / LOCK).is_file() and held_by(directory) is None
    assert not (directory / "result.json").exists() and (directory / "model_step_8.pt").is_file()

    result = run([command("onmt-posenc"), "run", DEMO, "--output", output, *overrides(pairs)], cwd=REPO,
                 timeout=LONG)
    assert "held by another runner" not in result.stderr
    assert "[1/1 synthetic/ape/seed1] resume from model_step_" in result.stderr
    assert json.loads((directory / "result.json").read_text())["resumed_from"] in (8, 16)
    assert "runner" not in collect(loaded)[0]
