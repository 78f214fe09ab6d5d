"""The fused kernel's GPU readiness without a GPU (tools/kernel_resources.py): the kernels the
defaults reach compile for sm_80 and sm_90 with Triton's own compiler and the wheel's ptxas,
no spills at d_head 64 for the targets' methods (training and decoding steps), shared memory
within sm_80's limit, and the committed table (docs/kernel_resources.md) holds what they compile
to now. Each test runs the
tool in its own process, without Triton's interpreter."""
import os
import re
import sys

import pytest
from conftest import REPO, run

pytest.importorskip("triton")

TOOL = REPO / "tools" / "kernel_resources.py"
TABLE = REPO / "docs" / "kernel_resources.md"
ROW = re.compile(r"^\| (?P<method>[^|]+) \| (?P<side>\w+) \| (?P<mode>\w+) \| (?P<dtype>\w+) \| (?P<d>\d+) \| "
                 r"(?P<arch>\d+) \| (?P<kernel>[^|]+) \| (?P<registers>\d+) \| (?P<spilled>\d+) \| (?P<stack>\d+) \| "
                 r"(?P<shared>\d+) \| [0-9.]+ \| (?P<target>[^|]+) \|$", re.M)
PRINTED = re.compile(r"\] (?P<method>.+?) (?P<side>encoder|decoder) (?P<mode>\w+) (?P<dtype>\w+) d=(?P<d>\d+) "
                     r"sm_(?P<arch>\d+) (?P<kernel>\w+): (?P<registers>\d+) registers, (?P<spilled>\d+) B spilled, "
                     r"(?P<shared>\d+) B shared")
KERNEL_NAMES = {"attention_forward": "forward", "attention_backward_keys": "dK dV",
                "attention_backward_queries": "dQ, tables"}


def environment(tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    return {**env, "TRITON_CACHE_DIR": str(tmp_path / "triton")}


def test_the_targets_compile_without_spills_as_the_table_says(tmp_path):
    result = run([sys.executable, TOOL, "--subset", "ci", "--check"], env=environment(tmp_path), timeout=1200)
    compiled = [match.groupdict() for match in PRINTED.finditer(result.stdout)]
    assert len(compiled) == 40  # 12 training variants, 3 kernels each; 4 decoding steps, a forward each
    for row in compiled:
        assert row["spilled"] == "0", row
    table = TABLE.read_text(encoding="utf-8")
    version = re.search(r"Triton ([0-9.]+)", table).group(1)
    import importlib.metadata

    if importlib.metadata.version("triton") != version:
        pytest.skip(f"the table was compiled with Triton {version}")
    committed = {tuple(row[key] for key in ("method", "side", "mode", "dtype", "d", "arch", "kernel")):
                 (row["registers"], row["spilled"], row["shared"]) for row in map(dict, (
                     m.groupdict() for m in ROW.finditer(table)))}
    for row in compiled:
        key = (row["method"], row["side"], row["mode"], row["dtype"], row["d"], row["arch"],
               KERNEL_NAMES[row["kernel"]])
        assert committed[key] == (row["registers"], row["spilled"], row["shared"]), key


SAME_KERNELS = """
import sys
from tools import kernel_resources as tool

def compiled_as(method, mode):
    variant = tool.Variant(method, "decoder", mode, "fp16", 64)
    return [(kernel.__name__, tool.specialization(kernel, arguments, 90)[0].hash())
            for kernel, arguments in tool.recorded_launches(variant)]

tool.METHODS["music K=1024"] = (dict(max_relative_positions=1024), "music", None)
tool.METHODS["t5 64 buckets"] = (dict(max_relative_positions=512, relative_positions_buckets=64), None, None)
tool.METHODS["shaw K=400 keys"] = (dict(max_relative_positions=400), "shaw", "none")
tool.METHODS["shaw K=256"] = (dict(max_relative_positions=256), "shaw", "shared")
for few, many in (("music K=16", "music K=1024"), ("t5", "t5 64 buckets"), ("shaw K=16 keys", "shaw K=400 keys"),
                  ("shaw K=64", "shaw K=256")):
    for mode in ("train", "step"):
        assert compiled_as(few, mode) == compiled_as(many, mode), (few, many, mode)
print("the same kernels")
"""


def test_the_tiles_work_does_not_grow_with_the_buckets(tmp_path):
    """Per-bucket sums in O(M N) a tile: a kernel's tile holds nothing of the buckets' number,
    so Music at K = 1024, T5 with 64 buckets and Shaw's keys at K = 400 compile to the very
    kernels of K = 16 and 32 buckets (the same source, constants and specialization; each K a
    multiple of 16, as Triton specializes integers by that), and Shaw's value term, whose
    forward takes a window of the M + N - 1 buckets a tile can meet, to the same kernels at
    K = 256 as at K = 64. (Before: an accumulator of the buckets' width and
    one masked row sum per bucket a tile holds; Music's dQ at K = 4096 took 75 s to compile and
    19.7 KB of stack a thread.)"""
    result = run([sys.executable, "-c", SAME_KERNELS], cwd=REPO, env=environment(tmp_path))
    assert "the same kernels" in result.stdout


def test_the_committed_table_meets_every_target():
    """The whole committed table, every variant the defaults reach and float32's (the compiles
    above check a subset of its rows against today's compiler): the targets' methods at d_head 64
    spill nothing, on sm_80 and sm_90, float16 and bfloat16, forward and backward, in training,
    evaluation and decoding steps; no kernel needs more shared memory than sm_80 has."""
    rows = [match.groupdict() for match in ROW.finditer(TABLE.read_text(encoding="utf-8"))]
    targets = [row for row in rows if row["method"] in ("shaw K=16", "t5", "alibi", "decay") and row["d"] == "64"
               and row["dtype"] in ("fp16", "bf16")]
    # per method, dtype and architecture: the encoder trains (3 kernels) and evaluates (a forward), the
    # decoder too and steps (a forward): 9 kernels; 4 dtypes (float32's two only with attention_kernel triton)
    assert len(rows) == 4 * 252 and len(targets) == 4 * 2 * 2 * 9
    assert {row["dtype"] for row in rows} == {"fp16", "bf16", "fp32", "tf32"}
    assert {(row["dtype"], row["arch"], row["kernel"]) for row in targets} == {
        (dtype, arch, kernel) for dtype in ("fp16", "bf16") for arch in ("80", "90")
        for kernel in KERNEL_NAMES.values()}
    assert [row for row in targets if row["spilled"] != "0" or row["target"].strip() != "met"] == []
    assert max(int(row["shared"]) for row in rows) <= 166912  # sm_80's shared memory a block
