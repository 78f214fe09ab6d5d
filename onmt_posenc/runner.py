"""`onmt-posenc run EXPERIMENT.yaml`: every run of an experiment's grid, then the report.

Each run lives in <output>/<data>/<method>/seed<n>/ and goes through the stock
OpenNMT-py commands, as a user would call them:

    config.yaml      the run's OpenNMT-py config (see onmt_posenc.experiment)
    onmt_build_vocab -config config.yaml -n_sample -1
    onmt_train -config config.yaml
    onmt_average_models -models <the last checkpoints> -output averaged.pt
    onmt_translate -config translate.yaml -model averaged.pt -src <set> -output hyp/<set>.txt
    BLEU of every evaluation set (sacreBLEU), then the per-run analyses
    result.json      written last: the run is finished

Every command's output goes to logs/<step>.log. A run that fails is reported
with its log and the others go on; re-running the same command skips finished
runs and retries the rest, so an interruption loses no finished run.
`--shard i/n` runs every n-th run only (for n machines or cluster jobs);
`onmt-posenc report` then merges whatever all shards finished into one report.
"""
import json
import os
import re
import shutil
import signal
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import NamedTuple

import yaml

from onmt_posenc import experiment as experiments
from onmt_posenc import interpolate, stock, synthetic
from onmt_posenc.analysis.bleu import corpus_bleu

RESULT = "result.json"
FAILURE = "failure.json"
# Analyses of one model, run right after its evaluation; the others compare runs (see report).
PER_RUN_ANALYSES = ("shift_invariance", "position_ablation", "token_nll", "swapped")


def write_text_atomically(path, text):
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def write_json(path, value):
    write_text_atomically(path, json.dumps(value, indent=1) + "\n")


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class EvalSet(NamedTuple):
    src: Path
    tgt: Path  # what the model reads (teacher forcing)
    ref: Path  # what BLEU compares with


def _require_file(path):
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}")


def _copy_lines(pair, directory, name):
    """The files of `pair` in `directory`, cut to their first `lines` and joined `join` per line."""
    copies = {}
    for side in ("src", "tgt", "ref"):
        source = getattr(pair, side)
        if source is None:
            continue
        _require_file(source)
        lines = interpolate.read_lines(source)[: pair.lines]
        if pair.join:
            lines = interpolate.join_lines(lines, pair.join, interpolate.DEFAULT_SEP)
        copies[side] = directory / f"{name}.{side}"
        write_text_atomically(copies[side], "".join(line + "\n" for line in lines))
    return EvalSet(copies["src"], copies["tgt"], copies.get("ref", copies["tgt"]))


def prepare_data(setting, directory):
    """The files of a data setting: {"train": (src, tgt), "valid": (src, tgt) or None,
    "eval": {name: EvalSet}}.

    Synthetic data is generated here (once: the same task writes the same files);
    eval sets are copied (cut, joined) into `directory`; training files are used
    in place unless cut to their first lines."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if setting.synthetic is not None:
        marker = directory / "task.json"
        wanted = json.dumps(setting.synthetic.__dict__, sort_keys=True)
        if not marker.is_file() or marker.read_text(encoding="utf-8") != wanted:
            synthetic.write_corpus(directory, setting.synthetic)
            write_text_atomically(marker, wanted)
        pair = {name: (directory / f"{name}.src", directory / f"{name}.tgt")
                for name in ("train", *synthetic.EVAL_SETS)}
        return {"train": pair["train"], "valid": pair["valid"],
                "eval": {name: EvalSet(*pair[name], pair[name][1]) for name in synthetic.EVAL_SETS}}

    def in_place_or_cut(pair, name):
        if pair.lines or pair.join:
            return _copy_lines(pair, directory, name)[:2]
        _require_file(pair.src)
        _require_file(pair.tgt)
        return pair.src, pair.tgt

    (directory / "eval").mkdir(exist_ok=True)
    return {
        "train": in_place_or_cut(setting.train, "train"),
        "valid": in_place_or_cut(setting.valid, "valid") if setting.valid else None,
        "eval": {name: _copy_lines(pair, directory / "eval", name) for name, pair in setting.eval_sets.items()},
    }


def run_config(run, files, run_dir):
    """The run's OpenNMT-py config: its keys plus the paths the runner owns."""
    config = {key: value for key, value in run.config.items() if key not in experiments.RUNNER_KEYS}
    corpora = {"train": {"path_src": str(files["train"][0]), "path_tgt": str(files["train"][1])}}
    if files["valid"]:
        corpora["valid"] = {"path_src": str(files["valid"][0]), "path_tgt": str(files["valid"][1])}
    config.update(
        data=corpora,
        save_data=str(run_dir / "samples"),
        src_vocab=str(run_dir / "vocab.src"),
        save_model=str(run_dir / "model"),
        overwrite=True,
    )
    if not config.get("share_vocab"):
        config["tgt_vocab"] = str(run_dir / "vocab.tgt")
    return config


def checkpoints(run_dir):
    """The run's checkpoints, oldest first."""
    found = list(Path(run_dir).glob("model_step_*.pt"))
    return sorted(found, key=lambda p: int(p.stem.rsplit("_", 1)[1]))


class Progress:
    """One line per event on stderr: which run, which step, and how long the rest should take.

    ETAs come from the training speed so far (between OpenNMT-py's reports) and,
    once a run has finished, from how long the finished runs took."""

    def __init__(self, total, stream=None):
        self.total = total
        self.stream = stream or sys.stderr
        self.durations = []  # seconds of each run finished in this invocation
        self.after_training = []  # seconds each of them spent after training
        self.index, self.run_id = 0, ""
        self.train_end = 0.0

    @staticmethod
    def clock(seconds):
        seconds = int(max(seconds, 0))
        return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"

    def say(self, text):
        print(f"[{self.index}/{self.total} {self.run_id}] {text}", file=self.stream, flush=True)

    def start_run(self, index, run_id):
        self.index, self.run_id, self.run_start = index, run_id, time.time()
        self.say("start")

    def start_training(self):
        self.train_start, self.first_report = time.time(), None
        self.say("train")

    def end_training(self):
        self.train_end = time.time()

    def train_step(self, step, total):
        now = time.time()
        if self.first_report is None:  # from the first report on, start-up time no longer counts
            self.first_report = (step, now)
            rate = step / max(now - self.train_start, 1e-9)
        else:
            first_step, first_time = self.first_report
            rate = (step - first_step) / max(now - first_time, 1e-9)
        training_eta = (total - step) / rate if rate > 0 else 0.0
        mean = statistics.mean
        rest_of_run = training_eta + (mean(self.after_training) if self.after_training else 0.0)
        this_run = now - self.run_start + rest_of_run
        other_runs = (self.total - self.index) * (mean(self.durations) if self.durations else this_run)
        self.say(f"train step {step}/{total} ({100 * step // max(total, 1)}%), {rate:.1f} steps/s, "
                 f"run ETA {self.clock(rest_of_run)}, all runs ETA ~{self.clock(rest_of_run + other_runs)}")

    def end_run(self, status):
        seconds = time.time() - self.run_start
        if status == "finished" and self.train_end > self.run_start:
            self.durations.append(seconds)
            self.after_training.append(time.time() - self.train_end)
        self.say(f"{status} in {self.clock(seconds)}")


def _train_progress(progress):
    """on_line for onmt_train: OpenNMT-py logs 'Step 300/ 1000; acc: ...'."""
    pattern = re.compile(r"Step (\d+)/\s*(\d+);")

    def on_line(line):
        found = pattern.search(line)
        if found:
            progress.train_step(int(found.group(1)), int(found.group(2)))

    return on_line


class RunExecutor:
    """Everything one run does, step by step; raises on the first failing step."""

    def __init__(self, experiment, run, files, run_dir, progress):
        self.experiment, self.run, self.files = experiment, run, files
        self.dir, self.progress = Path(run_dir), progress
        self.logs = self.dir / "logs"
        self._model = None

    def stock(self, name, args, log_name, on_line=None):
        stock.run_logged(name, args, self.logs / f"{log_name}.log", on_line)

    def translate(self, src, output):
        log = self.logs / f"translate_{Path(output).stem}.log"
        return stock.translate(self.dir / "averaged.pt", src, output, log, self.dir / "translate.yaml")

    def execute(self, config):
        started = time.time()
        write_text_atomically(self.dir / "config.yaml", yaml.safe_dump(config, sort_keys=False))
        write_text_atomically(self.dir / "translate.yaml", yaml.safe_dump(self.experiment.translate, sort_keys=False))
        self.progress.say("build vocabulary")
        self.stock("onmt_build_vocab", ["-config", self.dir / "config.yaml", "-n_sample", "-1"], "build_vocab")
        self.progress.start_training()
        train_started = time.time()
        self.stock("onmt_train", ["-config", self.dir / "config.yaml"], "train", _train_progress(self.progress))
        self.progress.end_training()
        train_seconds = time.time() - train_started
        saved = checkpoints(self.dir)
        if not saved:
            raise RuntimeError(f"onmt_train saved no checkpoint; see {self.logs / 'train.log'}")
        averaged = saved[-(self.experiment.average_last or len(saved)):]
        self.progress.say(f"average {len(averaged)} checkpoint(s)")
        self.stock("onmt_average_models", ["-models", *averaged, "-output", self.dir / "averaged.pt"], "average")
        (self.dir / "hyp").mkdir(exist_ok=True)
        bleu, hyps = {}, {}
        for name, files in self.files["eval"].items():
            self.progress.say(f"translate {name}")
            hyps[name] = self.translate(files.src, self.dir / "hyp" / f"{name}.txt")
            bleu[name], signature = corpus_bleu(interpolate.read_lines(hyps[name]), interpolate.read_lines(files.ref))
        self.progress.say("BLEU " + ", ".join(f"{name} {score:.2f}" for name, score in bleu.items()))
        analyses, errors = self.analyses(hyps)
        return {
            **run_fields(self.run), "status": "finished",
            "bleu": bleu, "bleu_signature": signature,
            "checkpoints_averaged": [p.name for p in averaged],
            "train_seconds": round(train_seconds, 1), "seconds": round(time.time() - started, 1),
            "analyses": analyses, "analysis_errors": errors, "config": config,
        }

    def analyses(self, hyps):
        """The per-run analyses; one that fails is recorded with its log, and the run still counts."""
        done, errors = {}, {}
        (self.dir / "analyses").mkdir(exist_ok=True)
        for name in PER_RUN_ANALYSES:
            if name not in self.experiment.analyses:
                continue
            options = self.experiment.analyses[name]
            files = self.files["eval"].get(options["set"])
            if files is None:
                errors[name] = f"data setting {self.run.data!r} has no eval set {options['set']!r}; skipped"
                continue
            self.progress.say(f"analysis {name}")
            try:
                result = getattr(self, name)(options, files, hyps)
            except Exception as error:  # an analysis that breaks must not cost the run's BLEU
                log = self.logs / f"analysis_{name}.log"
                log.write_text(traceback.format_exc(), encoding="utf-8")
                errors[name] = f"{type(error).__name__}: {error} (see {log})"
                self.progress.say(f"analysis {name} failed: {errors[name]}")
                continue
            write_json(self.dir / "analyses" / f"{name}.json", result)
            done[name] = f"analyses/{name}.json"
        return done, errors

    def model(self):
        """The averaged model, loaded once for the analyses that run it in this process."""
        from onmt_posenc.analysis import models

        if self._model is None:
            self._model = models.load_model(self.dir / "averaged.pt")
        return self._model

    def shift_invariance(self, options, files, hyps):
        from onmt_posenc.analysis import models, shift_invariance

        return shift_invariance.measure(self.model(), models.read_lines(files.src, options["sentences"]),
                                        options["offsets"])

    def position_ablation(self, options, files, hyps):
        from onmt_posenc.analysis import models, position_ablation

        return position_ablation.ablate(self.model(), models.read_lines(files.src, options["sentences"]),
                                        models.read_lines(files.tgt, options["sentences"]))

    def token_nll(self, options, files, hyps):
        """Per-sentence token NLLs, kept for the comparison across methods in the report."""
        from onmt_posenc.analysis import models, token_nll

        nlls = token_nll.token_nlls(self.model(), models.read_lines(files.src), models.read_lines(files.tgt))
        return {"set": options["set"], "nll": [None if n is None else [round(x, 5) for x in n] for n in nlls]}

    def swapped(self, options, files, hyps):
        from onmt_posenc.analysis import swapped

        return swapped.analyse(files.src, files.ref, self.dir / "analyses" / "swapped", self.translate,
                               options["sep"], original_hyp=hyps.get(options["set"]))


def run_dir(experiment, run):
    return experiment.output / run.id


def data_dir(experiment, data):
    """Where a data setting's prepared files go (see prepare_data)."""
    return experiment.output / "data" / data


def run_fields(run):
    """What names a run in its result, its failure and the report."""
    return {"id": run.id, "data": run.data, "method": run.method, "label": run.label, "K": run.shift,
            "seed": run.seed}


def execute_run(experiment, run, files, progress):
    """Run one grid point unless finished; returns its record (finished or failed)."""
    directory = run_dir(experiment, run)
    config = run_config(run, files, directory)
    if (directory / RESULT).is_file():
        result = read_json(directory / RESULT)
        if result.get("config") != config:
            return {"id": run.id, "status": "failed",
                    "error": f"{directory} holds a finished run with another config; remove that "
                             "folder to run it again with the new settings", "log": str(directory / RESULT)}
        progress.say("finished before; skipped")
        return result
    if directory.exists():  # an interrupted or failed attempt: start clean
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    try:
        result = RunExecutor(experiment, run, files, directory, progress).execute(config)
    except Exception as error:  # any failure of this run; an interruption (KeyboardInterrupt) stops all
        log = getattr(error, "log_path", None)
        if log is None:
            log = directory / "logs" / "runner.log"
            log.parent.mkdir(exist_ok=True)
            log.write_text(traceback.format_exc(), encoding="utf-8")
        failure = {**run_fields(run), "status": "failed", "error": str(error), "log": str(log)}
        write_json(directory / FAILURE, failure)
        return failure
    write_json(directory / RESULT, result)
    return result


def run_all(experiment, runs, stream=None):
    """Execute `runs` in order; returns their records. Data is prepared once per setting."""
    progress = Progress(len(runs), stream)
    prepared, records = {}, []
    for index, run in enumerate(runs, 1):
        progress.start_run(index, run.id)
        try:
            if run.data not in prepared:
                prepared[run.data] = prepare_data(experiment.data[run.data], data_dir(experiment, run.data))
            record = execute_run(experiment, run, prepared[run.data], progress)
        except (OSError, ValueError) as error:  # the data of this setting is unusable
            record = {"id": run.id, "status": "failed", "error": f"data: {error}", "log": None}
        progress.end_run(record["status"])
        if record["status"] == "failed":
            where = f"; log: {record['log']}" if record.get("log") else ""
            progress.say(f"FAILED: {record['error']}{where}")
        records.append(record)
    return records


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def add_arguments(parser):
    experiments.add_arguments(parser)
    parser.add_argument("--shard", metavar="I/N", help="run only shard I of N (every N-th run from the I-th); "
                        "merge with `onmt-posenc report` when all shards are done")


def main(args):
    from onmt_posenc import report

    try:
        experiment = experiments.from_arguments(args)
        shard = experiments.parse_shard(args.shard) if args.shard else None
    except experiments.ExperimentError as error:
        print(f"onmt-posenc run: error: {error}", file=sys.stderr)
        return 2
    runs = experiments.shard(experiment.runs, *shard) if shard else experiment.runs
    where = f" (shard {shard[0]}/{shard[1]})" if shard else ""
    print(f"{experiment.name}: {len(runs)} of {len(experiment.runs)} runs{where} -> {experiment.output}",
          file=sys.stderr)
    started = time.time()
    # A scheduler's SIGTERM stops like Ctrl-C: the running command is stopped, finished runs stay.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        records = run_all(experiment, runs)
    except KeyboardInterrupt:
        print("interrupted: finished runs are kept; run the same command again to go on", file=sys.stderr)
        return 130
    failed = [r for r in records if r["status"] == "failed"]
    print(f"{len(records) - len(failed)} run(s) finished, {len(failed)} failed, "
          f"in {Progress.clock(time.time() - started)}", file=sys.stderr)
    for record in failed:
        print(f"  FAILED {record['id']}: {record['error']} (log: {record.get('log')})", file=sys.stderr)
    if shard:
        name = f"shard-{shard[0]}-of-{shard[1]}.json"
        write_json(experiment.output / name, [{k: r.get(k) for k in ("id", "status", "error", "log")}
                                              for r in records])
        same = "".join(f" --{key} {getattr(args, key)}" for key in ("data", "output") if getattr(args, key))
        same += "".join(f" --set {pair}" for pair in args.overrides)
        print(f"when every shard is done: onmt-posenc report {args.experiment}{same}", file=sys.stderr)
    else:
        path = report.write(experiment)
        print(f"report: {path}", file=sys.stderr)
    return 1 if failed else 0
