"""`onmt-posenc run EXPERIMENT.yaml`: every run of an experiment's grid, then the report.

Each run lives in <output>/<data>/<label>/seed<n>/ (the label: the method's name, with
-K<K> where the grid gives K) and goes through the stock OpenNMT-py commands, as a user
would call them:

    config.yaml      the run's OpenNMT-py config (see onmt_posenc.experiments.file.spec)
    onmt_build_vocab -config config.yaml -n_sample -1 -dump_samples   (sample/: the corpus as trained on)
    onmt_train -config config.yaml
    onmt_average_models -models <the last checkpoints> -output averaged.pt
    onmt_translate -config translate.yaml -model averaged.pt -src <set> -output hyp/<set>.txt
    BLEU of every evaluation set (sacreBLEU), then the per-run analyses
    translations/<set>.json.gz   each set's translations, source lengths and reference's SHA-256
                     (records.write_translations: what a resample of its sentences needs)
    variants/<name>/ each evaluation variant that applies to the run (evaluation.variants): its
                     translate.yaml, hyp/, translations/ and analyses/ (VARIANT_ANALYSES), its
                     scores in the record's `variants`
    result.json      written last: the run is finished

Every command's output goes to logs/<step>.log. A run that fails is reported
with its log and the others go on; re-running the same command skips finished
runs and retries the rest, so an interruption loses no finished run.
`--shard i/n` runs every n-th run only (for n machines or cluster jobs);
`onmt-posenc report` then merges whatever all shards finished into one report.
"""
import shutil
import time
import traceback
from pathlib import Path

import yaml

from onmt_posenc.experiments.file.spec import VARIANT_JOINT, ExperimentError, needs_target_phrases
from onmt_posenc.experiments.running import curves
from onmt_posenc.hooks import stock
from onmt_posenc.model.checkpoints import is_complete
from onmt_posenc.core.scoring import corpus_bleu, is_joined, split_scores
from onmt_posenc.experiments.running.locks import LOCK, RunLock, waiting_for
from onmt_posenc.experiments.running.data_preparation import (corpus_files, longest_training_example, prepare_data,
                                                              prepare_phrases)
from onmt_posenc.experiments.running.opennmt_config import run_config
from onmt_posenc.experiments.running.progress import DeviceWatch, Progress, machine, train_progress
from onmt_posenc.experiments.running.records import (TRANSLATIONS, VARIANTS, read_stored, where_its_log_is,
                                                      write_translations)
from onmt_posenc.experiments.running.analyses import VARIANT_ANALYSES, RunAnalyses
from onmt_posenc.experiments.running.checkpoints import keep_newest, resume_point
from onmt_posenc.experiments.running.state import evaluation_of, interrupted_why, run_state, trained_on, training_data_of
from onmt_posenc.experiments.running.store import (AVERAGED, FAILURE, INTERRUPTED, RESULT, TRAINING_DATA, WARM_START,
                                                   checkpoint_step, data_dir, file_digest, run_dir, run_fields,
                                                   read_json, saved_checkpoints, write_json, write_text_atomically)
from onmt_posenc.core.text import read_lines, scan_text

# The seconds onmt_build_vocab took, in the run's folder
VOCAB_SECONDS = "logs/build_vocab_seconds.json"
# Whether training shared the machine (DeviceWatch), over every invocation of onmt_train
DEVICE = "logs/device_sharing.json"


class RunExecutor:
    """Everything one run does, step by step; raises on the first failing step."""

    def __init__(self, experiment, run, files, run_dir, progress, lock):
        self.experiment, self.run, self.files = experiment, run, files
        self.dir, self.progress = Path(run_dir), progress
        self.logs = self.dir / "logs"
        # the stock commands hold the run's lock too: one left running by a runner that died
        # (killed alone, not its process group) keeps the run from the next runner until it ends
        self.keep_open = (lock.fileno(),)

    def stock(self, name, args, log_name, on_line=None, append=False):
        stock.run_logged(name, args, self.logs / f"{log_name}.log", on_line, append, self.keep_open)

    def translate(self, src, output, variant=None):
        """onmt_translate of `src` into `output` with the run's options, or with an evaluation
        variant's (its folder's translate.yaml)."""
        folder = self.dir if variant is None else self.dir / VARIANTS / variant
        log = self.logs / f"translate_{Path(output).stem}{'' if variant is None else VARIANT_JOINT + variant}.log"
        return stock.translate(self.dir / AVERAGED, src, output, log, folder / "translate.yaml", self.keep_open)

    def evaluate(self, variant=None):
        """Every translated set translated, scored and kept (write_translations), by the run's
        options or an evaluation variant's, in the run's folder or the variant's: (scores, hyps)."""
        folder = self.dir if variant is None else self.dir / VARIANTS / variant
        (folder / "hyp").mkdir(parents=True, exist_ok=True)
        scores, hyps = {}, {}
        for name in self.experiment.translated_sets:
            files = self.files["eval"][name]
            self.progress.say(f"translate {name}" + ("" if variant is None else f" ({variant})"))
            hyps[name] = read_lines(self.translate(files.src, folder / "hyp" / f"{name}.txt", variant))
            scores[name] = self.score(hyps[name], read_lines(files.ref),
                                      self.experiment.data[self.run.data].target_language)
            write_translations(folder / TRANSLATIONS / f"{name}.json.gz", hyps[name], read_lines(files.src),
                               files.ref)
        self.progress.say("BLEU " + ("" if variant is None else f"({variant}) ")
                          + ", ".join(f"{name} {score['bleu']:.2f}" for name, score in scores.items()))
        return scores, hyps

    def evaluate_variant(self, name, variant):
        """An evaluation variant's record: the translated sets translated with its options over the
        evaluation's, scored, kept, and analysed by VARIANT_ANALYSES, all in variants/<name>/.
        Rotary rescaling takes the run's longest training source as L_train unless the variant
        gives one: the length the report's buckets and split are relative to."""
        folder = self.dir / VARIANTS / name
        options = {**self.experiment.translate, **variant.translate}
        if "rotary_scaling" in options:
            options.setdefault("rotary_training_length", self.longest_source)
        folder.mkdir(parents=True, exist_ok=True)
        write_text_atomically(folder / "translate.yaml", yaml.safe_dump(options, sort_keys=False))
        scores, hyps = self.evaluate(name)
        analyses, errors = RunAnalyses(self.experiment, self.run, self.files, self.dir, self.progress, self.translate,
                                       self.longest_source, name, options).run_all(hyps, VARIANT_ANALYSES)
        return {"translate": options, **scored(scores, f"{VARIANTS}/{name}/"), "analyses": analyses,
                "analysis_errors": errors}

    def execute(self, config, resume_from=None):
        """The run from its start, or from the checkpoint `resume_from` on (OpenNMT-py's
        train_from: weights, optimizer state and step; the vocabulary is already built)."""
        started = time.time()
        # written again on resuming: the same settings, with the files where they are now
        write_text_atomically(self.dir / "config.yaml", yaml.safe_dump(config, sort_keys=False))
        if resume_from is None:
            write_json(self.dir / TRAINING_DATA, training_data_of(config))
            self.progress.say("build vocabulary")
            # -dump_samples: the training corpus as the transforms made it, in sample/, to check what was trained on
            # join_training: from the single pairs (join_adjacent_max 1), so that the vocabulary is the one
            # the same setting without joining builds (the longest joined example is measured on the
            # corpus: longest_training_example)
            single = ["-join_adjacent_max", "1"] if self.experiment.data[self.run.data].join_training else []
            self.stock("onmt_build_vocab", ["-config", self.dir / "config.yaml", "-n_sample", "-1", "-dump_samples",
                                            *single], "build_vocab")
            # kept for the run's wall time when a later invocation finishes it
            write_json(self.dir / VOCAB_SECONDS, round(time.time() - started, 1))
        write_text_atomically(self.dir / "translate.yaml", yaml.safe_dump(self.experiment.translate, sort_keys=False))
        # what the analyses' buckets call seen: the longest example of each side, joins included
        self.longest_example = longest_training_example(self.dir, config)
        self.longest_source = self.longest_example["source"]
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
                # options are the source's, see checks.check_options), not the source's
                self.warm_start(Path(config["train_from"]))
                write_json(self.dir / WARM_START, {"from": config["train_from"], "sha256": file_digest(config["train_from"])})
                args += ["-reset_optim", "all", "-update_vocab", "-override_opts"]
            self.progress.start_training(checkpoint_step(resume_from) if resume_from else 0)
            watch = DeviceWatch()
            try:
                self.stock("onmt_train", args, "train", train_progress(self.progress, watch),
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
        scores, hyps = self.evaluate()
        analyses, errors = RunAnalyses(self.experiment, self.run, self.files, self.dir, self.progress, self.translate,
                                       self.longest_source).run_all(hyps)
        variants = {name: self.evaluate_variant(name, variant)
                    for name, variant in self.experiment.variants_of(self.run).items()}
        curve = curves.read(self.logs / "train.log", config.get("valid_steps", curves.DEFAULT_VALID_STEPS))
        vocab_seconds, _ = read_stored(self.dir / VOCAB_SECONDS)
        evaluation_seconds = time.time() - evaluation_started
        return {
            **run_fields(self.run), "status": "finished", **scored(scores),
            **({"variants": variants} if variants else {}),
            "bleu_signature": next(iter(scores.values()))["signature"],
            "chrf_signature": next(iter(scores.values()))["chrf_signature"],
            "training_speed": curves.training_speed(self.logs / "train.log"),
            "curve": curve, "convergence": curves.convergence(curve["valid"]),
            "resumed_from": checkpoint_step(resume_from) if resume_from else None,
            "evaluation": evaluation_of(self.experiment, self.run),
            # what it trained on: as it started (an attempt started before that was kept: as it ends)
            "training_data": trained_on(self.dir) or training_data_of(config),
            "machine": machine(),
            "device_sharing": read_stored(self.dir / DEVICE)[0] if (self.dir / DEVICE).is_file() else None,
            "longest_training_source": self.longest_source,
            "longest_training_example": self.longest_example,
            "checkpoints_averaged": [p.name for p in averaged],
            # the model evaluated, and the one it started from: a run that starts from this one
            # names it by this digest (provenance of warm starts, in the records alone)
            "model_sha256": file_digest(self.dir / AVERAGED),
            "warm_start": self.warm_start_record(),
            # every invocation of the run added up (a resumed run: its earlier attempts too)
            "train_seconds": curve["train_seconds"],
            "seconds": round((vocab_seconds if isinstance(vocab_seconds, (int, float)) else 0)
                             + curve["train_seconds"] + evaluation_seconds, 1),
            "analyses": analyses, "analysis_errors": errors, "config": config,
        }

    def warm_start_record(self):
        """{source: the run's id, from: the model's path, sha256: its digest as this run started
        from it} of a warm-started run (None for any other)."""
        if not (self.dir / WARM_START).is_file():
            return None
        return {"source": self.experiment.warm_start_source(self.run).id, **read_json(self.dir / WARM_START)}

    def warm_start(self, model):
        """Check that the run this one starts from has finished with the file's settings."""
        experiment, where = self.experiment, f"data.{self.run.data}.warm_start"
        source = experiment.warm_start_source(self.run)
        setting = experiment.data[source.data]
        config = run_config(experiment, source, corpus_files(setting, data_dir(experiment, source.data)))
        # its model as trained with the file's settings (evaluated otherwise: the same model)
        if run_state(run_dir(experiment, source), config, experiment, source).kind not in ("finished",
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
        lines with the wrong separators. `language`: the target's (scoring.bleu_tokenizer)."""
        bleu = corpus_bleu(hyps, refs, language=language)
        score = {"bleu": bleu.score, "length_ratio": bleu.length_ratio, "signature": bleu.signature,
                 "chrf": bleu.chrf, "chrf_signature": bleu.chrf_signature, "details": bleu.details()}
        if is_joined(refs):
            score["joined"] = split_scores(hyps, refs, language=language)
        return score


def scored(scores, folder=""):
    """A record's scores of each set (RunExecutor.score's) and its translations' files, in the run's
    folder or a variant's (`folder`, relative to the run's)."""
    return {"bleu": {name: score["bleu"] for name, score in scores.items()},
            "chrf": {name: score["chrf"] for name, score in scores.items()},
            "bleu_details": {name: score["details"] for name, score in scores.items()},
            "length_ratio": {name: score["length_ratio"] for name, score in scores.items()},
            "joined": {name: score["joined"] for name, score in scores.items() if "joined" in score},
            "translations": {name: f"{folder}{TRANSLATIONS}/{name}.json.gz" for name in scores}}


def execute_run(experiment, run, files, progress, command, lock):
    """Run one grid point unless finished, going on from where an interrupted attempt
    stopped; returns its record (finished or failed). What is stored decides (state.run_state).
    `lock`: the run's (locks.RunLock), which this runner holds.
    Stopped by a signal, it stores where it stopped and `command`, which goes on, and re-raises."""
    directory = run_dir(experiment, run)
    config = run_config(experiment, run, files)
    state = run_state(directory, config, experiment, run)
    if state.kind == "finished":
        progress.say("finished before; skipped")
        return state.record
    if state.kind in ("warm_source_changed", "other_settings", "other_data"):
        return {"id": run.id, "status": "failed", "error": state.why, "log": str(directory / RESULT)}
    if state.kind == "evaluated_otherwise":
        saved = saved_checkpoints(directory)
        if not saved or checkpoint_step(saved[-1]) < config.get("train_steps", curves.DEFAULT_TRAIN_STEPS):
            return {"id": run.id, "status": "failed", "log": str(directory / RESULT),
                    "error": f"{state.why}; but its last checkpoint is gone: remove that folder to run it again"}
    if state.kind == "interrupted":  # resume_point says next whether it goes on or starts again
        progress.say("interrupted before")
    if state.kind in ("unreadable", "more_updates", "evaluated_otherwise"):
        progress.say(state.why)
        (directory / RESULT).unlink(missing_ok=True)  # unreadable: it, or the failure.json, goes
    resume_from = resume_point(directory, config, progress.say)
    if resume_from is None and directory.exists():  # nothing to go on from: start clean, but for
        for path in directory.iterdir():  # the lock this runner holds (a new one would be another's)
            if path.name != LOCK:
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / FAILURE).unlink(missing_ok=True)
    (directory / INTERRUPTED).unlink(missing_ok=True)
    try:
        result = RunExecutor(experiment, run, files, directory, progress, lock).execute(config, resume_from)
    except KeyboardInterrupt:  # Ctrl-C or a scheduler's SIGTERM, while training or evaluating: not a failure
        saved = saved_checkpoints(directory)
        interrupted = {**run_fields(run), "status": "interrupted", "step": checkpoint_step(saved[-1]) if saved else None,
                       "command": command}
        write_json(directory / INTERRUPTED, {**interrupted, "error": interrupted_why(interrupted)})
        raise
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


def run_all(experiment, runs, command):
    """Execute `runs` in order; returns their records. Data is prepared once per setting.
    A run another runner holds (locks) is skipped, its record's status "held".
    `command`: the command line that goes on where this one stops (stored with an interrupted run)."""
    progress = Progress(len(runs))
    prepared, records = {}, []
    for index, run in enumerate(runs, 1):
        progress.start_run(index, run.id)
        lock = RunLock(run_dir(experiment, run))
        unusable = "data"  # what an OSError or ValueError below names: this setting's data, then the run's folder
        try:
            with waiting_for(data_dir(experiment, run.data)):  # made once, by whichever runner comes first
                if run.data not in prepared:
                    prepared[run.data] = prepare_data(experiment.data[run.data], data_dir(experiment, run.data))
                if needs_target_phrases(run.config):
                    prepare_phrases(prepared[run.data], data_dir(experiment, run.data), progress.say)
            unusable = f"run folder {run_dir(experiment, run)}"
            holder = lock.acquire()
            if holder is not None:
                record = {"id": run.id, "status": "held", "error": f"held by another runner ({holder})", "log": None}
                progress.say(record["error"])
                records.append(record)
                continue
            record = execute_run(experiment, run, prepared[run.data], progress, command, lock)
        except (OSError, ValueError) as error:
            record = {"id": run.id, "status": "failed", "error": f"{unusable}: {error}", "log": None}
        finally:
            lock.release()
        progress.end_run(record["status"])
        if record["status"] == "failed":
            progress.say(f"FAILED: {record['error']}{where_its_log_is(record, record['error'])}")
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
                    raise ExperimentError(f"{experiment.path}: data.{label}.{name}: {path} {what}")
            for other in ("tgt", "ref"):  # the reference is checked as the target of the pair
                if other in files:
                    try:
                        preflight.check_corpus_text(name, files, keys=("src", other))
                    except preflight.PreflightError as error:
                        problem = str(error).removeprefix(f"corpus '{name}': ")
                        raise ExperimentError(f"{experiment.path}: data.{label}.{name}: {problem}") from None
            lines = scan_text(pair.src)[0]
            if pair.lines and lines < pair.lines:  # "the first N lines" of fewer
                key = f"{name}.lines" if name != "train" else "train.lines or train_pairs"  # either cuts training
                raise ExperimentError(
                    f"{experiment.path}: data.{label}.{key}: {pair.lines}, but {pair.src} has {lines} lines; "
                    "lower it, or leave it out for the whole file")
            if pair.sample and lines < pair.sample:
                raise ExperimentError(f"{experiment.path}: data.{label}.train_sample: {pair.sample}, but {pair.src} "
                                      f"has {lines} lines; lower it, or leave it out for the whole file")


def write_shard_record(experiment, shard, records):
    """A shard's record, shard-I-of-N.json: its runs' ids and states, for the user or a
    scheduler (`onmt-posenc report` reads the run folders themselves)."""
    write_json(experiment.output / f"shard-{shard[0]}-of-{shard[1]}.json",
               [{k: r.get(k) for k in ("id", "status", "error", "log")} for r in records])


