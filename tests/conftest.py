"""Shared test helpers: real data from tests/data and the stock onmt_* commands.

The tests are grouped by the package's layers (tests/core, config, model, corpora for
the data side, hooks, analysis, experiments) and tests/docs. A test that trains a model
or runs a command (the stock onmt_* commands, onmt-posenc, any subprocess), itself or
through a fixture, is marked `commands`: `make test-fast` runs the others
(`pytest -m "not commands"`), `make test` all of them.
"""
import inspect
import itertools
import re
import os
import sys
from pathlib import Path

import prestarted
import pytest
import yaml

# One thread for every torch of the run: pytest's two workers share two cores, and the
# torch work done inside a worker (and in the commands it starts) would otherwise take two
# threads each and wait on one another.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def import_triton_interpreted():
    """Triton's interpreter must be on when triton is first imported in a process: its
    language's own helpers (tl.zeros, ...) are kernels defined then. Here, before any test
    file imports it (a file that needs triton only to be installed would otherwise import it
    first, and the kernel's tests in the same worker would fail), and on for that import only,
    so that the other tests and the commands they run never see it (test_fused_kernel.py turns
    it on around each of its tests). Not with the kernel's tests on a GPU
    (ONMT_POSENC_KERNEL_TEST_DEVICE=cuda, tools/gpu_check.sh), nor without triton."""
    import importlib.util

    if os.environ.get("ONMT_POSENC_KERNEL_TEST_DEVICE") == "cuda" or importlib.util.find_spec("triton") is None:
        return
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        import triton  # noqa: F401
    finally:
        del os.environ["TRITON_INTERPRET"]


import_triton_interpreted()

REPO = Path(__file__).resolve().parents[1]
# Excerpts of real corpora kept in the repository (tests/data/README.md), so a fresh clone tests alone.
TEST_DATA = REPO / "tests" / "data"
TOY_ENDE = TEST_DATA / "toy-ende"
MULTI30K = TEST_DATA / "multi30k"  # raw text, upstream file names
BIN = Path(sys.executable).parent


def command(name):
    """Path of a console script installed beside this Python (onmt_train, onmt-posenc...)."""
    return str(BIN / name)


def run(args, cwd=None, env=None, expect_ok=True, timeout=600):
    """Run a command as a user would (a console script of this venv forked from a Python with
    torch imported: tests/prestarted.py); on an unexpected exit show its output."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    result = prestarted.run(args, cwd, full_env, timeout)
    if expect_ok and result.returncode != 0:
        pytest.fail(f"{args[0]} exited {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}")
    return result


def head(src, dst, n):
    """The first n lines of a real corpus file."""
    with open(src, encoding="utf-8") as lines:
        Path(dst).write_text("".join(itertools.islice(lines, n)), encoding="utf-8")
    return dst


def write_yaml(path, mapping):
    Path(path).write_text(yaml.safe_dump(mapping, sort_keys=False), encoding="utf-8")
    return path


# A 2-layer d=64 transformer and how it trains in the tests (data, vocabularies and steps apart).
TINY_MODEL = {
    "encoder_type": "transformer",
    "decoder_type": "transformer",
    "position_encoding": True,
    "layers": 2,
    "heads": 4,
    "hidden_size": 64,
    "word_vec_size": 64,
    "transformer_ff": 128,
    "dropout": [0.1],
    "batch_type": "tokens",
    "batch_size": 1024,
    "bucket_size": 1024,
    "num_workers": 0,
    "optim": "adam",
    "learning_rate": 0.002,
    "seed": 3,
}


def tiny_transformer(workdir, train_steps=20, **overrides):
    """TINY_MODEL on 2,000 toy-ende pairs (vocab built separately)."""
    workdir = Path(workdir)
    src = head(TOY_ENDE / "src-train.txt", workdir / "train.src", 2000)
    tgt = head(TOY_ENDE / "tgt-train.txt", workdir / "train.tgt", 2000)
    vsrc = head(TOY_ENDE / "src-val.txt", workdir / "valid.src", 100)
    vtgt = head(TOY_ENDE / "tgt-val.txt", workdir / "valid.tgt", 100)
    config = {
        "data": {
            "corpus_1": {"path_src": str(src), "path_tgt": str(tgt)},
            "valid": {"path_src": str(vsrc), "path_tgt": str(vtgt)},
        },
        "save_data": str(workdir / "samples"),
        "src_vocab": str(workdir / "vocab.src"),
        "tgt_vocab": str(workdir / "vocab.tgt"),
        "src_vocab_size": 3000,
        "tgt_vocab_size": 3000,
        "overwrite": True,
        "save_model": str(workdir / "model"),
        **TINY_MODEL,
        "train_steps": train_steps,
        "valid_steps": 10000,
        "save_checkpoint_steps": train_steps,
        "report_every": 10,
    }
    config.update(overrides)
    return config


def build_tiny_vocab(workdir):
    """`workdir` with tiny_transformer's corpus written and its vocabularies built."""
    config = write_yaml(workdir / "vocab.yaml", tiny_transformer(workdir))
    run([command("onmt_build_vocab"), "-config", config, "-n_sample", "-1"])
    return workdir


def train_tiny(workdir, name, env=None, **overrides):
    """onmt_train on tiny_transformer(workdir, **overrides), saving <name>_step_N.pt; the finished process."""
    config = write_yaml(workdir / f"{name}.yaml", tiny_transformer(workdir, save_model=str(workdir / name), **overrides))
    return run([command("onmt_train"), "-config", config], env=env)


def step_by_step_and_whole(model, vocabs):
    """A loaded model's decoder states for 3 random target prefixes of 6 tokens, decoded
    step by step (as translation does) and in one forward pass: (steps, whole)."""
    import torch

    torch.manual_seed(0)
    src = torch.randint(4, len(vocabs["src"]), (3, 9, 1))
    src_len = torch.tensor([9, 7, 4])
    tgt = torch.randint(4, len(vocabs["tgt"]), (3, 6, 1))
    with torch.no_grad():
        enc_out, enc_final, src_len = model.encoder(src, src_len)
        model.decoder.init_state(src, enc_out, enc_final)
        whole, _ = model.decoder(tgt, enc_out, src_len=src_len)
        model.decoder.init_state(src, enc_out, enc_final)
        steps = [model.decoder(tgt[:, i : i + 1], enc_out, src_len=src_len, step=i)[0] for i in range(6)]
    return torch.cat(steps, dim=1), whole


# What running a command looks like in a test or a fixture's source
COMMAND_CALLS = re.compile(r"\b(run|train_tiny|build_tiny_vocab|run_block|outcomes)\(|\bsubprocess\.|\bcommand\(")


def _runs_commands(function, fixtures, seen):
    """Does `function` run a command, itself, through a helper of its module it calls, or
    through a fixture it uses (by name, from `fixtures`)?"""
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        return False
    body = source.split(":", 1)[1] if source.lstrip().startswith(("def", "@")) else source
    if COMMAND_CALLS.search(body):
        return True
    helpers = [function.__globals__.get(name) for name in re.findall(r"\b(\w+)\(", body)]
    helpers = [h for h in helpers if inspect.isfunction(h) and h.__module__ == function.__module__]
    fixture_functions = [d.func for name in inspect.signature(function).parameters for d in fixtures.get(name, ())]
    for called in helpers + fixture_functions:
        if called not in seen:
            seen.add(called)
            if _runs_commands(called, fixtures, seen):
                return True
    return False


def pytest_configure(config):
    config.addinivalue_line("markers", "commands: trains a model or runs a command (left out by `make test-fast`)")


def pytest_sessionfinish(session):
    prestarted.close_all()


# The test files that take longest, first (a clean run's --durations, summed per file: 650 s for
# the runner's down to 54 s). `make test` hands each of its two workers whole files in this
# order (--dist loadfile --no-loadscope-reorder), so the end is made of short files. With only
# the first six listed, two files of 174 s and 91 s came near the end of the collection order:
# 131 s less test work (the durations' sum) gave no shorter run (30 min 3 s against 29 min 47 s);
# with the first twelve, 26 min 31 s. Today's order: a run of 2026-11-29 with the commands
# forked (tests/prestarted.py; 280 s for the docs' file, 24 s for the last listed), longest
# first by its summed durations.
LONGEST_FIRST = ["docs/test_docs.py", "experiments/test_runner.py", "experiments/test_evaluation_variants.py",
                 "model/test_export_ctranslate2.py",
                 "model/test_fused_kernel_commands.py", "model/test_fused_kernel.py",
                 "experiments/test_data_settings.py", "model/test_gpu_check.py", "hooks/test_stock_opennmt.py",
                 "analysis/test_analysis.py", "corpora/test_kftt.py", "experiments/test_one_runner_per_run.py",
                 "model/test_registries.py", "experiments/test_committed_reports.py",
                 "model/test_relative_attention.py", "experiments/test_launcher.py", "model/test_kernel_resources.py",
                 "hooks/test_shape_commands.py", "analysis/test_analysis_bad_input.py", "test_layers.py",
                 "packaging/test_package.py", "hooks/test_bad_input.py"]


def _file_rank(item):
    path = item.nodeid.split("::")[0].removeprefix("tests/")
    return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_collection_modifyitems(config, items):
    for item in items:
        fixtures = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
        if _runs_commands(item.function, fixtures, set()):
            item.add_marker(pytest.mark.commands)
    items.sort(key=_file_rank)  # stable: every file's tests keep their order
