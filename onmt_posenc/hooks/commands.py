"""Hooks around OpenNMT-py's commands: safe checkpoint loading (torch.load), checks in the
parent process before any worker starts (onmt_train, onmt_build_vocab, onmt_translate), no
empty translation left by a failed load, and the project's errors in one line."""
import functools
import sys
from pathlib import Path

import torch

from onmt_posenc.core.errors import UserError
from onmt_posenc.model import checkpoints


def load_checkpoints_safely():
    """Every OpenNMT-py checkpoint load (translate, train_from, average, release,
    the CTranslate2 converter) goes through torch.load. Alone, it is `ONMT_POSENC=stock`
    (startup.py): what stock OpenNMT-py needs to load a checkpoint on torch >= 2.6."""
    torch.load = checkpoints.safe_load(torch.load)


def check_checkpoint_folders():
    """Every checkpoint save goes through torch.save."""
    torch.save = checkpoints.folder_checked_save(torch.save)


def check_before_starting():
    """OpenNMT-py checks the corpus files in each training process, after onmt_train
    has spawned one per GPU. Check data, vocabularies and GPUs in the parent first,
    in `ArgumentParser.validate_train_opts` (which `onmt.bin.train.train` calls
    before it spawns), the corpus files in `ArgumentParser._validate_data`
    (onmt_build_vocab's check, and each training process's), and onmt_translate's
    model, source and output in `onmt.bin.translate.translate`, in one line each."""
    from onmt.utils.parse import ArgumentParser

    from onmt_posenc.hooks import preflight

    stock_validate_train_opts = ArgumentParser.validate_train_opts.__func__

    @classmethod
    @functools.wraps(stock_validate_train_opts)
    def validate_train_opts(cls, opt):
        stock_validate_train_opts(cls, opt)
        preflight.exit_on_error(preflight.check_training, opt, torch.cuda.device_count(), sys.argv[1:])

    ArgumentParser.validate_train_opts = validate_train_opts

    stock_validate_data = ArgumentParser._validate_data.__func__

    @classmethod
    @functools.wraps(stock_validate_data)
    def _validate_data(cls, opt):
        preflight.exit_on_error(preflight.check_corpora, opt.data, opt)
        stock_validate_data(cls, opt)

    ArgumentParser._validate_data = _validate_data

    # onmt_translate's own function, before it opens -output and loads the models. Not in
    # `validate_translate_opts`, which OpenNMT-py also calls with placeholders of its own:
    # validation BLEU in onmt_train (scoring_utils: `-model dummy -src dummy`) and
    # onmt_server (`src: dummy_src`), where nothing names a file of the user's.
    from onmt.bin import translate as translate_command

    stock_translate = translate_command.translate

    @functools.wraps(stock_translate)
    def translate(opt):
        preflight.exit_on_error(preflight.check_translation, opt, torch.cuda.device_count())
        return stock_translate(opt)

    translate_command.translate = translate


def no_empty_translation_on_failure():
    """`build_translator` (onmt_translate, through InferenceEnginePY) creates -output
    before it loads the models: a model that fails to load (one that passed the cheap
    check, see preflight.check_translation) would leave an empty file that looks like
    a translation of nothing."""
    import os

    from onmt.translate import translator

    stock_build_translator = translator.build_translator

    @functools.wraps(stock_build_translator)
    def build_translator(opt, *args, **kwargs):
        created = kwargs.get("out_file") is None and not os.path.exists(opt.output)
        try:
            return stock_build_translator(opt, *args, **kwargs)
        except BaseException:
            if created and os.path.isfile(opt.output) and os.path.getsize(opt.output) == 0:
                os.remove(opt.output)
            raise

    translator.build_translator = build_translator


def errors_in_one_line():
    """The project's own errors say what is wrong, and where, in one line; raised inside
    a stock command (onmt_average_models and onmt_release_model load checkpoints with no
    check before; onmt_release_model's CTranslate2 export refuses what it cannot
    represent), they reach the top uncaught, and the traceback above them is noise.
    Only the main thread of a command, and only errors a user can fix (status 1): ours
    (onmt_posenc.core.errors.UserError), and OpenNMT-py's SequenceTooLongError, a sentence
    longer than a position table (randomized positions' L included)."""
    from onmt.modules.embeddings import SequenceTooLongError

    stock_excepthook = sys.excepthook

    def excepthook(kind, error, traceback):
        if issubclass(kind, (UserError, SequenceTooLongError)):
            print(f"{Path(sys.argv[0]).name}: error: {error}", file=sys.stderr)
        else:
            stock_excepthook(kind, error, traceback)

    sys.excepthook = excepthook


def record_the_longest_training_source():
    """onmt_train keeps in the model options it saves with every checkpoint
    (`longest_training_source`) the longest source of the batches it has trained on, after
    every transform (a joined example counts whole): onmt_translate's rotary_scaling reads it.
    A run resumed with train_from goes on from the checkpoint's. Each GPU rank counts its own
    batches, and the first rank saves."""
    from onmt import trainer

    stock_gradient_accumulation = trainer.Trainer._gradient_accumulation

    @functools.wraps(stock_gradient_accumulation)
    def _gradient_accumulation(self, true_batches, *args, **kwargs):
        if self.model_saver is not None:
            model_opt = self.model_saver.model_opt
            longest = max(int(batch["srclen"].max()) for batch in true_batches)
            model_opt.longest_training_source = max(longest, getattr(model_opt, "longest_training_source", 0) or 0)
        return stock_gradient_accumulation(self, true_batches, *args, **kwargs)

    trainer.Trainer._gradient_accumulation = _gradient_accumulation
