"""`onmt-posenc run EXPERIMENT.yaml`: every run of an experiment's grid, then the report.

Each run lives in <output>/<data>/<method>/seed<n>/ and goes through the stock
OpenNMT-py commands, as a user would call them:

    config.yaml      the run's OpenNMT-py config (see onmt_posenc.experiments.spec)
    onmt_build_vocab -config config.yaml -n_sample -1 -dump_samples   (sample/: the corpus as trained on)
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
import os
import platform
import shutil
import statistics
import sys
import time
import traceback
from pathlib import Path

import yaml

from onmt_posenc import experiments
from onmt_posenc.experiments import curves
from onmt_posenc.hooks import stock
from onmt_posenc.model.checkpoints import is_complete
from onmt_posenc.core.scoring import corpus_bleu, is_joined, split_scores
from onmt_posenc.experiments.state import goes_on, run_state
from onmt_posenc.experiments.store import (AVERAGED, FAILURE, RESULT, WARM_START, corpus_files, data_dir,
                                           evaluation_of, file_digest, longest_training_source, prepare_data,
                                           prepare_phrases, read_stored, run_config, run_dir, run_fields,
                                           warm_source_changed, write_json, write_text_atomically)
from onmt_posenc.core.text import read_lines, scan_text

# The seconds onmt_build_vocab took, in the run's folder
VOCAB_SECONDS = "logs/build_vocab_seconds.json"
# Whether training shared the machine (DeviceWatch), over every invocation of onmt_train
DEVICE = "logs/device_sharing.json"
# Analyses of one model, run right after its evaluation; the report puts them side by side.
PER_RUN_ANALYSES = ("length_buckets", "shift_invariance", "position_ablation", "token_nll", "swapped")


def machine():
    """What the runs ran on, for the report's speed column."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {"cpu": cpu, "cores": os.cpu_count(), "gpus": gpus, "torch": torch.__version__}


def checkpoint_step(path):
    return int(Path(path).stem.rsplit("_", 1)[1])


def saved_checkpoints(run_dir):
    """The run's checkpoints, oldest first."""
    return sorted(Path(run_dir).glob("model_step_*.pt"), key=checkpoint_step)


def newest_complete_checkpoint(run_dir, say):
    """The newest checkpoint that loads; newer ones that do not (a save cut short by a
    kill) are removed, so that averaging never picks them up."""
    for path in reversed(saved_checkpoints(run_dir)):
        if is_complete(path):
            return path
        say(f"{path.name} is not a complete checkpoint; removed")
        path.unlink()
    return None


def keep_newest(saved, keep):
    """Remove all but the `keep` newest of the checkpoints `saved` (oldest first; keep <= 0:
    all stay), as onmt_train's keep_checkpoint would have in one invocation: a resumed
    onmt_train removes only the checkpoints it saved itself. Returns those kept."""
    if keep <= 0 or len(saved) <= keep:
        return saved
    for path in saved[:-keep]:
        path.unlink()
    return saved[-keep:]


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

    def start_training(self, from_step=0):
        self.train_start, self.from_step, self.first_report = time.time(), from_step, None
        self.say("train")

    def end_training(self):
        self.train_end = time.time()

    def train_step(self, step, total):
        now = time.time()
        if self.first_report is None:  # from the first report on, start-up time no longer counts
            self.first_report = (step, now)
            rate = (step - self.from_step) / max(now - self.train_start, 1e-9)
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


class DeviceWatch:
    """Whether training shared its machine, sampled at each of onmt_train's reports: the
    other onmt_train processes running (other shards on the GPU or the CPU) and the load
    average against the cores. A speed measured beside other work says nothing about
    the method (claims.speed)."""

    def __init__(self):
        self.others, self.loads = [], []

    def sample(self):
        if hasattr(os, "getloadavg"):
            self.loads.append(os.getloadavg()[0])
        trainings = other_trainings()
        if trainings is not None:
            self.others.append(trainings)

    def summary(self, earlier=None):
        """This invocation's samples, merged with an earlier invocation's summary."""
        earlier = earlier or {}
        loads = self.loads + ([earlier["load_average"]] if earlier.get("load_average") is not None else [])
        others = self.others + ([earlier["other_trainings"]] if earlier.get("other_trainings") is not None else [])
        return {"other_trainings": max(others) if others else None,
                "load_average": round(statistics.mean(loads), 2) if loads else None,
                "cores": os.cpu_count(), "samples": len(self.loads) + earlier.get("samples", 0)}


def other_trainings():
    """How many onmt_train processes run on this machine besides one (ours); None where
    processes cannot be listed (no /proc)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    count = 0
    for cmdline in proc.glob("[0-9]*/cmdline"):
        try:
            arguments = cmdline.read_bytes().split(b"\0")
        except OSError:  # the process ended meanwhile
            continue
        # the console script (python .../onmt_train) or the module; the first spawned worker's
        # parent too: count the command line of each training once
        count += any(Path(a.decode(errors="replace")).name == "onmt_train" for a in arguments[:2])
    return max(count - 1, 0)


def _train_progress(progress, watch):
    """on_line for onmt_train: progress from its reports (curves.TRAIN_REPORT), and the
    machine's sharing sampled at each."""

    def on_line(line):
        found = curves.TRAIN_REPORT.search(line)
        if found:
            progress.train_step(int(found.group(1)), int(found.group(2)))
            watch.sample()

    return on_line


class RunExecutor:
    """Everything one run does, step by step; raises on the first failing step."""

    def __init__(self, experiment, run, files, run_dir, progress):
        self.experiment, self.run, self.files = experiment, run, files
        self.dir, self.progress = Path(run_dir), progress
        self.logs = self.dir / "logs"
        self._model = None

    def stock(self, name, args, log_name, on_line=None, append=False):
        stock.run_logged(name, args, self.logs / f"{log_name}.log", on_line, append)

    def translate(self, src, output):
        log = self.logs / f"translate_{Path(output).stem}.log"
        return stock.translate(self.dir / AVERAGED, src, output, log, self.dir / "translate.yaml")

    def execute(self, config, resume_from=None):
        """The run from its start, or from the checkpoint `resume_from` on (OpenNMT-py's
        train_from: weights, optimizer state and step; the vocabulary is already built)."""
        started = time.time()
        # written again on resuming: the same settings, with the files where they are now
        write_text_atomically(self.dir / "config.yaml", yaml.safe_dump(config, sort_keys=False))
        if resume_from is None:
            self.progress.say("build vocabulary")
            # -dump_samples: the training corpus as the transforms made it, in sample/, to check what was trained on
            self.stock("onmt_build_vocab", ["-config", self.dir / "config.yaml", "-n_sample", "-1", "-dump_samples"],
                       "build_vocab")
            # kept for the run's wall time when a later invocation finishes it
            write_json(self.dir / VOCAB_SECONDS, round(time.time() - started, 1))
        write_text_atomically(self.dir / "translate.yaml", yaml.safe_dump(self.experiment.translate, sort_keys=False))
        self.longest_source = longest_training_source(self.dir)
        if resume_from is None or checkpoint_step(resume_from) < config.get("train_steps", curves.DEFAULT_TRAIN_STEPS):
            args = ["-config", self.dir / "config.yaml"]
            if resume_from is not None:
                self.progress.say(f"resume from {resume_from.name}")
                # keep_states: the optimizer's state and step from the checkpoint, its options
                # (learning rate, schedule) from this run's config, not from the checkpoint's
                # stored options, which for a warm-started run saved before this fix are its source's
                args += ["-train_from", resume_from, "-reset_optim", "keep_states"]
            elif config.get("train_from"):  # warm_start: the source model's weights, step 0 and a new
                # optimizer (its schedule from the start), embeddings mapped to this run's vocabulary;
                # override_opts: the model and its checkpoints take this run's options (the model
                # options are the source's, see experiment.check_options), not the source's
                self.warm_start(Path(config["train_from"]))
                write_json(self.dir / WARM_START, {"from": config["train_from"], "sha256": file_digest(config["train_from"])})
                args += ["-reset_optim", "all", "-update_vocab", "-override_opts"]
            self.progress.start_training(checkpoint_step(resume_from) if resume_from else 0)
            watch = DeviceWatch()
            try:
                self.stock("onmt_train", args, "train", _train_progress(self.progress, watch),
                           append=resume_from is not None)
            finally:  # an interrupted invocation's samples count too
                earlier = read_stored(self.dir / DEVICE)[0] if (self.dir / DEVICE).is_file() else None
                write_json(self.dir / DEVICE, watch.summary(earlier if resume_from is not None else None))
            self.progress.end_training()
        evaluation_started = time.time()
        saved = saved_checkpoints(self.dir)
        if not saved:
            raise RuntimeError(f"onmt_train saved no checkpoint; see {self.logs / 'train.log'}")
        saved = keep_newest(saved, config.get("keep_checkpoint", -1))
        averaged = saved[-(self.experiment.average_last or len(saved)):]
        self.progress.say(f"average {len(averaged)} checkpoint(s)")
        self.stock("onmt_average_models", ["-models", *averaged, "-output", self.dir / AVERAGED], "average")
        (self.dir / "hyp").mkdir(exist_ok=True)
        scores, hyps = {}, {}
        for name in self.experiment.translated_sets:
            files = self.files["eval"][name]
            self.progress.say(f"translate {name}")
            hyps[name] = read_lines(self.translate(files.src, self.dir / "hyp" / f"{name}.txt"))
            scores[name] = self.score(hyps[name], read_lines(files.ref),
                                      self.experiment.data[self.run.data].target_language)
        self.progress.say("BLEU " + ", ".join(f"{name} {score['bleu']:.2f}" for name, score in scores.items()))
        analyses, errors = self.analyses(hyps)
        curve = curves.read(self.logs / "train.log", config.get("valid_steps", curves.DEFAULT_VALID_STEPS))
        vocab_seconds, _ = read_stored(self.dir / VOCAB_SECONDS)
        evaluation_seconds = time.time() - evaluation_started
        return {
            **run_fields(self.run), "status": "finished",
            "bleu": {name: score["bleu"] for name, score in scores.items()},
            "chrf": {name: score["chrf"] for name, score in scores.items()},
            "bleu_details": {name: score["details"] for name, score in scores.items()},
            "length_ratio": {name: score["length_ratio"] for name, score in scores.items()},
            "joined": {name: score["joined"] for name, score in scores.items() if "joined" in score},
            "bleu_signature": next(iter(scores.values()))["signature"],
            "chrf_signature": next(iter(scores.values()))["chrf_signature"],
            "training_speed": curves.training_speed(self.logs / "train.log"),
            "curve": curve, "convergence": curves.convergence(curve["valid"]),
            "resumed_from": checkpoint_step(resume_from) if resume_from else None,
            "evaluation": evaluation_of(self.experiment, self.experiment.data[self.run.data]),
            "machine": machine(),
            "device_sharing": read_stored(self.dir / DEVICE)[0] if (self.dir / DEVICE).is_file() else None,
            "longest_training_source": self.longest_source,
            "checkpoints_averaged": [p.name for p in averaged],
            # every invocation of the run added up (a resumed run: its earlier attempts too)
            "train_seconds": curve["train_seconds"],
            "seconds": round((vocab_seconds if isinstance(vocab_seconds, (int, float)) else 0)
                             + curve["train_seconds"] + evaluation_seconds, 1),
            "analyses": analyses, "analysis_errors": errors, "config": config,
        }

    def warm_start(self, model):
        """Check that the run this one starts from has finished with the file's settings."""
        experiment, where = self.experiment, f"data.{self.run.data}.warm_start"
        source = experiment.warm_start_source(self.run)
        setting = experiment.data[source.data]
        config = run_config(experiment, source, corpus_files(setting, data_dir(experiment, source.data)))
        # its model as trained with the file's settings (evaluated otherwise: the same model)
        if run_state(run_dir(experiment, source), config, experiment, setting).kind not in ("finished",
                                                                                           "evaluated_otherwise"):
            raise RuntimeError(f"{where}: this run starts from the model of {source.id}, which has not finished with "
                               f"the file's settings yet: run it first (it comes earlier in the grid; with --shard, "
                               "run this shard again once it has)")
        if not is_complete(model):
            raise RuntimeError(f"{where}: {model} does not load (missing, incomplete or damaged); "
                               f"run {source.id} again to write it")
        self.progress.say(f"start from {model}")

    @staticmethod
    def score(hyps, refs, language=None):
        """BLEU (separators removed), chrF, brevity penalty, n-gram precisions and length
        ratio; for joined sets also the BLEU of the sentences split back and the count of
        lines with the wrong separators. `language`: the target's (evaluate.bleu_tokenizer)."""
        bleu = corpus_bleu(hyps, refs, language=language)
        score = {"bleu": bleu.score, "length_ratio": bleu.length_ratio, "signature": bleu.signature,
                 "chrf": bleu.chrf, "chrf_signature": bleu.chrf_signature, "details": bleu.details()}
        if is_joined(refs):
            score["joined"] = split_scores(hyps, refs, language=language)
        return score

    def analyses(self, hyps):
        """The per-run analyses; one that fails is recorded with its log, and the run still counts."""
        done, errors = {}, {}
        (self.dir / "analyses").mkdir(exist_ok=True)
        for name in PER_RUN_ANALYSES:
            if name not in self.experiment.analyses:
                continue
            options = self.experiment.analyses[name]  # its sets exist: experiment.load checked them
            self.progress.say(f"analysis {name}")
            try:
                result = getattr(self, name)(options, hyps)
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
            self._model = models.load_model(self.dir / AVERAGED)
        return self._model

    def length_buckets(self, options, hyps):
        from onmt_posenc.analysis import length_buckets

        return {name: length_buckets.bucket_scores(read_lines(self.files["eval"][name].src),
                                                   read_lines(self.files["eval"][name].ref),
                                                   hyps[name], options["width"], self.longest_source)
                for name in options["sets"]}

    def shift_invariance(self, options, hyps):
        from onmt_posenc.analysis import models, shift_invariance

        files = self.files["eval"][options["set"]]
        return shift_invariance.measure(self.model(), models.read_token_lines(files.src, options["sentences"]),
                                        options["offsets"])

    def position_ablation(self, options, hyps):
        from onmt_posenc.analysis import models, position_ablation

        files = self.files["eval"][options["set"]]
        return position_ablation.ablate(self.model(), models.read_token_lines(files.src, options["sentences"]),
                                        models.read_token_lines(files.tgt, options["sentences"]))

    def token_nll(self, options, hyps):
        """Per-sentence token NLLs and training frequencies, for the comparison across methods in the report."""
        from onmt_posenc.analysis import models, token_nll

        files = self.files["eval"][options["set"]]
        tgt = models.read_token_lines(files.tgt)
        nlls = token_nll.token_nlls(self.model(), models.read_token_lines(files.src), tgt)
        counts = token_nll.training_frequencies(self.files["train"][1])
        return {"set": options["set"], "nll": [None if n is None else [round(x, 5) for x in n] for n in nlls],
                "frequency": token_nll.gold_frequencies(tgt, counts)}

    def swapped(self, options, hyps):
        """On the evaluation set `set` and, as the paper does, on the first `train_examples`
        joined examples of the training corpus as the model saw it (sample/)."""
        from onmt_posenc.analysis import swapped

        workdir, name, sep = self.dir / "analyses" / "swapped", options["set"], options["sep"]
        files = self.files["eval"][name]
        language = self.experiment.data[self.run.data].target_language
        results = {name: swapped.analyse(files.src, files.ref, workdir / name, self.translate, sep,
                                         original_hyp=self.dir / "hyp" / f"{name}.txt", language=language)}
        if options["train_examples"]:
            src = self.dir / "sample" / "train.sample.src"  # the joined corpus, not single_pairs's
            examples = swapped.training_examples(src, src.with_suffix(".tgt"), options["train_examples"],
                                                 workdir / "train", sep)
            results["train"] = (swapped.analyse(*examples, workdir / "train", self.translate, sep, language=language)
                                if examples else
                                {"applicable": False, "examples": 0,
                                 "why": "not applicable: the training corpus joins no sentences"})
        return results


def resume_point(directory, config, say):
    """Where an unfinished run goes on from: its newest complete checkpoint, if the run
    was made with this config (or one with fewer updates); None (start clean) otherwise."""
    try:
        stored = yaml.safe_load((directory / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    if not isinstance(stored, dict) or not goes_on(stored, config):
        say("an unfinished attempt with another config; starting again")
        return None
    if warm_source_changed(directory, config):
        say(f"an unfinished attempt from {config['train_from']} as it was before it changed; starting again")
        return None
    return newest_complete_checkpoint(directory, say)


def execute_run(experiment, run, files, progress):
    """Run one grid point unless finished, going on from where an interrupted attempt
    stopped; returns its record (finished or failed). What is stored decides (state.run_state)."""
    directory = run_dir(experiment, run)
    config = run_config(experiment, run, files)
    state = run_state(directory, config, experiment, experiment.data[run.data])
    if state.kind == "finished":
        progress.say("finished before; skipped")
        return state.record
    if state.kind in ("warm_source_changed", "other_settings"):
        return {"id": run.id, "status": "failed", "error": state.why, "log": str(directory / RESULT)}
    if state.kind == "evaluated_otherwise":
        saved = saved_checkpoints(directory)
        if not saved or checkpoint_step(saved[-1]) < config.get("train_steps", curves.DEFAULT_TRAIN_STEPS):
            return {"id": run.id, "status": "failed", "log": str(directory / RESULT),
                    "error": f"{state.why}; but its last checkpoint is gone: remove that folder to run it again"}
    if state.kind in ("unreadable", "more_updates", "evaluated_otherwise"):
        progress.say(state.why)
        (directory / RESULT).unlink(missing_ok=True)  # unreadable: it, or the failure.json, goes
    resume_from = resume_point(directory, config, progress.say) if directory.exists() else None
    if resume_from is None and directory.exists():  # nothing to go on from: start clean
        shutil.rmtree(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / FAILURE).unlink(missing_ok=True)
    try:
        result = RunExecutor(experiment, run, files, directory, progress).execute(config, resume_from)
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
            if experiments.needs_target_phrases(run.config):
                prepare_phrases(prepared[run.data], data_dir(experiment, run.data), progress.say)
            record = execute_run(experiment, run, prepared[run.data], progress)
        except (OSError, ValueError) as error:  # the data of this setting is unusable
            record = {"id": run.id, "status": "failed", "error": f"data: {error}", "log": None}
        progress.end_run(record["status"])
        if record["status"] == "failed":
            where = f"; log: {record['log']}" if record.get("log") and str(record["log"]) not in record["error"] else ""
            progress.say(f"FAILED: {record['error']}{where}")
        records.append(record)
    return records


def check_data_files(experiment, runs):
    """The files of every data setting the runs use, before the first run: present, UTF-8,
    not empty, and as many lines in each file of a pair (preflight's corpus checks)."""
    from onmt_posenc.hooks import preflight

    for label in dict.fromkeys(run.data for run in runs):
        setting = experiment.data[label]
        if setting.synthetic is not None:
            continue
        pairs = {"train": setting.train, "valid": setting.valid, **{f"eval.{n}": p for n, p in setting.eval_sets.items()}}
        for name, pair in pairs.items():
            if pair is None:
                continue
            files = {"src": pair.src, "tgt": pair.tgt, **({"ref": pair.ref} if pair.ref else {})}
            for key, path in files.items():
                if not path.is_file():
                    what = "is a folder, not a file" if path.is_dir() else "does not exist"
                    raise experiments.ExperimentError(f"{experiment.path}: data.{label}.{name}: {path} {what}")
            for other in ("tgt", "ref"):  # the reference is checked as the target of the pair
                if other in files:
                    try:
                        preflight.check_corpus_text(name, files, keys=("src", other))
                    except preflight.PreflightError as error:
                        problem = str(error).removeprefix(f"corpus '{name}': ")
                        raise experiments.ExperimentError(f"{experiment.path}: data.{label}.{name}: {problem}") from None
            lines = scan_text(pair.src)[0]
            if pair.lines and lines < pair.lines:  # "the first N lines" of fewer
                raise experiments.ExperimentError(
                    f"{experiment.path}: data.{label}.{name}.lines: {pair.lines}, but {pair.src} has {lines} lines; "
                    "lower it, or leave it out for the whole file")


def write_shard_record(experiment, shard, records):
    """A shard's record, shard-I-of-N.json, which `onmt-posenc report` reads beside the runs."""
    write_json(experiment.output / f"shard-{shard[0]}-of-{shard[1]}.json",
               [{k: r.get(k) for k in ("id", "status", "error", "log")} for r in records])


