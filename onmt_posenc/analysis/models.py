"""Trained OpenNMT-py models for the analyses: loading, batches of text, and
swapping a side's position module.

Every analysis works on any OpenNMT-py 3.5.1 checkpoint (stock APE, SHAPE,
relative attention...): the model is loaded exactly as onmt_translate loads it.
"""
import contextlib
import sys
from typing import NamedTuple

import torch
from torch.nn.utils.rnn import pad_sequence

from onmt_posenc.analysis import AnalysisError, read_texts
from onmt_posenc.core.text import read_lines


class LoadedModel(NamedTuple):
    model: torch.nn.Module  # an onmt NMTModel in eval mode, on CPU
    vocabs: dict
    opt: object  # the model options saved in the checkpoint (argparse.Namespace)


def check_model(path):
    """An AnalysisError naming `path` unless it is a complete OpenNMT-py checkpoint;
    cheap (the tensors are not read), so commands check every model before any work.
    Left to the plugin's excepthook the error would lack the command's name (exit 1)."""
    from onmt_posenc.model.checkpoints import CheckpointError, UnsafeCheckpointError, check_complete

    try:
        check_complete(path)
    except (CheckpointError, UnsafeCheckpointError) as error:
        raise AnalysisError(str(error)) from None


def load_model(path, translate_options=None):
    """A checkpoint loaded exactly as onmt_translate loads it; with `translate_options` (onmt_translate's,
    a mapping), those of them that change the model (a self-attention variant's `translate_options`:
    rotary rescaling) applied as onmt_translate applies them (the others, such as the GPU, say how to
    search, which the analyses do not)."""
    from onmt.bin.translate import _get_parser
    from onmt.model_builder import load_test_model

    from onmt_posenc.model.attention import model_translate_options

    check_model(path)
    taken = {key: value for key, value in (translate_options or {}).items() if key in model_translate_options()}
    opt = _get_parser().parse_args(["-model", str(path), "-src", str(path),
                                    *(arg for key, value in taken.items() for arg in (f"-{key}", str(value)))])
    vocabs, model, model_opt = load_test_model(opt, model_path=str(path))
    return LoadedModel(model, vocabs, model_opt)


# Above this share of <unk>, the text is most likely not the model's (another corpus or
# tokenization), and every figure would be about <unk>.
UNKNOWN_SHARE_WARNED = 0.5


def warn_unknown_tokens(command, loaded, texts):
    """Warn (stderr) for each of `texts`, (side, path, token lines), of which the model's
    vocabulary lacks most tokens: the analysis runs, on text the model cannot read."""
    from onmt.constants import DefaultTokens

    for side, path, lines in texts:
        vocab = loaded.vocabs[side]
        unk = vocab[DefaultTokens.UNK]
        ids = [i for line in lines for i in vocab(line)]
        unknown = sum(i == unk for i in ids) / max(len(ids), 1)
        if unknown > UNKNOWN_SHARE_WARNED:
            print(f"onmt-posenc {command}: warning: {unknown:.0%} of the tokens of {path} are not in the "
                  f"model's {side} vocabulary: is it the text the model was trained on, tokenized the same way?",
                  file=sys.stderr)


def read_token_lines(path, limit=None):
    """Whitespace-token lists of the first `limit` lines of a text file (lines as
    OpenNMT-py reads them; not UTF-8: a TextFileError naming the file and line)."""
    return [line.split() for line in read_lines(path)[:limit]]


def read_tokens(paths, limit=None):
    """read_texts's checked lines of files that go together, as whitespace-token lists."""
    return [[line.split() for line in lines] for lines in read_texts(paths, limit)]


def batches(vocabs, src_lines, tgt_lines=None, max_tokens=2048):
    """Batches as OpenNMT-py tensorizes them, over examples sorted by length.

    Source ids are the tokens; target ids are `<s> tokens </s>` (onmt's
    numericalize). Yields dicts with src (B, L, 1), srclen (B,), tgt (B, T, 1)
    when targets are given, and index: the examples' positions in the input.
    Empty source lines are skipped, as OpenNMT-py skips them.
    """
    from onmt.constants import DefaultTokens

    order = sorted((i for i, src in enumerate(src_lines) if src), key=lambda i: len(src_lines[i]))
    pad_src, pad_tgt = vocabs["src"][DefaultTokens.PAD], vocabs["tgt"][DefaultTokens.PAD]
    start_token = vocabs["decoder_start_token"]
    group, longest = [], 0
    for i in order + [None]:
        size = 0 if i is None else len(src_lines[i])
        if i is not None and tgt_lines is not None:
            size = max(size, len(tgt_lines[i]) + 2)
        if group and (i is None or max(longest, size) * (len(group) + 1) > max_tokens):
            batch = {
                "index": list(group),
                "src": pad_sequence([torch.tensor(vocabs["src"](src_lines[j])) for j in group],
                                    batch_first=True, padding_value=pad_src)[:, :, None],
                "srclen": torch.tensor([len(src_lines[j]) for j in group]),
            }
            if tgt_lines is not None:
                ids = [vocabs["tgt"]([start_token] + tgt_lines[j] + [DefaultTokens.EOS]) for j in group]
                batch["tgt"] = pad_sequence([torch.tensor(t) for t in ids], batch_first=True,
                                            padding_value=pad_tgt)[:, :, None]
            yield batch
            group, longest = [], 0
        if i is not None:
            group.append(i)
            longest = max(longest, size)


def encode(model, batch):
    """Encoder output (B, L, d) of a batch, the decoder initialised on it."""
    enc_out, enc_final_hs, src_len = model.encoder(batch["src"], batch["srclen"])
    model.decoder.init_state(batch["src"], enc_out, enc_final_hs)
    return enc_out


def teacher_forced(model, batch):
    """(encoder output, decoder output (B, T-1, d), gold log-probs (B, T-1)) of a batch.

    The gold log-probs are what onmt_translate reports as GOLD SCORE (summed over
    a sentence): log-softmax of the generator, pad positions set to 0."""
    enc_out = encode(model, batch)
    dec_out, _ = model.decoder(batch["tgt"][:, :-1], enc_out, src_len=batch["srclen"])
    log_probs = torch.log_softmax(model.generator(dec_out).float(), dim=-1)
    gold = batch["tgt"][:, 1:]
    gold_log_probs = log_probs.gather(2, gold).squeeze(2)
    return enc_out, dec_out, gold_log_probs.masked_fill(gold.squeeze(2) == padding_id(model, "tgt"), 0.0)


def embeddings(model, side):
    """The encoder ("src") or decoder ("tgt") embeddings."""
    return model.encoder.embeddings if side == "src" else model.decoder.embeddings


def padding_id(model, side):
    return embeddings(model, side).word_padding_idx


def position_module(model, side):
    return getattr(embeddings(model, side).make_embedding, "pe", None)


def has_absolute_positions(model, side):
    from onmt.modules.embeddings import PositionalEncoding

    return isinstance(position_module(model, side), PositionalEncoding)


@contextlib.contextmanager
def attribute_replaced(owner, name, module):
    """Inside the block, `owner.name` is `module` (a submodule swapped in place)."""
    original = getattr(owner, name)
    owner.add_module(name, module)
    try:
        yield owner
    finally:
        owner.add_module(name, original)


def position_module_replaced(model, side, module):
    """Inside the block, `side`'s embeddings use `module` for positions."""
    return attribute_replaced(embeddings(model, side).make_embedding, "pe", module)
