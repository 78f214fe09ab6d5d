"""A position method is one registered class: registering it makes it a choice of the
options, the model builder builds it and its options are checked, with no other edit."""
import json
import math
import sys
from pathlib import Path

import onmt  # noqa: F401  (activates the extension)
import pyonmttok
import pytest
import torch
from onmt import model_builder
from onmt.bin.train import _get_parser
from onmt.constants import DefaultTokens
from onmt.utils.parse import ArgumentParser

import onmt_posenc.model.attention
from conftest import REPO, TOY_ENDE, command, head, run, write_yaml
from onmt_posenc import experiments
from onmt_posenc.model.attention import ATTENTIONS, register_attention
from onmt_posenc.model.attention.self_attention import SelfAttention
from onmt_posenc.model.positions import POSITION_ENCODINGS, PositionScheme, register_position_encoding


class ReversedPositions(PositionScheme, torch.nn.Module):
    """A made-up scheme with one option: the embedding plus a learned vector times (-position)."""

    option_names = ("reversed_weight",)

    def __init__(self, dim, weight):
        super().__init__()
        self.dim, self.weight = dim, weight

    def forward(self, emb, step=None):
        positions = torch.arange(step or 0, (step or 0) + emb.size(1), dtype=emb.dtype)
        return emb * math.sqrt(self.dim) - self.weight * positions[None, :, None]

    @classmethod
    def add_options(cls, group):
        group.add("--reversed_weight", "-reversed_weight", type=float, default=None)

    @classmethod
    def check_options(cls, opt, used):
        super().check_options(opt, used)
        if used and opt.reversed_weight is None:
            opt.reversed_weight = 0.5

    @classmethod
    def from_options(cls, dim, opt):
        return cls(dim, opt.reversed_weight)


class NearestKeyBias(SelfAttention):
    """A made-up relative variant: -|j - i| added to the logits, the same for every head."""

    def relative_logits(self, q, key_len):
        keys = torch.arange(key_len)
        queries = keys[key_len - q.size(2):, None]
        return -(keys[None, :] - queries).abs().to(q.dtype)

    @classmethod
    def from_stock(cls, stock, settings, fused, values):
        return cls(**settings, fused=fused)


@pytest.fixture
def registered():
    register_position_encoding("reversed")(ReversedPositions)
    register_attention("nearest")(NearestKeyBias)
    yield
    del POSITION_ENCODINGS["reversed"], ATTENTIONS["nearest"]


def build(*args):
    opt, _ = _get_parser().parse_known_args(
        ["-data", "{}", "-src_vocab", "unused", "-encoder_type", "transformer", "-decoder_type", "transformer",
         "-layers", "1", "-heads", "2", "-hidden_size", "8", "-word_vec_size", "8", "-transformer_ff", "16", *args]
    )
    ArgumentParser.update_model_opts(opt)
    ArgumentParser.validate_model_opts(opt)
    specials = [DefaultTokens.UNK, DefaultTokens.PAD, DefaultTokens.BOS, DefaultTokens.EOS]
    vocab = pyonmttok.build_vocab_from_tokens([f"w{i}" for i in range(10)], special_tokens=specials)
    vocabs = {"src": vocab, "tgt": vocab, "data_task": "seq2seq", "decoder_start_token": DefaultTokens.BOS}
    return model_builder.build_base_model(opt, vocabs)


def test_a_registered_position_scheme_is_an_option_and_is_built(registered):
    model = build("-src_position_encoding", "reversed", "-position_encoding")
    module = model.encoder.embeddings.make_embedding.pe
    assert isinstance(module, ReversedPositions) and module.weight == 0.5  # its default, filled in by its check
    assert isinstance(build("-src_position_encoding", "reversed", "-reversed_weight", "2").encoder.embeddings
                      .make_embedding.pe, ReversedPositions)
    with pytest.raises(ValueError, match="reversed_weight is set but neither .* is 'reversed'"):
        build("-position_encoding", "-reversed_weight", "2")


def test_a_registered_attention_variant_is_a_relative_attention_choice(registered):
    model = build("-max_relative_positions", "4", "-relative_attention", "nearest")
    assert all(type(layer.self_attn) is NearestKeyBias for layer in model.encoder.transformer)
    with pytest.raises(SystemExit):  # not registered: not a choice
        build("-max_relative_positions", "4", "-relative_attention", "farthest")


def test_an_unregistered_name_is_refused_by_the_parser():
    with pytest.raises(SystemExit):
        build("-src_position_encoding", "reversed")


def test_the_export_refuses_an_attention_variant_it_does_not_know(registered):
    import argparse

    from onmt_posenc.model import export

    opt = argparse.Namespace(relative_positions_buckets=0, max_relative_positions=4, relative_attention="nearest",
                             decoder_type="transformer")
    with pytest.raises(export.NotExportableError, match="relative_attention nearest: the CTranslate2 export of this "
                                                        "attention is not written"):
        export.check_exportable(opt)


# --- a variant added as one file ---------------------------------------------------------

WINDOW = '''"""A local window: each query sees the keys within max_relative_positions of it."""
import torch

from onmt_posenc.model.attention import register_attention
from onmt_posenc.model.attention.self_attention import SelfAttention, masked_value, relative_distances


@register_attention("window")
class WindowAttention(SelfAttention):
    summary = "each query sees the keys within max_relative_positions of it"

    def __init__(self, head_count, model_dim, window, **settings):
        super().__init__(head_count, model_dim, **settings)
        self.window = window

    def relative_logits(self, q, key_len):
        outside = relative_distances(q.size(2), key_len, q.device).abs() > self.window
        return torch.zeros(outside.shape, dtype=q.dtype, device=q.device).masked_fill(outside, masked_value(q.dtype))

    @classmethod
    def from_stock(cls, stock, settings, fused, values):
        return cls(**settings, window=stock.max_relative_positions, fused=fused)
'''


@pytest.fixture
def window_file():
    """The variant's file in onmt_posenc/model/attention/, as a contributor adds it; gone afterwards."""
    path = Path(onmt_posenc.model.attention.__file__).parent / "zz_window_for_test.py"
    path.write_text(WINDOW, encoding="utf-8")
    try:
        yield path
    finally:
        path.unlink()


def test_a_variant_added_as_one_file_is_an_option_a_run_an_export_refusal_and_a_benchmark_row(window_file, tmp_path):
    probe = ("import onmt\n"
             "from onmt.bin.train import _get_parser\n"
             "action = _get_parser()._option_string_actions['--relative_attention']\n"
             "print(action.choices, action.help)\n")
    options = run([sys.executable, "-c", probe]).stdout
    assert "'window'" in options and "'window': each query sees the keys within max_relative_positions" in options
    # a run of the runner, with the stock commands
    folder = tmp_path / "toy"
    folder.mkdir()
    for name in experiments.FOLDER_FILES:
        head(TOY_ENDE / name, folder / name, 200 if "train" in name else 20)
    experiment = write_yaml(tmp_path / "window.yaml", {
        "recipe": str(REPO / "recipes" / "base.yaml"),
        "settings": {"world_size": 1, "gpu_ranks": [], "model_dtype": "fp32", "num_workers": 0, "layers": 1,
                     "heads": 2, "hidden_size": 16, "word_vec_size": 16, "transformer_ff": 32, "train_steps": 2,
                     "warmup_steps": 1, "batch_size": 512, "accum_count": [1], "bucket_size": 512,
                     "save_checkpoint_steps": 2, "valid_steps": 2},
        "methods": {"window": {"position_encoding": False, "max_relative_positions": 3, "relative_attention": "window"}},
        "data": {"toy": {"folder": str(folder)}},
        "evaluation": {"translate": {"max_length": 5}}})
    run([command("onmt-posenc"), "run", experiment, "--output", tmp_path / "out"])
    run_folder = tmp_path / "out" / "toy" / "window" / "seed1"
    assert json.loads((run_folder / "result.json").read_text())["status"] == "finished"
    assert "WindowAttention" in (run_folder / "logs" / "train.log").read_text()
    # the export refuses it, saying why, until its export is written
    refused = run([command("onmt_release_model"), "--model", run_folder / "averaged.pt", "--output",
                   tmp_path / "ct2", "--format", "ctranslate2"], expect_ok=False)
    assert ("relative_attention window: the CTranslate2 export of this attention is not written"
            in refused.stderr.strip().splitlines()[-1])
    # the benchmark measures it beside the others
    table = run([sys.executable, REPO / "tools" / "benchmark_attention.py", "--parts", "layer", "--lengths", "8",
                 "--tokens", "16", "--d-model", "16", "--heads", "2", "--repeats", "1", "--threads", "1"]).stdout
    assert "| our window |" in table
