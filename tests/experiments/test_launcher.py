"""`onmt-posenc run --launcher local|slurm`: the grid as submitit jobs, one shard each.

local: real processes on this machine (submitit's LocalExecutor). slurm: real submitit
submission against stand-in `sbatch`, `srun` and `sacct` on PATH, which run each job's
script on this machine as SLURM would and answer for its state."""
import json
import os
import stat

import pytest
from conftest import REPO, command, run

DEMO = REPO / "recipes" / "experiments" / "demo.yaml"
SMALL = ["settings.train_steps=8", "settings.save_checkpoint_steps=8", "settings.valid_steps=8",
         "settings.report_every=4", "settings.warmup_steps=4", "data.synthetic.synthetic.train_examples=300",
         "data.synthetic.synthetic.eval_examples=8", "evaluation.translate.max_length=20", "grid.method=[ape, shape]",
         "analyses={}"]


def sets(pairs):
    return [arg for pair in pairs for arg in ("--set", pair)]


@pytest.fixture(scope="module")
def local_batch(tmp_path_factory):
    output = tmp_path_factory.mktemp("launcher") / "out"
    result = run([command("onmt-posenc"), "run", DEMO, "--output", output, "--launcher", "local", "--jobs", "2",
                  "--time-limit", "30", *sets(SMALL)], cwd=REPO, timeout=1800)
    return output, result


def test_local_launcher_runs_each_shard_as_a_job_and_writes_the_report(local_batch):
    output, result = local_batch
    for shard in (1, 2):
        assert "shard 1/2 (1 runs)" in result.stderr and f"(shard {shard}/2): done, 1 run(s) finished, 0 failed" \
            in result.stderr
        assert json.loads((output / f"shard-{shard}-of-2.json").read_text())[0]["status"] == "finished"
    assert "2 job(s) done, 0 failed; report:" in result.stderr
    for label in ("ape", "shape"):
        assert (output / "synthetic" / label / "seed1" / "result.json").is_file()
    logs = sorted(output.glob("jobs/*/*_log.err"))
    assert len(logs) == 2 and any("synthetic/ape/seed1] finished" in log.read_text() for log in logs)
    assert "2 of 2 runs finished" in (output / "report.md").read_text(encoding="utf-8")


STANDINS = {
    # submits: the script runs now, in the background, with the variables SLURM gives a job. It
    # runs the copy taken at submission, as SLURM does: as soon as sbatch answers, submitit renames
    # the file it gave sbatch into the job's folder and only then puts a symlink in its place, so a
    # job started in between found no script and failed without output (seen once in CI)
    "sbatch": """#!/bin/bash
script="${@: -1}"
n=$(( $(cat "$STANDIN/counter" 2>/dev/null || echo 4200) + 1 )); echo $n > "$STANDIN/counter"
cp "$script" "$STANDIN/job_$n.sh"
echo "Submitted batch job $n"
( export SLURM_JOB_ID=$n SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_NODEID=0 SLURM_NTASKS=1 SLURM_JOB_NUM_NODES=1 \\
         SLURM_JOB_NODELIST=localhost
  echo RUNNING > "$STANDIN/state_$n"
  bash "$STANDIN/job_$n.sh" > /dev/null 2>&1 && echo COMPLETED > "$STANDIN/state_$n" || echo FAILED > "$STANDIN/state_$n"
) > /dev/null 2>&1 &
""",
    # one task: the command, its output where --output and --error say (%j: the job, %t: task 0)
    "srun": """#!/bin/bash
while [[ "$1" == --* ]]; do
  case "$1" in
    --output) out="${2//%j/$SLURM_JOB_ID}"; out="${out//%t/0}"; shift 2 ;;
    --error) err="${2//%j/$SLURM_JOB_ID}"; err="${err//%t/0}"; shift 2 ;;
    *) shift ;;
  esac
done
"$@" >> "$out" 2>> "$err"
""",
    "sacct": """#!/bin/bash
echo "JobID|State|NodeList"
while [ $# -gt 0 ]; do
  if [ "$1" == -j ]; then echo "$2|$(cat "$STANDIN/state_$2" 2>/dev/null || echo PENDING)|localhost"; shift; fi
  shift
done
""",
}


def test_slurm_launcher_submits_sbatch_jobs_with_their_resources(local_batch, tmp_path):
    """The same batch through SLURM: its runs are finished, so each job finds them done and
    the shards, the report and the jobs' scripts are what is checked."""
    output, _ = local_batch
    standin = tmp_path / "bin"
    standin.mkdir()
    for name, text in STANDINS.items():
        (standin / name).write_text(text)
        (standin / name).chmod((standin / name).stat().st_mode | stat.S_IEXEC)
    env = {"PATH": f"{standin}:{os.environ['PATH']}", "STANDIN": str(standin)}
    result = run([command("onmt-posenc"), "run", DEMO, "--output", output, "--launcher", "slurm", "--jobs", "2",
                  "--partition", "gpu-short", "--gpus-per-job", "1", "--cpus-per-job", "4", "--time-limit", "90",
                  *sets(SMALL)], cwd=REPO, env=env, timeout=900)
    assert "job 4201: shard 1/2 (1 runs)" in result.stderr and "job 4202: shard 2/2 (1 runs)" in result.stderr
    # sacct's word may lag behind the job's end; the job's own outcome is printed once it is done
    assert "job 4202 (shard 2/2): done, 1 run(s) finished, 0 failed" in result.stderr
    assert "2 job(s) done, 0 failed" in result.stderr
    script = (standin / "job_4201.sh").read_text()
    for line in ("#SBATCH --partition=gpu-short", "#SBATCH --gpus-per-node=1", "#SBATCH --cpus-per-task=4",
                 "#SBATCH --time=90", f"#SBATCH --output={output}/jobs/%j/%j_0_log.out"):
        assert line in script
    assert "finished before; skipped" in (output / "jobs" / "4201" / "4201_0_log.err").read_text()


@pytest.mark.parametrize("args, message", [
    (["--shard", "1/2", "--launcher", "local"], "--shard and --launcher: the launcher makes the shards itself"),
    (["--jobs", "2"], "--jobs without --launcher: give --launcher local or slurm"),
    (["--launcher", "local", "--partition", "p"], "--partition is a SLURM partition: it needs --launcher slurm"),
    (["--launcher", "pbs"], "argument --launcher: invalid choice: 'pbs'"),
])
def test_launcher_options_that_do_not_go_together(args, message, tmp_path):
    result = run([command("onmt-posenc"), "run", DEMO, "--output", tmp_path / "out", *args], cwd=REPO,
                 expect_ok=False)
    assert result.returncode == 2 and message in result.stderr


def test_the_command_that_goes_on_repeats_every_launcher_option():
    """The command stored with an interrupted job's run is the one the user typed: reparsed,
    it asks for the same jobs (the time limit included)."""
    import argparse
    import shlex

    from onmt_posenc.experiments import run as run_command
    from onmt_posenc.experiments.running import launcher

    parser = argparse.ArgumentParser()
    run_command.add_arguments(parser)
    group = next(g for g in parser._action_groups if g.title == "jobs of a scheduler (submitit)")
    assert {action.dest for action in group._group_actions} == set(launcher.OPTIONS)
    args = parser.parse_args(["x.yaml", "--launcher", "slurm", "--jobs", "3", "--time-limit", "90", "--partition",
                              "gpu", "--gpus-per-job", "1", "--cpus-per-job", "4", "--set", "seed=[1]"])
    words = shlex.split(run_command.same_command(args, names=launcher.OPTIONS))
    assert words[:2] == ["onmt-posenc", "run"] and vars(parser.parse_args(words[2:])) == vars(args)

