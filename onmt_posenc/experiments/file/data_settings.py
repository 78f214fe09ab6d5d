"""The data settings of an experiment file (`data`): where each one's files come from (its
own train/valid/eval files, a generated task, or a folder) and its design (extrapolate,
interpolate, single_pairs, warm_start)."""
import dataclasses
from pathlib import Path

from onmt_posenc.data.synthetic import EVAL_SETS
from onmt_posenc.experiments.file.data_folder import folder_data
from onmt_posenc.experiments.file.schema import FilePairKeys
from onmt_posenc.experiments.file.spec import COUNT_KEYS, DataSetting, FilePair, fail


def _file_pair(keys, base):
    ref, docids = ((base / name).resolve() if name else None for name in (keys.ref, keys.docids))
    return FilePair((base / keys.src).resolve(), (base / keys.tgt).resolve(), ref, keys.lines, keys.join, docids,
                    keys.joint)


def _joined_sets(label, eval_sets, counts, path):
    """Each set that joins nothing, also joined k per line with a plain space for each k of
    `counts` (`joined_sets`), as <set>-join<k>: inputs longer than any training sentence
    whose joint every model has seen, unlike INTERPOLATE's <sep> (RESEARCH.md, section 10)."""
    joined = {}
    for name, pair in eval_sets.items():
        for k in (counts if pair.join is None else ()):
            joined[f"{name}-join{k}"] = dataclasses.replace(pair, join=k, joint="space")
    clash = sorted(set(joined) & set(eval_sets))
    if clash:
        fail(path, f"data.{label}.joined_sets makes the sets {clash}, which eval names already; rename those")
    return {**eval_sets, **joined}


def data_setting(label, keys, base, path, folder=None):
    """A data setting from its keys (a schema.DataSettingKeys); `folder` (--data) replaces where
    its files come from."""
    given = keys.model_fields_set
    design = {key: getattr(keys, key) for key in COUNT_KEYS}
    if design["extrapolate"] and design["interpolate"]:
        fail(path, f"data.{label}: choose extrapolate or interpolate, not both")
    if design["join_training"] and design["interpolate"]:
        fail(path, f"data.{label}: choose join_training (a plain space, 1 to N pairs) or interpolate (<sep>, N pairs), "
                   "not both")
    if design["single_pairs"] and not design["interpolate"]:
        fail(path, f"data.{label}.single_pairs mixes single pairs into joined ones: it needs interpolate")
    if keys.warm_start is not None:
        design["warm_start"] = keys.warm_start
    language = keys.target_language
    sources = [key for key in ("train", "synthetic", "folder") if key in given]
    if folder is not None:  # --data: its folder replaces the file's own files
        sources, given, base = ["folder"], {"folder"}, Path.cwd()
    if len(sources) != 1:
        fail(path, f"data.{label} needs one of train (with eval), synthetic or folder; got {sources or 'none'}")
    if sources == ["synthetic"]:
        extra = {"train", "valid", "eval", "train_pairs", "train_sample", "target_language", "joined_sets"} & given
        if extra:
            fail(path, f"data.{label}: a synthetic data setting has no files; remove {sorted(extra)}")
        task = keys.synthetic.task()
        several = {key: getattr(task, key) for key in ("max_sentences", "test_sentences", "concat_sentences")
                   if getattr(task, key) != 1}
        if design["interpolate"] and several:
            fail(path, f"data.{label}: interpolate joins single sentences, but the synthetic task "
                        f"already joins several ({', '.join(f'{k}: {v}' for k, v in several.items())}); set them to 1")
        return DataSetting(label, settings=dict(keys.settings), synthetic=task, eval_sets=dict.fromkeys(EVAL_SETS),
                           **design)
    if sources == ["folder"]:
        extra = {"train", "valid", "eval"} & given
        if extra:
            fail(path, f"data.{label}: a folder data setting takes its files from the folder; remove {sorted(extra)}")
        files = folder_data(folder if folder is not None else base / keys.folder, design["interpolate"], path)
        language = language or files.pop("target_language")
        keys = keys.model_copy(update={part: FilePairKeys(**pair) if part != "eval" else
                                       {name: FilePairKeys(**each) for name, each in pair.items()}
                                       for part, pair in files.items()})
    if keys.eval is None:
        fail(path, f"data.{label} needs eval (the sets to translate and score)")
    eval_sets = {name: _file_pair(pair, base) for name, pair in keys.eval.items()}
    if not eval_sets:
        fail(path, f"data.{label}.eval names no evaluation set")
    for name, pair in eval_sets.items():
        if design["interpolate"] and pair.join not in (None, design["interpolate"]):
            fail(path, f"data.{label}.eval.{name}.join is {pair.join}, but interpolate joins every "
                        f"evaluation set {design['interpolate']} per line")
        if pair.joint != "sep" and (design["interpolate"] or pair.join is None):
            fail(path, f"data.{label}.eval.{name}.joint: {pair.joint} " + (
                "joins nothing without join: N" if pair.join is None else
                "under interpolate, which joins every set with <sep> as in training"))
    if keys.joined_sets:
        if design["interpolate"]:
            fail(path, f"data.{label}.joined_sets: interpolate joins every evaluation set with <sep> already; "
                       "joined_sets is for settings trained on single sentences")
        eval_sets = _joined_sets(label, eval_sets, keys.joined_sets, path)
    train = _file_pair(keys.train, base)
    cuts = [key for key, value in (("train.lines", train.lines), ("train_pairs", keys.train_pairs),
                                   ("train_sample", keys.train_sample)) if value is not None]
    if len(cuts) > 1:
        fail(path, f"data.{label}: {' and '.join(cuts)} both cut the training pairs; keep one")
    if keys.train_pairs is not None:
        train = dataclasses.replace(train, lines=keys.train_pairs)
    if keys.train_sample is not None:
        train = dataclasses.replace(train, sample=keys.train_sample)
    return DataSetting(
        label,
        train=train,
        valid=_file_pair(keys.valid, base) if keys.valid is not None else None,
        eval_sets=eval_sets,
        settings=dict(keys.settings),
        target_language=language,
        **design,
    )
