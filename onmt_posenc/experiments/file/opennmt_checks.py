"""Every run's OpenNMT-py options, checked through onmt_train's and onmt_translate's own
parsers and the extension's checks before the first run trains (`onmt-posenc run`)."""
import itertools

import yaml

from onmt_posenc.config.parser_checks import key_named, parse_error_text, parser_problem, translate_options_problem
from onmt_posenc.experiments.file.spec import RUNNER_KEYS, fail, shown, needs_target_phrases


def check_options(experiment):
    """Every run's OpenNMT-py keys through onmt_train's own parser and the extension's
    option checks, before anything trains: an unknown key, a value of the wrong type
    or out of range is an ExperimentError naming the experiment file, the line and where in it
    the key was set (`FILE:LINE: methods.shape.shape_max_shift: must be >= 0, got -3`). The
    methods and data settings no grid line uses are checked too, and
    evaluation.translate through onmt_translate's parser."""
    from onmt.bin.train import _get_parser as train_parser
    from onmt.utils.parse import ArgumentParser

    from onmt_posenc.hooks import preflight

    def validate(opt):
        ArgumentParser.update_model_opts(opt)
        ArgumentParser.validate_model_opts(opt)
        try:
            preflight.check_schedule(opt)
        except preflight.PreflightError as error:
            raise ValueError(str(error)) from None

    # the runner's keys, which the parser requires, as placeholders: only parsed, never opened
    placeholders = yaml.safe_dump({"data": {"corpus": {"path_src": "src", "path_tgt": "tgt"}}, "src_vocab": "vocab"})
    checked = set()
    for run in experiment.runs + experiment.unused:
        keys = {key: value for key, value in run.config.items() if key not in RUNNER_KEYS}
        text = yaml.safe_dump(keys, sort_keys=True)
        if text in checked:
            continue
        checked.add(text)
        message = parser_problem(train_parser, text + placeholders, validate=validate)
        if message is not None:
            key = key_named(message, keys)
            if key is None:
                fail(experiment.path, f"run {run.id}: {parse_error_text(message, '')}")
            experiment.fail_at(run.sources.get(key, "settings"), key, parse_error_text(message, key))

    # phrase-level perSPE reads one phrase index per target token of each training line: the
    # runner makes them from the training target (data_preparation.prepare_phrases); INTERPOLATE's joining
    # changes the target after them
    for run in experiment.runs + experiment.unused:
        if not needs_target_phrases(run.config):
            continue
        setting = experiment.data[run.data]
        why = ("joins the target lines after the phrases are read" if setting.interpolate else
               f"has a target that is not Japanese ({not_japanese})" if (not_japanese := _not_japanese(setting)) else
               None)
        if why:
            experiment.fail_at(run.sources.get("perspe_range", "settings"), "perspe_range",
                               "phrase-level perSPE (perspe_unit: phrase, the default) perturbs the phrases "
                               "`onmt-posenc chunk-ja` finds in each Japanese training target line, but "
                               f"data.{run.data} {why}; set perspe_unit: token")

    # a warm-started run loads its source's weights (non-strictly, with update_vocab): a
    # model option that differs would leave weights unloaded or misread, without a word
    defaults = _model_option_defaults()
    for run in experiment.runs:
        source = experiment.warm_start_source(run)
        if source is None:
            continue
        differ = [key for key, default in defaults.items()
                  if run.config.get(key, default) != source.config.get(key, default)]
        if differ:
            key = differ[0]
            experiment.fail_at(run.sources.get(key, "settings"), key,
                               f"the run {run.id} starts from the weights of {source.id} (data.{run.data}.warm_start), "
                               f"but sets {key} to {shown(run.config.get(key, defaults[key]))}, the source "
                               f"{shown(source.config.get(key, defaults[key]))}; model options must be the same in both")

    # each variant's keys over evaluation.translate's, once those are known to be right
    for source, translate in [("evaluation.translate", experiment.translate),
                              *((f"evaluation.variants.{name}.translate", {**experiment.translate, **variant.translate})
                                for name, variant in experiment.variants.items())]:
        problem = translate_options_problem(translate)
        if problem is not None:
            key, what = problem
            if key is None:
                fail(experiment.path, f"{source}: {what}")
            experiment.fail_at(source, key, what)


def _not_japanese(setting):
    """Why a data setting's training target is not Japanese text (None if it is): its target
    language, or, where none is given, no kana in its first lines."""
    from onmt_posenc.core.scoring import looks_japanese

    if setting.synthetic is not None:
        return "the synthetic task's"
    if setting.target_language is not None:
        return None if setting.target_language == "ja" else f"target language {setting.target_language}"
    with open(setting.train.tgt, encoding="utf-8", errors="replace") as f:
        first = list(itertools.islice(f, 200))
    return None if looks_japanese(first) else f"no kana in the first lines of {setting.train.tgt}"


# Model options that say how to load a checkpoint, not what the model is: onmt_train
# takes them from the run's own options.
LOADING_OPTIONS = ("update_vocab", "freeze_encoder", "freeze_decoder")


def _model_option_defaults():
    """{option: default} of onmt_train's `model_opts` (ours included, see
    hooks.parser.add_options), without LOADING_OPTIONS."""
    from onmt import opts
    from onmt.utils.parse import ArgumentParser

    parser = ArgumentParser()
    opts.model_opts(parser)
    return {action.dest: action.default for action in parser._actions
            if action.dest != "help" and action.dest not in LOADING_OPTIONS}
