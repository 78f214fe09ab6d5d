"""The data settings of an experiment file (`data`): where each one's files come from (its
own train/valid/eval files, a generated task, or a folder) and its design (extrapolate,
interpolate, single_pairs, warm_start)."""
import dataclasses
from dataclasses import fields
from pathlib import Path

from onmt_posenc.data.synthetic import EVAL_SETS, SyntheticTask
from onmt_posenc.experiments.file.data_folder import folder_data
from onmt_posenc.experiments.file.spec import COUNT_KEYS, DataSetting, FilePair, fail
from onmt_posenc.experiments.file.values import check_mapping, check_positive, check_string


def _file_pair(spec, base, path, where):
    spec = check_mapping(spec, path, where)
    unknown = set(spec) - {"src", "tgt", "ref", "lines", "join", "docids"}
    if unknown or not {"src", "tgt"} <= set(spec):
        fail(path, f"{where} needs src and tgt (and optionally ref, lines, join, docids); got {sorted(spec)}")
    for key in ("lines", "join"):
        check_positive(spec.get(key), path, f"{where}.{key}")
    for key in ("src", "tgt", *(key for key in ("ref", "docids") if spec.get(key) is not None)):
        check_string(spec[key], path, f"{where}.{key}")
    ref, docids = ((base / spec[key]).resolve() if spec.get(key) else None for key in ("ref", "docids"))
    return FilePair((base / spec["src"]).resolve(), (base / spec["tgt"]).resolve(), ref,
                    spec.get("lines"), spec.get("join"), docids)


def data_setting(label, spec, base, path, folder=None):
    """A data setting from its mapping; `folder` (--data) replaces where its files come from."""
    spec = check_mapping(spec, path, f"data.{label}")
    known = {"train", "valid", "eval", "synthetic", "folder", "settings", *COUNT_KEYS, "warm_start", "target_language",
             "train_pairs"}
    unknown = set(spec) - known
    if unknown:
        fail(path, f"data.{label}: unknown keys {sorted(unknown)}; known: {sorted(known)}")
    settings = check_mapping(spec.get("settings"), path, f"data.{label}.settings")
    design = {key: check_positive(spec.get(key), path, f"data.{label}.{key}") for key in COUNT_KEYS}
    if design["extrapolate"] and design["interpolate"]:
        fail(path, f"data.{label}: choose extrapolate or interpolate, not both")
    if design["single_pairs"] and not design["interpolate"]:
        fail(path, f"data.{label}.single_pairs mixes single pairs into joined ones: it needs interpolate")
    if spec.get("warm_start") is not None:
        design["warm_start"] = check_string(spec["warm_start"], path, f"data.{label}.warm_start")
    language = spec.get("target_language")
    if language is not None:
        check_string(language, path, f"data.{label}.target_language")
    train_pairs = check_positive(spec.get("train_pairs"), path, f"data.{label}.train_pairs")
    sources = [key for key in ("train", "synthetic", "folder") if key in spec]
    if folder is not None:
        sources, spec = ["folder"], {"folder": str(folder)}
        base = Path.cwd()
    if len(sources) != 1:
        fail(path, f"data.{label} needs one of train (with eval), synthetic or folder; got {sources or 'none'}")
    if sources == ["synthetic"]:
        extra = {"train", "valid", "eval", "train_pairs", "target_language"} & set(spec)
        if extra:
            fail(path, f"data.{label}: a synthetic data setting has no files; remove {sorted(extra)}")
        options = check_mapping(spec["synthetic"], path, f"data.{label}.synthetic")
        known = [f.name for f in fields(SyntheticTask)]
        unknown = [key for key in options if key not in known]
        if unknown:  # `{seed:1}` (no space) is YAML's one key 'seed:1'
            fail(path, f"data.{label}.synthetic: unknown keys {unknown}; known: {known}")
        try:
            task = SyntheticTask(**options)
        except ValueError as error:
            fail(path, f"data.{label}.synthetic: {error}")
        several = {key: getattr(task, key) for key in ("max_sentences", "test_sentences", "concat_sentences")
                   if getattr(task, key) != 1}
        if design["interpolate"] and several:
            fail(path, f"data.{label}: interpolate joins single sentences, but the synthetic task "
                        f"already joins several ({', '.join(f'{k}: {v}' for k, v in several.items())}); set them to 1")
        return DataSetting(label, settings=settings, synthetic=task, eval_sets=dict.fromkeys(EVAL_SETS), **design)
    if sources == ["folder"]:
        extra = {"train", "valid", "eval"} & set(spec)
        if extra:
            fail(path, f"data.{label}: a folder data setting takes its files from the folder; remove {sorted(extra)}")
        spec = folder_data(base / check_string(spec["folder"], path, f"data.{label}.folder"), design["interpolate"], path)
        language = language or spec["target_language"]
    if "eval" not in spec:
        fail(path, f"data.{label} needs eval (the sets to translate and score)")
    eval_sets = {name: _file_pair(pair, base, path, f"data.{label}.eval.{name}")
                 for name, pair in check_mapping(spec["eval"], path, f"data.{label}.eval").items()}
    if not eval_sets:
        fail(path, f"data.{label}.eval names no evaluation set")
    for name, pair in eval_sets.items():
        if design["interpolate"] and pair.join not in (None, design["interpolate"]):
            fail(path, f"data.{label}.eval.{name}.join is {pair.join}, but interpolate joins every "
                        f"evaluation set {design['interpolate']} per line")
    train = _file_pair(spec["train"], base, path, f"data.{label}.train")
    if train_pairs is not None:
        if train.lines is not None:
            fail(path, f"data.{label}: train.lines and train_pairs both cut the training pairs; keep one")
        train = dataclasses.replace(train, lines=train_pairs)
    return DataSetting(
        label,
        train=train,
        valid=_file_pair(spec["valid"], base, path, f"data.{label}.valid") if "valid" in spec else None,
        eval_sets=eval_sets,
        settings=settings,
        target_language=language,
        **design,
    )
