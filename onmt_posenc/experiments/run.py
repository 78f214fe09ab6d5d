"""`onmt-posenc run EXPERIMENT.yaml`: check the experiment file, then run its grid here
(onmt_posenc.experiments.running.runner; `--shard i/n` for part of it) or as scheduler jobs
(onmt_posenc.experiments.running.launcher), and write the report."""
import shlex
import signal
import sys
import time
from pathlib import Path

from onmt_posenc.analysis import not_a_folder
from onmt_posenc import experiments
from onmt_posenc.experiments.report import command as report
from onmt_posenc.experiments.running import launcher
from onmt_posenc.experiments.running.progress import Progress
from onmt_posenc.experiments.running.records import where_its_log_is
from onmt_posenc.experiments.running.runner import check_data_files, run_all, write_shard_record


def describe(setting):
    """A data setting in one line: its kind and where its files come from."""
    source = "the synthetic task" if setting.synthetic else f"{setting.train.src.parent}"
    return f"{setting.design}, training files from {source}"


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def same_command(args, verb="run", names=()):
    """`onmt-posenc VERB` on the runs `args` name: the file, --data, --output, --set, and the
    options `names` (those of the runner only `run` takes)."""
    words = ["onmt-posenc", verb, args.experiment]
    for name in ("data", "output", *names):
        if getattr(args, name, None):
            words += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    for pair in args.overrides:
        words += ["--set", pair]
    return shlex.join(words)


def add_arguments(parser):
    experiments.add_arguments(parser)
    parser.add_argument("--shard", metavar="I/N", help="run only shard I of N (every N-th run from the I-th); "
                        "merge with `onmt-posenc report` when all shards are done")
    launcher.add_arguments(parser)


def main(args):
    experiment = experiments.from_arguments(args)
    shard = experiments.parse_shard(args.shard) if args.shard else None
    launcher.check_arguments(args)
    experiments.check_options(experiment)  # every run, before the first one trains
    check_data_files(experiment, experiments.shard(experiment.runs, *shard) if shard else experiment.runs)
    problem = not_a_folder(experiment.output)
    if problem is not None:
        raise experiments.ExperimentError(f"the output {experiment.output} {problem}; name a folder "
                                          "(--output, or output in the file)")
    if args.launcher:
        experiment.output.mkdir(parents=True, exist_ok=True)
        # the jobs load the file as this command did, wherever the scheduler starts them
        outcome, status = launcher.launch(experiment, {
            "path": Path(args.experiment).resolve(), "overrides": list(args.overrides),
            "output": experiment.output.resolve(), "data_folder": Path(args.data).resolve() if args.data else None,
        }, args, same_command(args, names=launcher.OPTIONS))
        print(f"{outcome}; report: {report.write(experiment)}", file=sys.stderr)
        return status
    runs = experiments.shard(experiment.runs, *shard) if shard else experiment.runs
    where = f" (shard {shard[0]}/{shard[1]})" if shard else ""
    print(f"{experiment.name}: {len(runs)} of {len(experiment.runs)} runs{where} -> {experiment.output}",
          file=sys.stderr)
    for setting in (experiment.data[label] for label in dict.fromkeys(run.data for run in runs)):
        print(f"  data {setting.label}: {describe(setting)}", file=sys.stderr)
    experiment.output.mkdir(parents=True, exist_ok=True)  # a shard's record, even of no runs
    started = time.time()
    # A scheduler's SIGTERM stops like Ctrl-C: the running command is stopped, finished runs stay.
    signal.signal(signal.SIGTERM, _interrupt)
    going_on = same_command(args, names=("shard",))
    try:
        records = run_all(experiment, runs, going_on)
    except KeyboardInterrupt:
        print(f"interrupted: finished runs are kept; `{going_on}` goes on", file=sys.stderr)
        return 130
    failed = [r for r in records if r["status"] == "failed"]
    held = sum(r["status"] == "held" for r in records)
    print(f"{len(records) - len(failed) - held} run(s) finished, {len(failed)} failed, "
          + (f"{held} held by another runner, " if held else "") + f"in {Progress.clock(time.time() - started)}",
          file=sys.stderr)
    for record in failed:
        print(f"  FAILED {record['id']}: {record['error']}{where_its_log_is(record, record['error'])}",
              file=sys.stderr)
    if shard:
        write_shard_record(experiment, shard, records)
        print(f"when every shard is done: {same_command(args, 'report')}", file=sys.stderr)
    else:
        print(f"report: {report.write(experiment)}", file=sys.stderr)
    return 1 if failed else 0
