"""Where an experiment's runs and data live on disk, and how they are read and written.

Both the runner (which writes runs) and the report (which only reads them) use
this module; neither imports the other.

    <output>/data/<data setting>/              prepared files of a data setting (prepare_data)
    <output>/<data>/<method>/seed<n>/          one run: config.yaml, logs/, hyp/, analyses/
        result.json                            written last: the run is finished
        failure.json                           the run failed (error and log)
        warm_start.json                        warm_start: which model the run started from
"""
import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import NamedTuple

from onmt_posenc.core import joining as interpolate
from onmt_posenc.data import synthetic
from onmt_posenc.core.scoring import LANGUAGE_TOKENIZERS
from onmt_posenc.experiments.spec import RUNNER_KEYS, FilePair, data_setting_keys, needs_target_phrases
from onmt_posenc.core.text import read_lines

RESULT = "result.json"
# a finished run's model: its last checkpoints averaged, the model evaluated
AVERAGED = "averaged.pt"
# the corpus of single pairs that `single_pairs` mixes into INTERPOLATE's joined ones
SINGLE_PAIRS_CORPUS = "train_single_pairs"
FAILURE = "failure.json"
# warm_start: the SHA-256 of the source model when the run started from it
WARM_START = "warm_start.json"


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


class Maybe(NamedTuple):
    """In a FORM: a key that may be absent (`null` too where `null` is true)."""
    form: object
    null: bool = False


class Each(NamedTuple):
    """In a FORM: a JSON object with any keys, every value of this form."""
    form: object


NUMBER = (int, float)
_NAMES = {str: "a string", int: "an integer", NUMBER: "a number", bool: "true or false", dict: "a JSON object",
          list: "a list"}
# What the report and the claims read of a stored file, to find a broken one when it is
# read rather than in every use: a type, {key: form} (a JSON object with these keys),
# [form] (a list of such), Each(form) or Maybe(form).
RECORD = {  # result.json or failure.json
    "status": str, "error": Maybe(str), "log": Maybe(str, null=True),
    "bleu": Maybe(Each(NUMBER)), "length_ratio": Maybe(Each(NUMBER)), "chrf": Maybe(Each(NUMBER)),
    "bleu_details": Maybe(Each({"chrf": NUMBER, "brevity_penalty": NUMBER, "precisions": [NUMBER]})),
    "joined": Maybe(Each({"lines": int, "sentences": int, "bleu": NUMBER, "separator_mismatches": int})),
    "training_speed": Maybe({"tokens_per_second": NUMBER}, null=True),
    "train_seconds": Maybe(NUMBER), "seconds": Maybe(NUMBER),
    "machine": Maybe({"cpu": str, "cores": Maybe(int, null=True), "gpus": Maybe([str]), "torch": str}, null=True),
    "device_sharing": Maybe({"other_trainings": Maybe(int, null=True), "load_average": Maybe(NUMBER, null=True),
                             "cores": Maybe(int, null=True)}, null=True),
    "curve": Maybe({"valid": Maybe([{"step": int, "ppl": NUMBER, "bleu": Maybe(NUMBER)}])}, null=True),
    "convergence": Maybe({"converged": Maybe(bool, null=True), "why": str}, null=True),
    "analyses": Maybe(Each(str)), "analysis_errors": Maybe(Each(str)), "config": Maybe(dict, null=True),
}
FINISHED = {"bleu": Each(NUMBER), "bleu_signature": str, "config": dict}  # besides RECORD
ANALYSES = {
    "length_buckets": Each({"buckets": [str], "counts": [int], "max_train_length": Maybe(int, null=True),
                            "bleu": [NUMBER], "length_ratio": [NUMBER]}),
    "shift_invariance": {"offsets": [int], "matrix": [[NUMBER]], "mean_off_diagonal": NUMBER,
                         "absolute_positions": bool},
    "position_ablation": {"removed_from": [str], "encoder_cosine": NUMBER, "decoder_cosine": NUMBER,
                          "perplexity_kept": NUMBER, "perplexity_removed": NUMBER,
                          "conditions": Maybe(Each({"encoder_cosine": NUMBER, "decoder_cosine": NUMBER,
                                                    "perplexity": NUMBER})),
                          "yardsticks": Maybe({"random_mean": NUMBER, "random_std": NUMBER, "dim": int,
                                               "encoder_other_token": NUMBER, "decoder_other_token": NUMBER})},
    "token_nll": {"nll": [Maybe([NUMBER], null=True)], "frequency": Maybe([[int]])},
    # {set: result}
    "swapped": Each({"applicable": bool, "examples": int, "original": Maybe(NUMBER), "swapped": Maybe(NUMBER),
                     "drop": Maybe(NUMBER), "wrong_separators": Maybe(NUMBER), "why": Maybe(str),
                     "aligned": Maybe({"original": NUMBER, "swapped": NUMBER, "drop": NUMBER})}),
}


def form_problem(value, form, where=""):
    """Why `value` (read from JSON) does not have `form`, or None."""
    if isinstance(form, Maybe):
        return None if value is None and form.null else form_problem(value, form.form, where)
    container = dict if isinstance(form, (dict, Each)) else list if isinstance(form, list) else form
    if not isinstance(value, container):
        return f"{where + ': ' if where else ''}must be {_NAMES[container]}, got {shown(value)}"
    if isinstance(form, dict):
        missing = [key for key, inner in form.items() if key not in value and not isinstance(inner, Maybe)]
        if missing:
            return f"{_inside(where, missing[0])}: missing"
        inner = [(value[key], form[key], _inside(where, key)) for key in form if key in value]
    elif isinstance(form, Each):
        inner = [(item, form.form, _inside(where, key)) for key, item in value.items()]
    elif isinstance(form, list):
        inner = [(item, form[0], f"{where}[{i}]") for i, item in enumerate(value)]
    else:
        return None
    return next(filter(None, (form_problem(*each) for each in inner)), None)


def _inside(where, key):
    return f"{where}.{key}" if where else f"{key}"


def shown(value):
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:36] + " ..."


def record_problem(record):
    """Why a stored run record (result.json, failure.json) is of no use to the report, or None."""
    problem = form_problem(record, RECORD)
    if problem is None and record["status"] == "finished":
        problem = form_problem(record, FINISHED)
    if problem is not None:
        return problem
    if record["status"] not in ("finished", "failed"):
        return f"status: must be finished or failed, got {shown(record['status'])}"
    unscored = set(record.get("joined") or {}) - set(record.get("bleu") or {})
    if unscored:
        return f"joined: names {sorted(unscored)}, which bleu does not"
    if record.get("training_speed") and "train_seconds" not in record:
        return "train_seconds: missing (training_speed needs it)"
    if (record.get("curve") or {}).get("valid") and not record.get("convergence"):
        return "convergence: missing (curve.valid needs it)"
    return None


def analysis_problem(name, stored):
    """Why a stored analysis is of no use to the report, or None."""
    problem = form_problem(stored, ANALYSES[name])
    if problem is not None:
        return problem
    if name == "swapped":
        for where, result in stored.items():
            needed = ("original", "swapped", "drop") if result["applicable"] else ("why",)
            missing = [key for key in needed if result.get(key) is None]
            if missing:
                return f"{where}.{missing[0]}: missing"
    if name == "length_buckets":
        for where, result in stored.items():
            if any(len(result[key]) != len(result["buckets"]) for key in ("counts", "bleu", "length_ratio")):
                return f"{where}: counts, bleu and length_ratio must have one value per bucket"
    if name == "shift_invariance":
        size = len(stored["offsets"])
        if not size or len(stored["matrix"]) != size or any(len(row) != size for row in stored["matrix"]):
            return "matrix: must have one row and one column per offset"
    return None


def read_stored(path, analysis=None):
    """A stored result (result.json, failure.json, an analysis): its value, or None and
    why it cannot be read (a write cut short, an edit gone wrong) or used. A run record
    (by its file name) is checked against RECORD, the analysis `analysis` against its
    ANALYSES form, so that one broken file leaves its run, or its analysis, out
    instead of stopping the report (or the runner) in the middle."""
    try:
        value = read_json(path)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        return None, f"{path} cannot be read ({type(error).__name__}: {error})"
    if Path(path).name in (RESULT, FAILURE):
        problem = record_problem(value)
    else:
        problem = analysis_problem(analysis, value) if analysis in ANALYSES else None
    if problem is not None:
        return None, f"{path} cannot be used ({problem})"
    return value, None


def read_analysis(record, name):
    """An analysis a run stored (record: its result, with the `dir` the report adds)."""
    return read_json(Path(record["dir"]) / record["analyses"][name])


def run_dir(experiment, run):
    return experiment.output / run.id


def data_dir(experiment, data):
    """Where a data setting's prepared files go (see prepare_data)."""
    return experiment.output / "data" / data


def run_fields(run):
    """What names a run in its result, its failure and the report."""
    return {"id": run.id, "data": run.data, "method": run.method, "label": run.label, "K": run.shift,
            "seed": run.seed}


def settings_of(config):
    """What a run's OpenNMT-py config says about the experiment: all but the paths the
    runner sets inside the output folder (its runs' files, the copies of cut corpora),
    so that a moved or copied output folder holds the same runs. Corpora elsewhere
    stay as they are: other files are another run. Which GPU a run trains on
    (`gpu_ranks`) is the machine's, stored in its result's `machine`, not the
    experiment's: a run made on CPU and one made with `--set settings.gpu_ranks=[0]`
    are the same run (`world_size` stays: it multiplies the batch)."""
    settings = {key: value for key, value in config.items() if key not in (*RUNNER_KEYS, "gpu_ranks")}
    if "save_model" not in config:
        return {**settings, "data": config.get("data"), "train_from": config.get("train_from")}
    output = Path(config["save_model"]).parents[3]  # <output>/<data>/<method>/seed<n>/model

    def inside_output(path):
        path = Path(path)
        return f"<output>/{path.relative_to(output).as_posix()}" if path.is_relative_to(output) else str(path)

    if config.get("train_from"):  # warm_start: the model the run started from is part of what it is
        settings["train_from"] = inside_output(config["train_from"])
    settings["data"] = {name: {key: inside_output(value) if key.startswith("path_") else value
                               for key, value in corpus.items()}
                        for name, corpus in (config.get("data") or {}).items()}
    return settings


def is_stale(record, config):
    """A finished run whose stored config has other settings than `config` (what the
    experiment file makes now)."""
    return settings_of(record.get("config") or {}) != settings_of(config)


def file_digest(path):
    """SHA-256 of a file's bytes, None where there is no file."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except FileNotFoundError:
        return None
    return digest.hexdigest()


def warm_source_changed(directory, config):
    """Has the model a warm-started run started from changed since (its source trained
    further, trained again, or removed)? Its identity names that model by path only, so
    the run keeps the model's digest (WARM_START) and compares; without it, nothing
    vouches for the model it started from."""
    if not config.get("train_from"):
        return False
    if not (Path(directory) / WARM_START).is_file():
        return True
    try:
        stored = read_json(Path(directory) / WARM_START).get("sha256")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return True  # unreadable: nothing vouches for the model it started from
    return stored != file_digest(config["train_from"])


def evaluation_of(experiment, setting):
    """What a run's scores and analyses depend on besides its model: the evaluation sets
    (each file's SHA-256, the lines taken and joined; a synthetic task's parameters), the
    translate options (but the GPU), the checkpoints averaged and the analyses' options. Stored in
    result.json; a finished run whose evaluation is not what the file makes now is
    evaluated again from its checkpoints (runner), stale until then (report)."""
    sets = {name: {"src": file_digest(pair.src), "tgt": file_digest(pair.tgt),
                   "ref": file_digest(pair.ref) if pair.ref else None,
                   "lines": pair.lines, "join": setting.interpolate or pair.join,
                   # the documents that bound joined lines
                   **({"docids": file_digest(pair.docids)} if pair.docids and (setting.interpolate or pair.join)
                      else {})}
            for name, pair in setting.eval_sets.items() if pair is not None}  # synthetic: generated later
    # which GPU translates (`gpu`) is the machine's, as gpu_ranks is in settings_of
    translate = {key: value for key, value in experiment.translate.items() if key != "gpu"}
    evaluation = {"sets": sets, "synthetic": setting.synthetic.__dict__ if setting.synthetic else None,
                  "translate": translate, "average_last": experiment.average_last,
                  "analyses": experiment.analyses}
    if setting.target_language in LANGUAGE_TOKENIZERS:  # scored with another tokenizer than 13a
        evaluation["target_language"] = setting.target_language
    return json.loads(json.dumps(evaluation, default=str))  # as result.json will read it back


def evaluated_otherwise(record, experiment, setting):
    """Was a finished run evaluated with other evaluation settings than the file's now
    (or without them recorded)?"""
    return record.get("evaluation") != evaluation_of(experiment, setting)


def phrase_file(directory):
    """Where a data setting's target phrases live (prepare_phrases writes them)."""
    return Path(directory) / "train.tgt.phrases"


def corpora(setting, files, transforms, phrases=None):
    """The `data` of a run's OpenNMT-py config: the setting's files with its transforms
    after the config's own `transforms` (tokenization, say). EXTRAPOLATE filters the
    training corpus only (dev unchanged, as in the paper); INTERPOLATE joins the
    training and the validation corpus; with `single_pairs: W`, the training files are
    also read as a second corpus of single pairs, W of them drawn per joined example
    (OpenNMT-py's corpus weights W:1, about as many tokens of each when W is the number
    joined). On a small corpus a Transformer trained on joined pairs alone may never learn
    to align them (Bao et al. 2021, G-Transformer, section 3): on Multi30k, 2+2 layers,
    validation perplexity stopped at 71-73 (22 for single sentences) and BLEU at 4.
    `phrases`: phrase-level perSPE's file of the training target's phrases, read by the
    `tgt_phrases` transform, last (it must see the target as the model reads it)."""
    plain, train, valid = list(transforms), list(transforms), list(transforms)
    if setting.extrapolate:
        train.append("filtertoolong")
    if setting.interpolate:
        train.append("concat_pairs")
        valid.append("concat_pairs")
    # INTERPOLATE within documents, where the files have document ids (concat_pairs' path_docids)
    documents = {part: {interpolate.DOCIDS_KEY: str(path)} for part, path in files["docids"].items()
                 if path is not None and setting.interpolate}
    pair = {"path_src": str(files["train"][0]), "path_tgt": str(files["train"][1])}
    data = {"train": {**pair, "transforms": train, **documents.get("train", {})}}
    if phrases is not None:
        data["train"].update(path_tgt_phrases=str(phrases), transforms=train + ["tgt_phrases"])
    if setting.single_pairs:
        data["train"]["weight"] = 1
        data[SINGLE_PAIRS_CORPUS] = {**pair, "transforms": plain, "weight": setting.single_pairs}
    if files["valid"]:
        data["valid"] = {"path_src": str(files["valid"][0]), "path_tgt": str(files["valid"][1]), "transforms": valid,
                         **documents.get("valid", {})}
    return data


def run_config(experiment, run, files):
    """The run's OpenNMT-py config: its keys plus what the runner owns (corpora, the
    data setting's transform options, vocabularies, save_model, and with warm_start
    `train_from`: the model it starts from, which the runner loads with a new optimizer
    and this run's vocabulary, see runner.RunExecutor.execute)."""
    setting, directory = experiment.data[run.data], run_dir(experiment, run)
    config = {key: value for key, value in run.config.items() if key not in RUNNER_KEYS}
    config.update(data_setting_keys(setting))
    phrases = phrase_file(data_dir(experiment, run.data)) if needs_target_phrases(config) else None
    config.update(
        data=corpora(setting, files, config.get("transforms") or [], phrases),
        save_data=str(directory / "samples"),
        src_vocab=str(directory / "vocab.src"),
        save_model=str(directory / "model"),
        overwrite=True,
    )
    if not config.get("share_vocab"):
        config["tgt_vocab"] = str(directory / "vocab.tgt")
    if experiment.tensorboard:  # one folder per run: shards never write into each other's
        config.update(tensorboard=True, tensorboard_log_dir=str(directory / "tensorboard"))
    source = experiment.warm_start_source(run)
    if source is not None:
        config["train_from"] = str(run_dir(experiment, source) / AVERAGED)
    return config


class EvalSet(NamedTuple):
    src: Path
    tgt: Path  # what the model reads (teacher forcing)
    ref: Path  # what BLEU compares with


def _require_file(path):
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}")


def _copy_lines(pair, directory, name, join):
    """The files of `pair` in `directory`, cut to their first `lines` and joined `join` per
    line, within the documents of its document ids (copied, cut, where not joined)."""
    copies, counts = {}, None
    for side in ("src", "tgt", "ref", *(() if join else ("docids",))):
        source = getattr(pair, side)
        if source is None:
            continue
        _require_file(source)
        whole = read_lines(source)
        lines = whole[: pair.lines]
        if join:
            if side == "src":
                interpolate.check_no_separator(lines, source, interpolate.DEFAULT_SEP)
            documents = None
            if pair.docids is not None:
                _require_file(pair.docids)
                documents = interpolate.read_docids(pair.docids, len(whole), source)[: len(lines)]
            lines = interpolate.join_lines(lines, join, interpolate.DEFAULT_SEP, documents)
        if not lines:
            raise ValueError(f"evaluation set {name}: {source} has no lines")
        if copies and len(lines) != counts:
            raise ValueError(f"evaluation set {name}: {source} has {len(lines)} lines where {pair.src} has {counts}")
        counts = len(lines)
        copies[side] = directory / f"{name}.{side}"
        write_text_atomically(copies[side], "".join(line + "\n" for line in lines))
    return EvalSet(copies["src"], copies["tgt"], copies.get("ref", copies["tgt"]))


def corpus_files(setting, directory):
    """The training and validation files of a data setting where prepare_data puts or
    finds them, without writing anything: {"train": (src, tgt), "valid": (src, tgt) or None,
    "docids": {"train": path or None, "valid": path or None}}."""
    directory = Path(directory)

    def place(pair, name):
        cut = setting.synthetic is not None or pair.lines
        return (directory / f"{name}.src", directory / f"{name}.tgt") if cut else (pair.src, pair.tgt)

    def documents(pair, name):
        if pair is None or pair.docids is None:
            return None
        return directory / f"{name}.docids" if pair.lines else pair.docids

    if setting.synthetic is not None:
        return {"train": place(None, "train"), "valid": place(None, "valid"), "docids": {"train": None, "valid": None}}
    return {"train": place(setting.train, "train"), "valid": place(setting.valid, "valid") if setting.valid else None,
            "docids": {"train": documents(setting.train, "train"), "valid": documents(setting.valid, "valid")}}


def prepare_data(setting, directory):
    """The files of a data setting: {"train": (src, tgt), "valid": (src, tgt) or None,
    "eval": {name: EvalSet}}.

    Synthetic data is generated here (once: the same task writes the same files).
    Evaluation sets are written into `directory`, cut to their `lines` and, in
    an INTERPOLATE setting, joined N sentences per line. Training and validation
    files are used in place unless cut: the runner's OpenNMT-py config applies
    the data setting's transforms to them (see corpora)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "eval").mkdir(exist_ok=True)
    if setting.synthetic is not None:
        marker = directory / "task.json"
        wanted = json.dumps(setting.synthetic.__dict__, sort_keys=True)
        if not marker.is_file() or marker.read_text(encoding="utf-8") != wanted:
            synthetic.write_corpus(directory, setting.synthetic)
            write_text_atomically(marker, wanted)

        def generated(name):
            return FilePair(directory / f"{name}.src", directory / f"{name}.tgt")

        setting = dataclasses.replace(setting, train=generated("train"), valid=generated("valid"),
                                      eval_sets={name: generated(name) for name in synthetic.EVAL_SETS})
    for name, pair in (("train", setting.train), ("valid", setting.valid)):
        if pair is not None and pair.lines:
            _copy_lines(pair, directory, name, None)
    files = corpus_files(setting, directory)
    for path in [*(path for part in ("train", "valid") for path in files[part] or ()),
                 *filter(None, files["docids"].values())]:
        _require_file(path)
    return {**files, "eval": {name: _copy_lines(pair, directory / "eval", name, setting.interpolate or pair.join)
                              for name, pair in setting.eval_sets.items()}}


def prepare_phrases(files, directory, say):
    """The phrase file of a data setting's training target (`onmt-posenc chunk-ja`'s), made
    once and made again when the target changes (its SHA-256 is kept beside it)."""
    from onmt_posenc.data.chunk_japanese import chunk_file

    target, phrases = files["train"][1], phrase_file(directory)
    digest, stamp = file_digest(target), phrases.with_suffix(".sha256")
    if phrases.is_file() and stamp.is_file() and stamp.read_text(encoding="utf-8").strip() == digest:
        return phrases
    say(f"target phrases of {target} for perSPE (chunk-ja)")
    temporary = phrases.with_name(f".{phrases.name}.{os.getpid()}.tmp")
    chunk_file(target, temporary)
    os.replace(temporary, phrases)
    write_text_atomically(stamp, digest + "\n")
    return phrases


def longest_training_source(directory):
    """The longest source a run trained on, in tokens, from the training corpus that
    `onmt_build_vocab -dump_samples` wrote as the transforms made it (after
    EXTRAPOLATE's filter, INTERPOLATE's joining and any tokenization)."""
    samples = sorted(Path(directory, "sample").glob("*.src"))
    if not samples:
        raise FileNotFoundError(f"no training samples in {Path(directory, 'sample')}; onmt_build_vocab writes "
                                "them with -dump_samples")
    return max(len(line.split()) for path in samples for line in read_lines(path))
