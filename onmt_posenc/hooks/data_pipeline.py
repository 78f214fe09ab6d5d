"""Hooks into OpenNMT-py's data pipeline (onmt.inputters, onmt.transforms, onmt.bin.build_vocab):
tokens split as `str.split()` splits them, INTERPOLATE's groups, perSPE's phrases carried to
the decoder, and onmt_build_vocab's hang and traceback fixed."""
import functools
import os

from onmt_posenc.model import checkpoints


def register_transforms():
    """Transforms register themselves on import; that must precede every parser."""
    import onmt_posenc.data.transforms  # noqa: F401


def split_tokens_on_any_whitespace():
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


def file_line(read, stride, offset):
    """The file line of the `read`-th line (0-based) that ParallelCorpus.load yields as
    reader `offset` of `stride`: it reads the blocks of `stride` consecutive lines whose
    block number is `offset` modulo `stride` ((i // stride) % stride == offset)."""
    block = (read // stride) * stride + offset
    return block * stride + read % stride


def support_concat_pairs():
    """What INTERPOLATE's `concat_pairs` transform needs from OpenNMT-py's data pipeline."""
    from onmt.inputters import dynamic_iterator
    from onmt.inputters.text_corpus import ParallelCorpusIterator
    from onmt.transforms.tokenize import TokenizerTransform

    from onmt_posenc.core.joining import join_segments, split_segments

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


def dump_samples_before_the_pool_ends():
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


def say_how_to_build_the_vocabulary_again():
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


def carry_target_phrases():
    """perSPE's phrase groups travel from the `tgt_phrases` transform to the decoder's
    position module as one more column of batch["tgt"] (appended after
    `dynamic_iterator.tensorify`), so batching, device moves and NMTModel's
    `tgt[:, :-1]` carry them with no change. `Embeddings.forward` takes the column
    off before the look-up tables and hands it to a `pe` that reads phrases (perSPE's: a
    `phrases(groups)` context, see PositionScheme.needs_target_phrases)."""
    from onmt.inputters import dynamic_iterator
    from onmt.modules.embeddings import Embeddings

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
        if not hasattr(pe, "phrases"):
            return stock_forward(self, source, step=step)
        with pe.phrases(groups):
            return stock_forward(self, source, step=step)

    Embeddings.forward = forward
