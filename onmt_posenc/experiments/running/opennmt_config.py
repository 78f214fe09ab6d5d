"""A run's OpenNMT-py config: the experiment's keys for it, plus what the runner owns
(its corpora with the data setting's transforms, vocabularies, save_model)."""
from onmt_posenc.core import joining as interpolate
from onmt_posenc.experiments.file.spec import RUNNER_KEYS, data_setting_keys, needs_target_phrases
from onmt_posenc.experiments.running.store import AVERAGED, data_dir, phrase_file, run_dir

# the corpus of single pairs that `single_pairs` mixes into INTERPOLATE's joined ones
SINGLE_PAIRS_CORPUS = "train_single_pairs"


def corpora(setting, files, transforms, phrases=None):
    """The `data` of a run's OpenNMT-py config: the setting's files with its transforms
    after the config's own `transforms` (tokenization, say). EXTRAPOLATE filters the
    training corpus only (dev unchanged, as in the paper); INTERPOLATE joins the
    training and the validation corpus; `join_training` joins adjacent training pairs (the
    validation corpus stays single pairs); with `single_pairs: W`, the training files are
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
    if setting.join_training:  # after the filter: only pairs within the cap are joined
        train.append("join_adjacent")
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
