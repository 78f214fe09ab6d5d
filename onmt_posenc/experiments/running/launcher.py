"""`onmt-posenc run EXP --launcher slurm|local`: the batch as jobs of a scheduler, through submitit.

Each job runs one shard of the grid (`--jobs N`: N shards, every N-th run from the i-th;
default one job per run) with the runner of `onmt-posenc run --shard i/N`, so a job that
is pre-empted or runs out of time stops its run, is requeued (submitit's checkpointing,
up to three times for time-outs) and goes on from the run's newest checkpoint, as a run
started again does. The jobs' logs and submitit's files go to <output>/jobs/. The
command waits for the jobs, printing each job's state as it changes, then `onmt-posenc run`
writes the report from what every shard stored (`onmt-posenc report` writes it again at any time).

`local` runs the jobs as processes on this machine (submitit's LocalExecutor, which
stops a job at its time limit: `--time-limit` is always given); `slurm` submits them
with sbatch (`--partition`, `--gpus-per-job`, `--cpus-per-job`, `--time-limit`).
"""
import sys
import time
from pathlib import Path

from onmt_posenc.experiments.file.loading import load
from onmt_posenc.experiments.file import spec
from onmt_posenc.experiments.running import runner

# How often the launcher looks at its jobs, in seconds
POLL_SECONDS = 5


class ShardJob:
    """One shard of an experiment's grid, as a submitit job: picklable, and requeued on
    pre-emption or time-out (`checkpoint`), its unfinished run then going on from its
    newest checkpoint."""

    def __init__(self, experiment_args, shard, command):
        self.experiment_args, self.shard, self.command = experiment_args, shard, command

    def __call__(self):
        experiment = load(**self.experiment_args)
        runs = spec.shard(experiment.runs, *self.shard)
        records = runner.run_all(experiment, runs, self.command)
        runner.write_shard_record(experiment, self.shard, records)
        return {"finished": sum(r["status"] == "finished" for r in records),
                "failed": [r["id"] for r in records if r["status"] == "failed"],
                "held": [r["id"] for r in records if r["status"] == "held"]}

    def checkpoint(self):
        import submitit

        return submitit.helpers.DelayedSubmission(ShardJob(self.experiment_args, self.shard, self.command))


def executor(kind, folder, time_limit, partition=None, gpus=0, cpus=1):
    """A submitit executor writing into `folder`, its jobs limited to `time_limit` minutes."""
    import submitit

    if kind == "local":
        made = submitit.LocalExecutor(folder=folder)
        made.update_parameters(timeout_min=time_limit, gpus_per_node=gpus, cpus_per_task=cpus)
    else:
        made = submitit.SlurmExecutor(folder=folder)
        made.update_parameters(time=time_limit, gpus_per_node=gpus or None, cpus_per_task=cpus,
                               partition=partition, job_name="onmt-posenc")
    return made


def launch(experiment, experiment_args, args, command):
    """Submit one job per shard and wait for them; the jobs' outcome in words and the exit
    status. `command`: this launcher's command line, which goes on with what a stopped job leaves."""
    count = args.jobs or len(experiment.runs)
    count = min(count, len(experiment.runs))
    folder = experiment.output / "jobs"
    folder.mkdir(parents=True, exist_ok=True)
    submit = executor(args.launcher, folder / "%j", args.time_limit, args.partition, args.gpus_per_job,
                      args.cpus_per_job)
    jobs = [submit.submit(ShardJob(experiment_args, (i, count), command)) for i in range(1, count + 1)]
    for i, job in enumerate(jobs, 1):
        print(f"job {job.job_id}: shard {i}/{count} ({len(spec.shard(experiment.runs, i, count))} runs), "
              f"log {Path(job.paths.stdout)}", file=sys.stderr, flush=True)
    states = {}
    while True:
        for i, job in enumerate(jobs, 1):
            state = job.state
            if states.get(i) != state:
                states[i] = state
                print(f"job {job.job_id} (shard {i}/{count}): {state}", file=sys.stderr, flush=True)
        if all(job.done() for job in jobs):
            break
        time.sleep(POLL_SECONDS)
    failed = []
    for i, job in enumerate(jobs, 1):
        # The job's own word on its runs: the scheduler's state can lag behind the result
        # file that makes a job done (sacct may still say RUNNING).
        try:
            outcome = job.result()
            failed += outcome["failed"]
            held = outcome["held"]
            print(f"job {job.job_id} (shard {i}/{count}): done, {outcome['finished']} run(s) finished, "
                  f"{len(outcome['failed'])} failed" + (f", {len(held)} held by another runner" if held else ""),
                  file=sys.stderr, flush=True)
        except Exception as error:  # the job itself broke (not one of its runs): its log says why
            failed.append(f"shard {i}/{count}")
            print(f"job {job.job_id} (shard {i}/{count}) failed: {str(error).strip().splitlines()[-1]}; see "
                  f"{job.paths.stderr}", file=sys.stderr)
    return f"{len(jobs)} job(s) done, {len(failed)} failed{': ' + ', '.join(failed) if failed else ''}", (
        1 if failed else 0)


# The options add_arguments adds, as argparse names them: the command that goes on with a
# batch of jobs repeats each one given (run.same_command)
OPTIONS = ("launcher", "jobs", "time_limit", "partition", "gpus_per_job", "cpus_per_job")


def add_arguments(parser):
    group = parser.add_argument_group("jobs of a scheduler (submitit)")
    group.add_argument("--launcher", choices=("local", "slurm"),
                       help="run the grid as scheduler jobs: processes on this machine (local) or sbatch jobs (slurm)")
    group.add_argument("--jobs", type=_positive, metavar="N", help="N jobs, each a shard of the grid (default: one "
                                                                      "job per run)")
    group.add_argument("--time-limit", type=_positive, default=24 * 60, metavar="MINUTES",
                       help="each job's time limit; a job that reaches it is requeued and goes on from its "
                            "checkpoints (default: %(default)s)")
    group.add_argument("--partition", help="the SLURM partition")
    group.add_argument("--gpus-per-job", type=int, default=0, metavar="N", help="GPUs of each job (default: 0)")
    group.add_argument("--cpus-per-job", type=_positive, default=1, metavar="N", help="CPU cores of each job "
                                                                                         "(default: 1)")


def _positive(text):
    from onmt_posenc.core.arguments import positive_int

    return positive_int(text)


def check_arguments(args):
    """Options that belong together: an ExperimentError naming what is wrong."""
    if args.launcher is None:
        given = [f"--{name.replace('_', '-')}" for name in ("jobs", "partition") if getattr(args, name)]
        if given:
            raise spec.ExperimentError(f"{', '.join(given)} without --launcher: give --launcher local or slurm")
        return
    if args.shard:
        raise spec.ExperimentError("--shard and --launcher: the launcher makes the shards itself (--jobs N)")
    if args.partition and args.launcher != "slurm":
        raise spec.ExperimentError("--partition is a SLURM partition: it needs --launcher slurm")
