"""Where an experiment's runs and data live on disk, and how they are read and written.

Both the runner (which writes runs) and the report (which only reads them) use
this module; neither imports the other.

    <output>/data/<data setting>/              prepared files of a data setting (prepare_data)
    <output>/<data>/<method>/seed<n>/          one run: config.yaml, logs/, hyp/, analyses/
        result.json                            written last: the run is finished
        failure.json                           the run failed (error and log)
"""
import dataclasses
import json
import os
from pathlib import Path
from typing import NamedTuple

from onmt_posenc import interpolate, synthetic
from onmt_posenc.experiment import RUNNER_KEYS, FilePair, data_setting_keys

RESULT = "result.json"
FAILURE = "failure.json"


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


def read_stored(path):
    """A stored result (result.json, failure.json, an analysis): its value, or None and
    why it cannot be read (a write cut short, an edit gone wrong)."""
    try:
        return read_json(path), None
    except (OSError, UnicodeDecodeError, ValueError) as error:
        return None, f"{path} cannot be read ({type(error).__name__}: {error})"


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
    stay as they are: other files are another run."""
    settings = {key: value for key, value in config.items() if key not in RUNNER_KEYS}
    if "save_model" not in config:
        return {**settings, "data": config.get("data")}
    output = Path(config["save_model"]).parents[3]  # <output>/<data>/<method>/seed<n>/model

    def inside_output(path):
        path = Path(path)
        return f"<output>/{path.relative_to(output).as_posix()}" if path.is_relative_to(output) else str(path)

    settings["data"] = {name: {key: inside_output(value) if key.startswith("path_") else value
                               for key, value in corpus.items()}
                        for name, corpus in (config.get("data") or {}).items()}
    return settings


def is_stale(record, config):
    """A finished run whose stored config has other settings than `config` (what the
    experiment file makes now)."""
    return settings_of(record.get("config") or {}) != settings_of(config)


def corpora(setting, files, transforms):
    """The `data` of a run's OpenNMT-py config: the setting's files with its transforms
    after the config's own `transforms` (tokenization, say). EXTRAPOLATE filters the
    training corpus only (dev unchanged, as in the paper); INTERPOLATE joins the
    training and the validation corpus."""
    train, valid = list(transforms), list(transforms)
    if setting.extrapolate:
        train.append("filtertoolong")
    if setting.interpolate:
        train.append("concat_pairs")
        valid.append("concat_pairs")
    data = {"train": {"path_src": str(files["train"][0]), "path_tgt": str(files["train"][1]), "transforms": train}}
    if files["valid"]:
        data["valid"] = {"path_src": str(files["valid"][0]), "path_tgt": str(files["valid"][1]), "transforms": valid}
    return data


def run_config(run, setting, files, run_dir):
    """The run's OpenNMT-py config: its keys plus what the runner owns (corpora, the
    data setting's transform options, vocabularies, save_model)."""
    config = {key: value for key, value in run.config.items() if key not in RUNNER_KEYS}
    config.update(data_setting_keys(setting))
    config.update(
        data=corpora(setting, files, config.get("transforms") or []),
        save_data=str(run_dir / "samples"),
        src_vocab=str(run_dir / "vocab.src"),
        save_model=str(run_dir / "model"),
        overwrite=True,
    )
    if not config.get("share_vocab"):
        config["tgt_vocab"] = str(run_dir / "vocab.tgt")
    return config


class EvalSet(NamedTuple):
    src: Path
    tgt: Path  # what the model reads (teacher forcing)
    ref: Path  # what BLEU compares with


def _require_file(path):
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}")


def _copy_lines(pair, directory, name, join):
    """The files of `pair` in `directory`, cut to their first `lines` and joined `join` per line."""
    copies, counts = {}, None
    for side in ("src", "tgt", "ref"):
        source = getattr(pair, side)
        if source is None:
            continue
        _require_file(source)
        lines = interpolate.read_lines(source)[: pair.lines]
        if join:
            if side == "src":
                interpolate.check_no_separator(lines, source, interpolate.DEFAULT_SEP)
            lines = interpolate.join_lines(lines, join, interpolate.DEFAULT_SEP)
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
    finds them, without writing anything: {"train": (src, tgt), "valid": (src, tgt) or None}."""
    directory = Path(directory)

    def place(pair, name):
        cut = setting.synthetic is not None or pair.lines
        return (directory / f"{name}.src", directory / f"{name}.tgt") if cut else (pair.src, pair.tgt)

    if setting.synthetic is not None:
        return {"train": place(None, "train"), "valid": place(None, "valid")}
    return {"train": place(setting.train, "train"), "valid": place(setting.valid, "valid") if setting.valid else None}


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
    for pair in filter(None, files.values()):
        for path in pair:
            _require_file(path)
    return {**files, "eval": {name: _copy_lines(pair, directory / "eval", name, setting.interpolate or pair.join)
                              for name, pair in setting.eval_sets.items()}}


def longest_training_source(directory):
    """The longest source a run trained on, in tokens, from the training corpus that
    `onmt_build_vocab -dump_samples` wrote as the transforms made it (after
    EXTRAPOLATE's filter, INTERPOLATE's joining and any tokenization)."""
    samples = sorted(Path(directory, "sample").glob("*.src"))
    if not samples:
        raise FileNotFoundError(f"no training samples in {Path(directory, 'sample')}; onmt_build_vocab writes "
                                "them with -dump_samples")
    return max(len(line.split()) for path in samples for line in interpolate.read_lines(path))
