"""The one place that touches OpenNMT-py internals.

`activate()` runs once, right after `import onmt` (see `onmt_posenc.startup`).
Every hook below names the OpenNMT-py 3.5.1 function it wraps; when OpenNMT-py
changes, this file is where it breaks.
"""
import functools
import os
import re
import sys
from pathlib import Path

import torch

from onmt_posenc.core.errors import UserError
from onmt_posenc.model import checkpoints
from onmt_posenc.config import include as config_include
from onmt_posenc.model import options
from onmt_posenc.config import strict as strict_config

_active = False


def activate():
    global _active
    if _active:
        return
    _active = True
    _register_transforms()
    _split_tokens_on_any_whitespace()
    _support_concat_pairs()
    _dump_samples_before_the_pool_ends()
    _say_how_to_build_the_vocabulary_again()
    _add_options()
    _read_config_includes()
    _reject_unknown_config_keys()
    _validate_options()
    _build_position_encodings()
    _build_attention()
    _initialize_attention()
    _carry_target_phrases()
    load_checkpoints_safely()
    _check_checkpoint_folders()
    _check_before_starting()
    _no_empty_translation_on_failure()
    _errors_in_one_line()


def _register_transforms():
    """Transforms register themselves on import; that must precede every parser."""
    import onmt_posenc.data.transforms  # noqa: F401


def _split_tokens_on_any_whitespace():
    """Tokens are what whitespace separates, as `str.split()` sees it.

    ParallelCorpusIterator._process, which every corpus line passes through
    (onmt_build_vocab, onmt_train, onmt_translate), splits lines on single spaces:
    "a  b" gives an empty token and "Nummer\xa05" one token. onmt_build_vocab then
    writes them, and `inputter._read_vocab_file` reads each vocabulary line back
    with `str.split` (empty token: IndexError; a token holding other whitespace:
    ValueError on its count). Collapsing every run of whitespace to one space
    first makes the stock split give `line.split()`, tokens without whitespace,
    which the vocabulary reader reads back as written."""
    from onmt.inputters.text_corpus import ParallelCorpusIterator

    stock_process = ParallelCorpusIterator._process
    sides = ("src", "tgt", "src_original", "tgt_original")

    @functools.wraps(stock_process)
    def _process(self, stream):
        def single_spaced(example):
            for side in sides:
                if example.get(side) is not None:
                    example[side] = " ".join(example[side].split())
            return example

        return stock_process(self, map(single_spaced, stream))

    ParallelCorpusIterator._process = _process


def _support_concat_pairs():
    """What INTERPOLATE's `concat_pairs` transform needs from OpenNMT-py's data pipeline."""
    from onmt.inputters import dynamic_iterator
    from onmt.inputters.text_corpus import ParallelCorpusIterator
    from onmt.transforms.tokenize import TokenizerTransform

    from onmt_posenc.core.joining import join_segments, split_segments
    from onmt_posenc.data.transforms.concat_pairs import file_line

    # ParallelCorpusIterator._process numbers its i-th example `i * stride + offset`,
    # the file line only for a single reader; the groups (and perSPE's phrase file)
    # need the true line with several workers, threads or ranks.
    stock_process_corpus = ParallelCorpusIterator._process

    @functools.wraps(stock_process_corpus)
    def _process(self, stream):
        for item in stock_process_corpus(self, stream):
            example = item[0]
            read = (example["cid_line_number"] - self.offset) // self.stride
            example["cid_line_number"] = file_line(read, self.stride, self.offset)
            yield item

    ParallelCorpusIterator._process = _process

    # TokenizerTransform._tokenize (onmt_tokenize, sentencepiece, bpe) keeps `</s>`
    # whole but would cut "<sep>" into "<", "se", "p>": tokenize between separators.
    stock_tokenize = TokenizerTransform._tokenize

    @functools.wraps(stock_tokenize)
    def _tokenize(self, tokens, side="src", is_train=False):
        sep = getattr(self.opts, "concat_sep", None)
        if sep is None or isinstance(tokens, str) or sep not in tokens:
            return stock_tokenize(self, tokens, side, is_train)
        pieces = [stock_tokenize(self, segment, side, is_train) for segment in split_segments(tokens, sep)]
        return join_segments(pieces, sep)

    TokenizerTransform._tokenize = _tokenize

    # dynamic_iterator.process returns None for a bucket whose examples the transforms
    # all dropped, which DynamicDatasetIter cannot iterate; with concat_pairs most
    # lines yield nothing, so a reader may get a bucket without a group.
    stock_process_bucket = dynamic_iterator.process

    @functools.wraps(stock_process_bucket)
    def process(task, bucket, **kwargs):
        return stock_process_bucket(task, bucket, **kwargs) or []

    dynamic_iterator.process = process


def _dump_samples_before_the_pool_ends():
    """`onmt_build_vocab -dump_samples` could hang for ever (seen in the runner, which
    always dumps them). In `build_vocab` each pool worker puts the transformed examples,
    then "break", on a multiprocessing Queue that a writer process drains; the worker
    returns its counts while the Queue's feeder thread may still hold the last items,
    and leaving `with mp.Pool(...)` terminates the worker: the writer never gets its
    "break" and `write_process.join()` waits for ever. Flushing the worker's queues
    into their pipes before `build_sub_vocab` returns closes the race (the pipe holds
    what the writer has not read yet: the writer stops reading a corpus at the first
    "break" it meets, which leaves less than one example and a "break" unread)."""
    from onmt.bin import build_vocab

    stock_build_sub_vocab = build_vocab.build_sub_vocab

    @functools.wraps(stock_build_sub_vocab)
    def build_sub_vocab(corpora, transforms, opts, n_sample, stride, offset):
        counts = stock_build_sub_vocab(corpora, transforms, opts, n_sample, stride, offset)
        if opts.dump_samples:
            for queues in build_sub_vocab.queues.values():  # set by build_vocab's init_pool
                queues[offset].close()
                queues[offset].join_thread()  # returns once everything is in the pipe to the writer
        return counts

    # `build_vocab` and `init_pool` look the function up by this name when they run.
    build_vocab.build_sub_vocab = build_sub_vocab


def _say_how_to_build_the_vocabulary_again():
    """A second onmt_build_vocab counted the whole corpus, then stopped at its first existing
    output with an OSError traceback ("path run/vocab.src exists, stop."): the vocabularies
    are checked before the counting, and each output says in one line how to write it again."""
    from onmt.bin import build_vocab
    from onmt.utils.parse import ArgumentParser

    def refuse(path):
        raise checkpoints.OutputExistsError(
            f"{path} exists already: to write it again, add -overwrite (or `overwrite: true` in the config)")

    stock_validate_prepare_opts = ArgumentParser.validate_prepare_opts.__func__

    @classmethod
    @functools.wraps(stock_validate_prepare_opts)
    def validate_prepare_opts(cls, opt, build_vocab_only=False):
        stock_validate_prepare_opts(cls, opt, build_vocab_only=build_vocab_only)
        if build_vocab_only and not opt.overwrite:
            for path in (opt.src_vocab, None if opt.share_vocab else opt.tgt_vocab):
                if path and os.path.exists(path):
                    refuse(path)

    ArgumentParser.validate_prepare_opts = validate_prepare_opts

    stock_check_path = build_vocab.check_path

    @functools.wraps(stock_check_path)
    def check_path(path, exist_ok=False, log=print):
        if os.path.exists(path) and not exist_ok:
            refuse(path)
        return stock_check_path(path, exist_ok=exist_ok, log=log)

    build_vocab.check_path = check_path


def _add_options():
    """Our model options join OpenNMT-py's `model_opts` (used by onmt_train and
    by `ArgumentParser.ckpt_model_opts`, which gives old checkpoints our defaults)."""
    from onmt import opts

    stock_model_opts = opts.model_opts

    @functools.wraps(stock_model_opts)
    def model_opts(parser):
        stock_model_opts(parser)
        options.add_model_options(parser)

    opts.model_opts = model_opts


def _read_config_includes():
    """OpenNMT-py's parser reads YAML with configargparse's YAMLConfigFileParser;
    ours adds `include:` (onmt_posenc.config.include)."""
    from onmt.utils.parse import ArgumentParser

    stock_init = ArgumentParser.__init__

    @functools.wraps(stock_init)
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("config_file_parser_class", config_include.IncludingYAMLConfigFileParser)
        stock_init(self, *args, **kwargs)

    ArgumentParser.__init__ = __init__


def _reject_unknown_config_keys():
    from onmt.utils.parse import ArgumentParser

    stock_parse_known_args = ArgumentParser.parse_known_args

    @functools.wraps(stock_parse_known_args)
    def parse_known_args(self, *args, **kwargs):
        # Without this, argparse maps a config key that is a prefix of an option
        # (`shape_max_shif`) onto that option.
        self.allow_abbrev = False
        # For `error` below, which argparse calls without them.
        given = kwargs.get("args", args[0] if args else None)
        self.onmt_posenc_argv = list(sys.argv[1:] if given is None else given)
        namespace, extra = stock_parse_known_args(self, *args, **kwargs)
        try:
            strict_config.check_no_unknown_keys(extra, getattr(namespace, "config", None))
        except strict_config.UnknownOptionError as error:
            self.exit(2, f"{self.prog}: error: {error}\n")
        return namespace, extra

    ArgumentParser.parse_known_args = parse_known_args

    def error(self, message):
        """argparse prints its whole usage (200 lines for onmt_train) before the message:
        give the message alone, with where the option was set."""
        argv = getattr(self, "onmt_posenc_argv", sys.argv[1:])
        named = re.match(r"argument -+(\w+)", message)
        where = ""
        if named:
            where = f" (set in {config_include.where_set(named.group(1), _config_path(argv), argv)})"
        self.exit(2, f"{self.prog}: error: {message}{where}\n")

    ArgumentParser.error = error


def _config_path(argv):
    """The -config argument among a command's arguments (the parse failed: no namespace)."""
    for i, token in enumerate(argv):
        if token in ("-config", "--config") and i + 1 < len(argv):
            path = argv[i + 1]
        elif re.match(r"--?config=", token):
            path = token.split("=", 1)[1]
        else:
            continue
        return path if Path(path).is_file() else None  # a missing config: argparse's error is about it
    return None


def _validate_options():
    """Resolve each side's position encoding wherever OpenNMT-py validates model options
    (onmt_train before training, and every checkpoint load)."""
    from onmt.utils.parse import ArgumentParser

    stock_validate = ArgumentParser.validate_model_opts.__func__

    @classmethod
    @functools.wraps(stock_validate)
    def validate_model_opts(cls, model_opt):
        # Ours first: they say more clearly what the stock checks also refuse. onmt_train
        # and the runner check the options before (naming file and line); what fails here
        # otherwise comes from a checkpoint being loaded, and ends in one line.
        try:
            options.resolve_position_options(model_opt)
            options.resolve_attention_options(model_opt)
        except ValueError as error:
            raise options.ModelOptionsError(str(error)) from None
        stock_validate(cls, model_opt)

    ArgumentParser.validate_model_opts = validate_model_opts


def _build_position_encodings():
    """Replace the `pe` module that `build_embeddings` made with the chosen scheme."""
    from onmt import model_builder

    from onmt_posenc.model import positions

    stock_build_embeddings = model_builder.build_embeddings

    @functools.wraps(stock_build_embeddings)
    def build_embeddings(opt, vocabs, for_encoder=True):
        embeddings = stock_build_embeddings(opt, vocabs, for_encoder=for_encoder)
        side = "src" if for_encoder else "tgt"
        choice = getattr(opt, f"{side}_position_encoding", None)
        if choice is None:  # a caller that skipped validation: resolve now
            choice = getattr(options.resolve_position_options(opt), f"{side}_position_encoding")
        positions.install_position_encoding(embeddings, choice, opt)
        return embeddings

    model_builder.build_embeddings = build_embeddings


def _build_attention():
    """Swap every Transformer layer's self-attention for ours (onmt_posenc.model.attention:
    fused attention for absolute and OpenNMT-py's own schemes, fast Shaw, Music) right after `build_task_specific_model`,
    which `build_base_model` calls for training and for translation: before
    parameters are initialized or loaded, with OpenNMT-py's parameter names."""
    from onmt import model_builder

    from onmt_posenc.model import attention

    stock_build_task_specific_model = model_builder.build_task_specific_model

    @functools.wraps(stock_build_task_specific_model)
    def build_task_specific_model(model_opt, vocabs):
        model = stock_build_task_specific_model(model_opt, vocabs)
        attention.install(model, options.resolve_attention_options(model_opt))
        return model

    model_builder.build_task_specific_model = build_task_specific_model


def _initialize_attention():
    """`build_model` initializes the parameters of a new model (no checkpoint);
    our variants' own tables (Music's) then get their own initialization. onmt_train reaches
    the wrapper because `onmt.train_single` imports `build_model` after `import onmt`."""
    from onmt import model_builder

    from onmt_posenc.model import attention

    stock_build_model = model_builder.build_model

    @functools.wraps(stock_build_model)
    def build_model(model_opt, opt, vocabs, checkpoint, device_id):
        model = stock_build_model(model_opt, opt, vocabs, checkpoint, device_id)
        if checkpoint is None:  # otherwise the tables were loaded from it
            attention.initialize(model)
        return model

    model_builder.build_model = build_model


def _carry_target_phrases():
    """perSPE's phrase groups travel from the `tgt_phrases` transform to the decoder's
    position module as one more column of batch["tgt"] (appended after
    `dynamic_iterator.tensorify`), so batching, device moves and NMTModel's
    `tgt[:, :-1]` carry them with no change. `Embeddings.forward` takes the column
    off before the look-up tables and hands it to a perSPE `pe`."""
    from onmt.inputters import dynamic_iterator
    from onmt.modules.embeddings import Embeddings

    from onmt_posenc.model.positions.perturbed import PerturbedSinusoidalEncoding
    from onmt_posenc.data.transforms.phrase_boundaries import attach_phrase_groups

    stock_tensorify = dynamic_iterator.tensorify

    @functools.wraps(stock_tensorify)
    def tensorify(vocabs, minibatch, device, left_pad=False):
        tensor_batch = stock_tensorify(vocabs, minibatch, device, left_pad)
        if "tgt" not in tensor_batch:
            return tensor_batch
        return attach_phrase_groups(tensor_batch, minibatch, left_pad)

    dynamic_iterator.tensorify = tensorify

    stock_forward = Embeddings.forward

    @functools.wraps(stock_forward)
    def forward(self, source, step=None):
        if source.size(-1) != len(self.emb_luts) + 1:  # no phrase column
            return stock_forward(self, source, step=step)
        source, groups = source[:, :, :-1], source[:, :, -1]
        pe = getattr(self.make_embedding, "pe", None)
        if not isinstance(pe, PerturbedSinusoidalEncoding):
            return stock_forward(self, source, step=step)
        with pe.phrases(groups):
            return stock_forward(self, source, step=step)

    Embeddings.forward = forward


def load_checkpoints_safely():
    """Every OpenNMT-py checkpoint load (translate, train_from, average, release,
    the CTranslate2 converter) goes through torch.load. Alone, it is `ONMT_POSENC=stock`
    (startup.py): what stock OpenNMT-py needs to load a checkpoint on torch >= 2.6."""
    torch.load = checkpoints.safe_load(torch.load)


def _check_checkpoint_folders():
    """Every checkpoint save goes through torch.save."""
    torch.save = checkpoints.folder_checked_save(torch.save)


def _check_before_starting():
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


def _no_empty_translation_on_failure():
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


def _errors_in_one_line():
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
