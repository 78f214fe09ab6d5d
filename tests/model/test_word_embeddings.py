"""The word embeddings' initialisation (`word_embedding_init`) and scale
(`word_embedding_scale`): built by OpenNMT-py's own model builder in this process, and
through the stock commands (onmt_train, onmt_translate) with their checkpoints. Their
CTranslate2 export is checked in test_export_ctranslate2.py."""
import math

import onmt  # noqa: F401  (activates the extension in this process too)
import pyonmttok
import pytest
import torch
import built_models
from built_models import new_model
from conftest import TEST_DATA, build_tiny_vocab, command, head, run, train_tiny
from onmt.constants import DefaultTokens

from onmt_posenc.model.options import ModelOptionsError
from onmt_posenc.model.positions.none import NoPositionEncoding

DIM, VOCAB = 32, 400


def model_options(*args):
    """One layer a stack, param_init_glorot as the recipes have it."""
    return built_models.model_options("-layers", "1", "-param_init_glorot", "-param_init", "0", *args,
                                      dim=DIM, heads=4)


@pytest.fixture(scope="module")
def vocabs():
    specials = [DefaultTokens.UNK, DefaultTokens.PAD, DefaultTokens.BOS, DefaultTokens.EOS]
    vocab = pyonmttok.build_vocab_from_tokens([f"w{i}" for i in range(VOCAB - 4)], special_tokens=specials)
    return {"src": vocab, "tgt": vocab, "data_task": "seq2seq", "decoder_start_token": DefaultTokens.BOS}


def word_tables(model):
    return {"src": model.encoder.embeddings.word_lut, "tgt": model.decoder.embeddings.word_lut}


def test_normal_init_draws_the_word_embeddings_alone(vocabs):
    """N(0, d^-1/2) with a zero padding row; every other parameter as param_init_glorot drew it
    under the same seed, and the stock draw is left as it was."""
    glorot = new_model(model_options(), vocabs)
    normal = new_model(model_options("-word_embedding_init", "normal"), vocabs)
    for side, table in word_tables(normal).items():
        weight = table.weight.detach()
        assert torch.equal(weight[table.padding_idx], torch.zeros(DIM)), side
        rows = torch.cat([weight[: table.padding_idx], weight[table.padding_idx + 1 :]])
        # 399 x 32 draws: the sample std lies within 3% of d^-1/2 = 0.177 (5 standard errors)
        assert rows.std().item() == pytest.approx(DIM ** -0.5, rel=0.03), side
        assert abs(rows.mean().item()) < 0.01, side
        # Glorot-uniform's std is sqrt(2 / (V + d)) = 0.069: far below
        assert word_tables(glorot)[side].weight.std().item() == pytest.approx(math.sqrt(2 / (VOCAB + DIM)), rel=0.05)
    tables = {"encoder.embeddings.make_embedding.emb_luts.0.weight", "decoder.embeddings.make_embedding.emb_luts.0.weight"}
    others = 0
    for (name, expected), (_, actual) in zip(glorot.named_parameters(), normal.named_parameters()):
        if name in tables:
            assert not torch.equal(actual, expected), name
        else:
            others += 1
            assert torch.equal(actual, expected), name
    assert others > 10


def test_shared_embeddings_stay_one_table(vocabs):
    model = new_model(model_options("-word_embedding_init", "normal", "-share_embeddings", "-share_vocab"), vocabs)
    tables = word_tables(model)
    assert tables["src"].weight is tables["tgt"].weight
    assert tables["src"].weight.std().item() == pytest.approx(DIM ** -0.5, rel=0.03)


def embedded(model, side, tokens):
    embeddings = model.encoder.embeddings if side == "src" else model.decoder.embeddings
    return embeddings(tokens[:, :, None])


# (options, the scale each side gets, whether positions are added)
SCALES = {
    "APE, OpenNMT-py's": ((), math.sqrt(DIM), True),
    "APE, sqrt_d": (("-word_embedding_scale", "sqrt_d"), math.sqrt(DIM), True),
    "APE, none": (("-word_embedding_scale", "none"), 1.0, True),
    "no positions, OpenNMT-py's": (("-src_position_encoding", "none", "-tgt_position_encoding", "none",
                                    "-position_encoding"), math.sqrt(DIM), False),
    "no positions, none": (("-src_position_encoding", "none", "-tgt_position_encoding", "none",
                            "-position_encoding", "-word_embedding_scale", "none"), 1.0, False),
    "Shaw, OpenNMT-py's": (("-max_relative_positions", "8"), 1.0, False),
    "Shaw, sqrt_d": (("-max_relative_positions", "8", "-word_embedding_scale", "sqrt_d"), math.sqrt(DIM), False),
    "SHAPE, none": (("-shape_max_shift", "5", "-word_embedding_scale", "none"), 1.0, True),
}  # fmt: skip


@pytest.mark.parametrize("name", SCALES)
@pytest.mark.parametrize("side", ["src", "tgt"])
def test_scale_is_applied_with_or_without_positions(vocabs, name, side):
    """The embedding layer's output is word vector x the scale the option gives (+ the
    sinusoid where positions are added), in evaluation."""
    args, scale, with_positions = SCALES[name]
    if not any(a in args for a in ("-max_relative_positions", "-src_position_encoding")):
        args = ("-position_encoding", *args)
    model = new_model(model_options(*args), vocabs).eval()
    tokens = torch.randint(4, VOCAB, (2, 7), generator=torch.Generator().manual_seed(0))
    words = word_tables(model)[side](tokens)
    with torch.no_grad():
        out = embedded(model, side, tokens)
    # One sequence's position term equals the other's: the sum is word x scale + a per-position term.
    position_term = out - words * scale
    assert torch.allclose(position_term[0], position_term[1], atol=1e-5)
    assert position_term.abs().max().item() > 0.1 if with_positions else position_term.abs().max().item() < 1e-5


def test_default_keeps_a_side_without_positions_unscaled_and_module_free(vocabs):
    """Unset, a Shaw model has no position module: its state dict and checkpoints are stock."""
    stock = new_model(model_options("-max_relative_positions", "8"), vocabs)
    scaled = new_model(model_options("-max_relative_positions", "8", "-word_embedding_scale", "sqrt_d"), vocabs)
    assert getattr(stock.encoder.embeddings.make_embedding, "pe", None) is None
    assert type(scaled.encoder.embeddings.make_embedding.pe) is NoPositionEncoding
    assert list(stock.state_dict()) == list(scaled.state_dict())


def test_pretrained_vectors_with_normal_init_are_refused():
    with pytest.raises(ModelOptionsError, match="word_embedding_init normal with pre_word_vecs_enc"):
        model_options("-word_embedding_init", "normal", "-pre_word_vecs_enc", "vectors.pt")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """APE trained 10 updates with both options (normal init, scale 1) and a Shaw model with
    sqrt(d), by onmt_train as a user runs it; their checkpoints."""
    workdir = build_tiny_vocab(tmp_path_factory.mktemp("word_embeddings"))
    options = {
        "ape": {"word_embedding_init": "normal", "word_embedding_scale": "none", "learning_rate": 0.0001},
        "shaw": {"position_encoding": False, "max_relative_positions": 8, "word_embedding_init": "normal",
                 "word_embedding_scale": "sqrt_d", "learning_rate": 0.0001},
    }  # fmt: skip
    for name, extra in options.items():
        train_tiny(workdir, name, train_steps=10, **extra)
    return workdir, {name: workdir / f"{name}_step_10.pt" for name in options}


@pytest.mark.parametrize("name, scale", [("ape", 1.0), ("shaw", math.sqrt(64))])
def test_checkpoint_round_trip(trained, name, scale):
    """onmt_train's checkpoint holds the normal-drawn tables (a few small updates move them
    little) and the options, and onmt_translate's model rebuilt from it applies the scale."""
    from onmt_posenc.analysis import models

    workdir, checkpoints = trained
    checkpoint = torch.load(checkpoints[name])
    assert checkpoint["opt"].word_embedding_init == "normal"
    table = checkpoint["model"]["encoder.embeddings.make_embedding.emb_luts.0.weight"]
    assert table.std().item() == pytest.approx(64 ** -0.5, rel=0.05)
    loaded = models.load_model(checkpoints[name])
    module = loaded.model.encoder.embeddings.make_embedding.pe
    assert module.embedding_scale == pytest.approx(scale)
    src = head(TEST_DATA / "toy-ende" / "src-test.txt", workdir / "test.src", 5)
    output = workdir / f"{name}.hyp"
    run([command("onmt_translate"), "-model", checkpoints[name], "-src", src, "-output", output])
    assert len(output.read_text(encoding="utf-8").splitlines()) == 5
