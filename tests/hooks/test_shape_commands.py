"""SHAPE through the stock OpenNMT-py commands, on real toy-ende data."""
import subprocess
import sys

import onmt  # noqa: F401  (activates the extension in this process too)
import pytest
import torch
from conftest import (TOY_ENDE, build_tiny_vocab, command, head, run, step_by_step_and_whole, tiny_transformer, train_tiny,
                      write_yaml)
from rounding import assert_matches

from onmt_posenc.model.positions.none import NoPositionEncoding
from onmt_posenc.model.positions.shifted import ShiftedSinusoidalEncoding


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A work directory with the tiny corpus and its vocabularies built."""
    return build_tiny_vocab(tmp_path_factory.mktemp("shape"))


@pytest.fixture(scope="module")
def shape_model(workdir):
    """SHAPE K=20 with the released-code inference offset (K), two checkpoints."""
    train_tiny(workdir, "shape", train_steps=60, save_checkpoint_steps=30, shape_max_shift=20, shape_inference_offset=20)
    return workdir / "shape_step_60.pt"


def test_end_to_end_average_and_translate(workdir, shape_model):
    averaged = workdir / "averaged.pt"
    run([command("onmt_average_models"), "-models", workdir / "shape_step_30.pt", shape_model, "-output", averaged])
    first, last = (torch.load(path)["model"] for path in (workdir / "shape_step_30.pt", shape_model))
    mean = torch.load(averaged)["model"]
    assert mean.keys() == first.keys()
    for name in first:  # the SHAPE table (buffer `pe`, longer than APE's) included
        assert torch.equal(mean[name], (first[name] + last[name]) / 2), name
    src = head(TOY_ENDE / "src-test.txt", workdir / "test.src", 40)
    hyp = workdir / "test.hyp"
    run([command("onmt_translate"), "-model", averaged, "-src", src, "-output", hyp, "-beam_size", "4", "-max_length", "60"])
    assert len(hyp.read_text(encoding="utf-8").splitlines()) == 40


def test_train_from_and_release(workdir, shape_model):
    config = workdir / "shape.yaml"
    run([command("onmt_train"), "-config", config, "-train_from", shape_model, "-train_steps", "65",
         "-save_checkpoint_steps", "65"])
    resumed = workdir / "shape_step_65.pt"
    released = workdir / "released.pt"
    run([command("onmt_release_model"), "-m", resumed, "-o", released])
    assert torch.load(released)["optim"] is None


def test_checkpoint_keeps_ape_parameter_names_and_options(workdir, shape_model):
    checkpoint = torch.load(shape_model)
    assert checkpoint["opt"].shape_max_shift == 20
    assert checkpoint["opt"].src_position_encoding == "shape"
    names = set(checkpoint["model"])
    assert "encoder.embeddings.make_embedding.pe.pe" in names
    assert "decoder.embeddings.make_embedding.pe.pe" in names
    # table grown by K so that any shifted sequence fits
    assert checkpoint["model"]["encoder.embeddings.make_embedding.pe.pe"].shape[0] == 5000 + 20


def test_k0_trains_bit_for_bit_like_ape(workdir):
    """SHAPE with K=0 == APE, same seed, same attention kernels (the extension's)."""
    train_tiny(workdir, "ape", train_steps=8)
    train_tiny(workdir, "shape_k0", train_steps=8, shape_max_shift=0)
    a = torch.load(workdir / "ape_step_8.pt")["model"]
    b = torch.load(workdir / "shape_k0_step_8.pt")["model"]
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_incremental_decoding_matches_full_forward(shape_model):
    from onmt.model_builder import load_test_model
    from onmt.translate.translator import build_translator  # noqa: F401  (import order as translate)
    from onmt.utils.parse import ArgumentParser
    from onmt import opts

    parser = ArgumentParser()
    opts.translate_opts(parser)
    opt = parser.parse_args(["-model", str(shape_model), "-src", "unused"])
    vocabs, model, _ = load_test_model(opt)
    assert isinstance(model.decoder.embeddings.make_embedding.pe, ShiftedSinusoidalEncoding)
    assert_matches(*step_by_step_and_whole(model, vocabs))


def test_per_side_position_choice(workdir):
    train_tiny(workdir, "sides", train_steps=2, src_position_encoding="none",
               tgt_position_encoding="shape", shape_max_shift=7)
    checkpoint = torch.load(workdir / "sides_step_2.pt")
    assert "encoder.embeddings.make_embedding.pe.pe" not in checkpoint["model"]
    from onmt.model_builder import build_base_model
    from onmt.inputters.inputter import dict_to_vocabs

    model = build_base_model(checkpoint["opt"], dict_to_vocabs(checkpoint["vocab"]))
    assert isinstance(model.encoder.embeddings.make_embedding.pe, NoPositionEncoding)
    assert model.decoder.embeddings.make_embedding.pe.max_shift == 7


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"src_position_encoding": "shape"}, "needs shape_max_shift"),
        ({"shape_max_shift": 5, "src_position_encoding": "none", "tgt_position_encoding": "sinusoidal"},
         "neither src_position_encoding nor tgt_position_encoding is 'shape'"),
        ({"shape_max_shift": -1}, "shape_max_shift must be >= 0"),
    ],
)
def test_inconsistent_position_options_refused(workdir, overrides, message):
    config = write_yaml(workdir / "bad.yaml", tiny_transformer(workdir, **overrides))
    result = run([command("onmt_train"), "-config", config], expect_ok=False)
    assert result.returncode != 0
    assert message in result.stderr


def test_unknown_config_key_is_an_error(workdir):
    typo = write_yaml(workdir / "typo.yaml", tiny_transformer(workdir))
    text = typo.read_text(encoding="utf-8") + "shape_max_shif: 500\n"
    typo.write_text(text, encoding="utf-8")
    line = len(text.splitlines())
    main = workdir / "main.yaml"
    main.write_text("include: typo.yaml\nseed: 4\n", encoding="utf-8")
    for config in (typo, main):  # the line is found in included files too
        result = run([command("onmt_train"), "-config", config], expect_ok=False)
        assert result.returncode == 2
        assert f"unknown option 'shape_max_shif' (set in {typo}:{line}); did you mean 'shape_max_shift'?" in result.stderr
    result = run([command("onmt_train"), "-config", main, "-shape_max_shiftt", "5"], expect_ok=False)
    assert "unknown option 'shape_max_shiftt' (set in the command line)" in result.stderr
    # without the extension the same typo trains plain APE without a word
    stock = run([command("onmt_train"), "-config", typo, "-train_steps", "1", "-save_model", workdir / "typo"],
                env={"ONMT_POSENC": "off"})
    assert "shape_max_shif" not in stock.stderr
    assert (workdir / "typo_step_1.pt").exists()


def test_malicious_checkpoint_refused_without_running_it(workdir, shape_model):
    marker = workdir / "payload_ran"
    evil = workdir / "evil.pt"
    maker = (
        "import argparse, os, torch\n"
        "class Payload:\n"
        f"    def __reduce__(self): return (os.system, ('touch {marker}',))\n"
        "with torch.serialization.safe_globals([argparse.Namespace]):  # the attacker's own copy, weights only\n"
        f"    c = torch.load('{shape_model}', weights_only=True)\n"
        "c['opt'].extra = Payload()\n"
        f"torch.save(c, '{evil}')\n"
    )
    subprocess.run([sys.executable, "-c", maker], check=True, env={"ONMT_POSENC": "off", "PATH": ""})
    assert evil.exists() and not marker.exists()
    src = head(TOY_ENDE / "src-test.txt", workdir / "three.src", 3)
    for args in (
        [command("onmt_translate"), "-model", evil, "-src", src, "-output", workdir / "evil.hyp"],
        [command("onmt_average_models"), "-models", evil, "-output", workdir / "evil_avg.pt"],
        [command("onmt_release_model"), "-m", evil, "-o", workdir / "evil_rel.pt"],
    ):
        result = run(args, expect_ok=False)
        assert result.returncode != 0
        assert f"Refusing to load {evil}: it holds a pickled posix.system" in result.stderr
        assert not marker.exists()


def test_onmt_posenc_off_gives_stock_opennmt():
    probe = "import onmt, torch; print(getattr(torch.load, 'onmt_posenc_safe', False))"
    on = run([sys.executable, "-c", probe])
    off = run([sys.executable, "-c", probe], env={"ONMT_POSENC": "off"})
    assert on.stdout.strip() == "True" and off.stdout.strip() == "False"


def test_spawned_worker_processes_get_the_extension(tmp_path):
    """Multi-GPU onmt_train spawns fresh interpreters; the start-up hook arms each one."""
    script = tmp_path / "spawn_probe.py"
    script.write_text(
        "import multiprocessing as mp\n"
        "def child(queue):\n"
        "    import onmt, torch\n"
        "    from onmt.bin.train import _get_parser\n"
        "    knows_shape = '-shape_max_shift' in _get_parser()._option_string_actions\n"
        "    queue.put((getattr(torch.load, 'onmt_posenc_safe', False), knows_shape))\n"
        "if __name__ == '__main__':\n"
        "    ctx = mp.get_context('spawn')\n"
        "    queue = ctx.Queue()\n"
        "    worker = ctx.Process(target=child, args=(queue,))\n"
        "    worker.start()\n"
        "    print(*queue.get())\n"
        "    worker.join()\n",
        encoding="utf-8",
    )
    assert run([sys.executable, script]).stdout.split() == ["True", "True"]
