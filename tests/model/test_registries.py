"""A position method is one registered class: registering it makes it a choice of the
options, the model builder builds it and its options are checked, with no other edit."""
import json
import math
import shutil
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

import onmt_posenc
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

    summary = "-|j - i| added to the logits"

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


# --- methods added as one file each --------------------------------------------------------

# docs/internals.md shows this file as its worked example
WINDOW = '''"""A local window: each query sees the keys within max_relative_positions of it."""
import numpy as np
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

    # CTranslate2 runs it as T5's relative attention bias: 4 (window + 1) buckets give each
    # distance up to the window its own bucket (bias 0), and hide the buckets past it.
    @classmethod
    def export_refusal(cls, model_opt):
        return None

    @classmethod
    def ctranslate2_attention(cls, model_opt):
        from ctranslate2.specs.attention_spec import MultiHeadAttentionSpec

        return MultiHeadAttentionSpec(self_attention=True, relative_attention_bias=True)

    @classmethod
    def ctranslate2_layer(cls, attention, model_opt, variables, scope, is_decoder):
        window, buckets = model_opt.max_relative_positions, 4 * (model_opt.max_relative_positions + 1)
        # a decoder's buckets count the past only; an encoder's split between both directions
        outside = torch.arange(buckets) % (buckets if is_decoder else buckets // 2) > window
        bias = torch.zeros(buckets, model_opt.heads).masked_fill(outside[:, None], masked_value(torch.float32))
        attention.relative_attention_bias = bias
        attention.relative_attention_max_distance = np.int32(buckets)
'''

PHRASE_START = '''"""Phrase positions: in training, every target token takes its phrase's first position."""
import contextlib

import torch
from onmt.modules.embeddings import PositionalEncoding

from onmt_posenc.model.positions import PositionScheme, register_position_encoding


@register_position_encoding("phrase_start")
class PhraseStartEncoding(PositionScheme, PositionalEncoding):
    def __init__(self, dim, enc_type):
        super().__init__(dim, enc_type)
        self._groups = None

    @classmethod
    def needs_target_phrases(cls, value_of):
        return True

    @contextlib.contextmanager
    def phrases(self, groups):
        self._groups = groups
        try:
            yield self
        finally:
            self._groups = None

    def forward(self, emb, step=None):
        if not self.training:
            return super().forward(emb, step)
        if self._groups is None:
            raise RuntimeError("no phrases reached the decoder in training")
        starts = torch.ones_like(self._groups, dtype=torch.bool)
        starts[:, 1:] = self._groups[:, 1:] != self._groups[:, :-1]
        first = torch.where(starts, torch.arange(emb.size(1), device=emb.device), 0)
        return self.embed_at(emb, first.cummax(dim=1).values)
'''

def test_the_worked_example_of_the_docs_is_the_file_tested_here():
    assert WINDOW in (REPO / "docs" / "internals.md").read_text(encoding="utf-8")


# The log-probability of every reference token by OpenNMT-py (teacher forcing) and by the export
PARITY = '''
import sys
import onmt  # noqa: F401  (activates the extension)
from onmt_posenc.analysis import models, token_nll
from onmt_posenc.model import export
checkpoint, exported, src, tgt = sys.argv[1:]
pairs = models.read_token_lines(src, 20), models.read_token_lines(tgt, 20)
ours = [[-nll for nll in sentence] for sentence in token_nll.token_nlls(models.load_model(checkpoint), *pairs)]
theirs = [result.log_probs for result in export.open_translator(exported, intra_threads=1).score_batch(*pairs)]
print(max(abs(a - b) for x, y in zip(ours, theirs) for a, b in zip(x, y)))
'''
TINY = {"world_size": 1, "gpu_ranks": [], "model_dtype": "fp32", "num_workers": 0, "layers": 1, "heads": 2,
        "hidden_size": 16, "word_vec_size": 16, "transformer_ff": 32, "train_steps": 2, "warmup_steps": 1,
        "batch_size": 512, "accum_count": [1], "bucket_size": 512, "save_checkpoint_steps": 2, "valid_steps": 2}


@pytest.fixture
def package(tmp_path):
    """A copy of the package for a contributor's new files: the test's commands import it
    (PYTHONPATH) in place of the installed one, which no other test then sees changed, also
    none that runs beside this one (pytest -n 2)."""
    root = tmp_path / "package"
    shutil.copytree(Path(onmt_posenc.__file__).parent, root / "onmt_posenc",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return root


def add_method(package, folder, name, text):
    """A method's file, as a contributor adds it; returns the environment of commands that see it."""
    (package / "onmt_posenc" / "model" / folder / f"{name}.py").write_text(text, encoding="utf-8")
    return {"PYTHONPATH": str(package)}


def run_experiment(tmp_path, methods, data, env):
    """`onmt-posenc run` of a tiny experiment; returns the output folder."""
    experiment = write_yaml(tmp_path / "methods.yaml", {
        "recipe": str(REPO / "recipes" / "base.yaml"), "settings": TINY, "methods": methods, "data": data,
        "evaluation": {"translate": {"max_length": 5}}})
    run([command("onmt-posenc"), "run", experiment, "--output", tmp_path / "out"], env=env)
    return tmp_path / "out"


def release(checkpoint, output, env):
    return run([command("onmt_release_model"), "--model", checkpoint, "--output", output, "--format", "ctranslate2"],
               env=env)


def test_an_exportable_attention_variant_added_as_one_file(package, tmp_path):
    """An option, a run of the runner, an export that scores as OpenNMT-py does, a benchmark row."""
    env = add_method(package, "attention", "window", WINDOW)
    probe = ("import onmt\n"
             "from onmt.bin.train import _get_parser\n"
             "action = _get_parser()._option_string_actions['--relative_attention']\n"
             "print(action.choices, action.help)\n")
    options = run([sys.executable, "-c", probe], env=env).stdout
    assert "'window'" in options and "'window': each query sees the keys within max_relative_positions" in options
    assert "'window'" not in run([sys.executable, "-c", probe]).stdout  # the installed package has no such file
    folder = tmp_path / "toy"
    folder.mkdir()
    for name in experiments.FOLDER_FILES:
        head(TOY_ENDE / name, folder / name, 200 if "train" in name else 20)
    methods = {"window": {"position_encoding": False, "max_relative_positions": 3, "relative_attention": "window"}}
    out = run_experiment(tmp_path, methods, {"toy": {"folder": str(folder)}}, env)
    run_folder = out / "toy" / "window" / "seed1"
    assert json.loads((run_folder / "result.json").read_text())["status"] == "finished"
    assert "WindowAttention" in (run_folder / "logs" / "train.log").read_text()
    release(run_folder / "averaged.pt", tmp_path / "ct2", env)
    gap = run([sys.executable, "-c", PARITY, run_folder / "averaged.pt", tmp_path / "ct2", folder / "src-test.txt",
               folder / "tgt-test.txt"], env=env).stdout
    assert float(gap) < 1e-4
    table = run([sys.executable, REPO / "tools" / "benchmark_attention.py", "--parts", "layer", "--lengths", "8",
                 "--tokens", "16", "--d-model", "16", "--heads", "2", "--repeats", "1", "--threads", "1"],
                env=env).stdout
    assert "| our window |" in table


def test_a_position_scheme_that_needs_target_phrases_added_as_one_file(package, tmp_path):
    """The runner makes the data setting's phrase file and trains on it; the export writes it."""
    env = add_method(package, "positions", "phrase_start", PHRASE_START)
    enja = REPO / "tests" / "data" / "small_parallel_enja"
    for name, lines in (("train", 300), ("dev", 20), ("test", 20)):
        for side in ("en", "ja"):
            head(enja / f"{name}.{side}", tmp_path / f"{name}.{side}", lines)
    pairs = {name: {"src": str(tmp_path / f"{name}.en"), "tgt": str(tmp_path / f"{name}.ja")}
             for name in ("train", "dev", "test")}
    data = {"enja": {"train": pairs["train"], "valid": pairs["dev"], "eval": {"test": pairs["test"]}}}
    methods = {"phrases": {"position_encoding": True, "tgt_position_encoding": "phrase_start"}}
    out = run_experiment(tmp_path, methods, data, env)
    run_folder = out / "enja" / "phrases" / "seed1"
    assert json.loads((run_folder / "result.json").read_text())["status"] == "finished"
    assert len((out / "data" / "enja" / "train.tgt.phrases").read_text().splitlines()) == 300
    release(run_folder / "averaged.pt", tmp_path / "ct2", env)
    config = json.loads((tmp_path / "ct2" / "config.json").read_text())
    assert config["onmt_posenc"]["tgt_position_encoding"] == "phrase_start"
