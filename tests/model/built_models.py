"""Transformers built in the test's own process by OpenNMT-py's model builder (with the
extension's hooks), from onmt_train's options: the model tests' shared helpers."""
import types

import torch
from onmt import model_builder
from onmt.bin.train import _get_parser
from onmt.utils.parse import ArgumentParser


def model_options(*args, dim, heads):
    """onmt_train's options of a 2-layer encoder-decoder of `dim` features without dropout,
    `args` last (they win), updated and validated as onmt_train does."""
    opt, _ = _get_parser().parse_known_args(
        ["-data", "{}", "-src_vocab", "unused", "-encoder_type", "transformer", "-decoder_type", "transformer",
         "-layers", "2", "-heads", str(heads), "-hidden_size", str(dim), "-word_vec_size", str(dim),
         "-transformer_ff", "64", "-dropout", "0", "-attention_dropout", "0", *args]
    )  # fmt: skip
    ArgumentParser.update_model_opts(opt)
    ArgumentParser.validate_model_opts(opt)
    return opt


def new_model(opt, vocabs, seed=7):
    """A model as onmt_train builds and initializes it for new training (seeded)."""
    torch.manual_seed(seed)
    train_opt = types.SimpleNamespace(world_size=1, parallel_mode="data_parallel", gpu_ranks=[], gpu=-1)
    return model_builder.build_model(opt, train_opt, vocabs, None, 0)
