"""The WMT16 recipes parse with OpenNMT-py's own parser, and a scaled-down copy trains on CPU."""
import onmt  # noqa: F401  (activates the extension)
import pytest
import torch
from conftest import REPO, command, run, tiny_transformer, write_yaml
from onmt.bin.train import _get_parser

METHODS = {"ape": {}, "shape": {"shape_max_shift": 500}, "rpe": {"max_relative_positions": 16}}


def parse_recipe(path, *extra):
    opt, _ = _get_parser().parse_known_args(["-config", str(path), *extra])
    return opt


@pytest.mark.parametrize("method", sorted(METHODS))
def test_recipe_has_paper_settings(method):
    opt = parse_recipe(REPO / "recipes" / f"{method}.yaml")
    for key, value in METHODS[method].items():
        assert getattr(opt, key) == value
    assert opt.position_encoding == (method != "rpe")
    # transformer-base and the paper's optimisation, from base.yaml
    assert (opt.enc_layers, opt.dec_layers, opt.hidden_size, opt.transformer_ff, opt.heads) == (6, 6, 512, 2048, 8)
    assert (opt.adam_beta1, opt.adam_beta2, opt.decay_method, opt.learning_rate) == (0.9, 0.98, "noam", 2.0)
    assert (opt.warmup_steps, opt.max_grad_norm, opt.label_smoothing, opt.dropout) == (8000, 0, 0.1, [0.1])
    assert (opt.train_steps, opt.save_checkpoint_steps, opt.keep_checkpoint) == (200000, 5000, 10)
    # 112k tokens per update on 8 GPUs
    assert opt.batch_size * opt.accum_count[0] * opt.world_size == 112000
    assert opt.gpu_ranks == list(range(8))
    assert opt.save_model == f"runs/{method}/model"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("recipes")


@pytest.mark.parametrize("method", sorted(METHODS))
def test_scaled_down_recipe_trains_on_cpu(workdir, method):
    """The recipe itself, with only size, data and device overridden."""
    tiny = tiny_transformer(workdir, train_steps=2)
    overrides = {key: tiny[key] for key in ("data", "save_data", "src_vocab", "bucket_size", "num_workers",
                                            "batch_size", "layers", "heads", "hidden_size", "word_vec_size",
                                            "transformer_ff", "train_steps", "save_checkpoint_steps")}
    overrides.update(include=str(REPO / "recipes" / f"{method}.yaml"), overwrite=True, enc_layers=2, dec_layers=2,
                     world_size=1, gpu_ranks=[], model_dtype="fp32", accum_count=[1], warmup_steps=10,
                     src_vocab_size=2000, save_model=str(workdir / method / "model"))
    config = write_yaml(workdir / f"{method}.yaml", overrides)
    if not (workdir / "vocab.src").exists():
        run([command("onmt_build_vocab"), "-config", config, "-n_sample", "500"])
    run([command("onmt_train"), "-config", config])
    trained = torch.load(workdir / method / "model_step_2.pt")["opt"]
    for key, value in METHODS[method].items():
        assert getattr(trained, key) == value
    assert trained.share_embeddings and trained.label_smoothing == 0.1
