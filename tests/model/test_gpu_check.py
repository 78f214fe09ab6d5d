"""tools/gpu_check.sh, the one-call GPU check, dry-run on the CPU (GPU_CHECK_DRY_RUN=1: Triton's
interpreter, tiny sizes, one rank on the CPU): every step runs and writes its file, so that
the script cannot fail on a typo when a GPU is lent; with one method's kernel made to fail on
purpose, that method loses its kernel rows and nothing else; a part whose budget is spent says
what it skipped."""
import argparse
import os
import re
import sys
import textwrap

import pytest
from conftest import REPO, run

pytest.importorskip("triton")

sys.path.insert(0, str(REPO / "tools"))
import benchmark_attention  # noqa: E402

# The planted failure (this test's only): a sitecustomize on PYTHONPATH that, in
# tools/benchmark_attention.py's process alone, makes Music's kernel raise at its first launch, as
# a Triton compile error would. Music: two layer methods ("our music, K=...", "our music") and one
# model method ("our music").
PLANT = textwrap.dedent('''
    import importlib.abc, importlib.util, sys

    class Plant(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "onmt_posenc.model.attention.music" or not sys.argv[0].endswith("benchmark_attention.py"):
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            execute = spec.loader.exec_module

            def exec_module(module):
                execute(module)

                def kernel_attend(self, q, k, v, mask):
                    raise RuntimeError("planted: Music's kernel fails to compile")

                module.MusicRelativeAttention.kernel_attend = kernel_attend

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, Plant())
''')
PLANTED = "failed: RuntimeError: planted: Music's kernel fails to compile"


def environment(tmp_path, plant=False):
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env.update(PATH=f"{os.path.dirname(sys.executable)}:{env['PATH']}", TRITON_CACHE_DIR=str(tmp_path / "triton"))
    if plant:
        (tmp_path / "plant").mkdir()
        (tmp_path / "plant" / "sitecustomize.py").write_text(PLANT, encoding="utf-8")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path / "plant"), env.get("PYTHONPATH")]))
    return env


def rows(text):
    """{(where, path, method, length): cell} of the 'row: ...' lines."""
    found = {}
    for line in text.splitlines():
        if line.startswith("row: "):
            where, method, length, cell = line[len("row: "):].split(" | ", 3)
            *where, path = where.split(" ")
            found[(" ".join(where), path, method, int(length.removeprefix("L=")))] = cell
    return found


def expected_rows(where, lengths, methods, on_triton):
    """Every (where, path, method, length) the part measures: each method on the fastest and
    plain paths, those that take the kernel (or SDPA under it) on the Triton path."""
    return {(where, path, name, length) for path in benchmark_attention.PATHS for name in methods
            if path != "triton" or on_triton(name) for length in lengths}


def layer_methods(**sizes):
    args = argparse.Namespace(d_model=sizes["d_model"], heads=sizes["heads"], far=16, attention_dropout=0.1,
                              music_far=sizes["music_far"])
    methods = benchmark_attention.layer_methods(args)
    on_triton = {name for name, make in methods.items() if benchmark_attention.on_path(make(True), "triton")}
    return methods, on_triton.__contains__


def model_methods():
    methods = benchmark_attention.model_methods(16)
    return methods, lambda name: not methods[name][1]  # OpenNMT-py's own layers do not take the kernel


def assert_every_row_but_musics_kernel(found, expected):
    assert set(found) == expected, (sorted(expected - set(found)), sorted(set(found) - expected))
    for (where, path, method, length), cell in found.items():
        if path == "triton" and "music" in method:
            assert cell == PLANTED, (where, path, method, length, cell)
        else:
            assert re.fullmatch(r"[0-9.]+ ms \| [0-9.]+ MiB", cell), (where, path, method, length, cell)


def test_gpu_check_dry_run(tmp_path):
    """The whole script, Music's kernel failing: every step runs, in the order of what matters,
    and every other row is written."""
    out = tmp_path / "out"
    env = {**environment(tmp_path, plant=True), "GPU_CHECK_DRY_RUN": "1", "OUT": str(out)}
    run(["bash", REPO / "tools" / "gpu_check.sh"], cwd=REPO, env=env, timeout=1200)
    steps = re.findall(r"^== (.+?) at \+", (out / "versions.txt").read_text(encoding="utf-8"), re.M)
    assert [step.split(" (")[0] for step in steps] == ["layer", "model", "train", "ranks and parity", "done"]
    parity = (out / "parity.txt").read_text(encoding="utf-8")
    assert " passed" in parity and "failed" not in parity and "error" not in parity
    ranks = (out / "ranks.txt").read_text(encoding="utf-8")
    for method in ("shape", "shaw"):
        one_rank = ranks.split(f"### {method}, one rank")[1].split("###")[0]
        assert re.search(r"Step +2/", one_rank)
        two_ranks = ranks.split(f"### {method}, two ranks")[1].split("###")[0]
        assert two_ranks.count("Starting process pid") == 2  # then each needs CUDA, which the CPU lacks
    assert "### stock onmt_train, gpu_ranks 0 0" in ranks
    layer = (out / "layer.txt").read_text(encoding="utf-8")
    model = (out / "model.txt").read_text(encoding="utf-8")
    # the dry run's sizes (tools/gpu_check.sh)
    assert_every_row_but_musics_kernel(rows(layer), expected_rows("Layer fp32", [20], *layer_methods(
        d_model=32, heads=2, music_far=8)))
    assert_every_row_but_musics_kernel(rows(model), expected_rows("Model fp32", [8], *model_methods()))
    for tables, title in ((layer, "Layer"), (model, "Model")):
        for heading in (f"SDPA's backends ({title}, fp32)", f"{title}, fp32, triton path: ms",
                        f"{title}, fp32, plain path: peak MiB", f"{title}, fp32: Triton kernels compiled"):
            assert heading in tables, heading
        assert "Triton's interpreter" in tables and "skipped" not in tables
        assert "| our music | failed |" in tables
    train = (out / "train.txt").read_text(encoding="utf-8")
    # tokens per CPU second of 2 steps less 1: on a loaded CPU noise, even below 0
    assert re.search(r"^\| APE \| -?\d+ \| x1.00 \| x-?[0-9.]+ \|$", train, re.M)
    assert re.search(r"^\| our shaw \| -?\d+ \| x-?[0-9.]+ \| x-?[0-9.]+ \|$", train, re.M)
    assert "| our music | " not in train and "skipped" not in train  # --train-methods


def test_one_failing_kernel_loses_only_its_rows(tmp_path):
    """A small dry run of the layer part (two lengths, the interpreter), Music's kernel failing:
    each of its kernel rows says so, every other row is written."""
    sizes = dict(d_model=32, heads=2, music_far=4)  # d_head 16: the smallest the kernel takes
    result = run([sys.executable, REPO / "tools" / "benchmark_attention.py", "--parts", "layer", "--lengths", "8",
                  "12", "--tokens", "12", "--d-model", "32", "--heads", "2", "--music-far", "4", "--repeats", "1"],
                 cwd=REPO, env={**environment(tmp_path, plant=True), "TRITON_INTERPRET": "1"})
    assert_every_row_but_musics_kernel(rows(result.stdout), expected_rows("Layer fp32", [8, 12], *layer_methods(
        **sizes)))
    assert "| our music | failed | failed |" in result.stdout


def test_a_spent_budget_skips_and_says_so(tmp_path):
    """With no seconds, the layer part measures nothing and names each path and length it skipped;
    the train part names each method it skipped."""
    result = run([sys.executable, REPO / "tools" / "benchmark_attention.py", "--parts", "layer", "train",
                  "--budget", "0", "--lengths", "8", "12", "--train-pairs", "40", "--train-methods", "our shaw"],
                 cwd=REPO, env=environment(tmp_path))
    assert "row: " not in result.stdout
    skipped = re.findall(r"^skipped: Layer fp32 (\w+) \| L=(\d+) \| (\d+) methods", result.stdout, re.M)
    methods = len(benchmark_attention.layer_methods(argparse.Namespace(
        d_model=512, heads=8, far=16, attention_dropout=0.1, music_far=64)))
    assert skipped == [(path, length, str(methods)) for path in ("fastest", "plain") for length in ("8", "12")]
    assert re.search(r"^skipped: train \| 3 methods.*: APE, OpenNMT-py alone; APE; our shaw$", result.stdout, re.M)
