"""tools/gpu_check.sh, the one-call GPU check, dry-run on the CPU (GPU_CHECK_DRY_RUN=1: Triton's
interpreter, tiny sizes, one rank on the CPU): every step runs and writes its file, so that
the script cannot fail on a typo when a GPU is lent."""
import os
import re
import sys

import pytest
from conftest import REPO, run

pytest.importorskip("triton")


def test_gpu_check_dry_run(tmp_path):
    out = tmp_path / "out"
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env.update(GPU_CHECK_DRY_RUN="1", OUT=str(out), PATH=f"{os.path.dirname(sys.executable)}:{env['PATH']}",
               TRITON_CACHE_DIR=str(tmp_path / "triton"))
    run(["bash", REPO / "tools" / "gpu_check.sh"], cwd=REPO, env=env, timeout=1200)
    steps = (out / "versions.txt").read_text(encoding="utf-8")
    for step in ("parity and ranks", "layer", "model", "train", "done"):
        assert f"== {step} at +" in steps
    parity = (out / "parity.txt").read_text(encoding="utf-8")
    assert " passed" in parity and "failed" not in parity and "error" not in parity
    ranks = (out / "ranks.txt").read_text(encoding="utf-8")
    for method in ("shape", "shaw"):
        one_rank = ranks.split(f"### {method}, one rank")[1].split("###")[0]
        assert re.search(r"Step +2/", one_rank)
        two_ranks = ranks.split(f"### {method}, two ranks")[1].split("###")[0]
        assert two_ranks.count("Starting process pid") == 2  # then each needs CUDA, which the CPU lacks
    assert "### stock onmt_train, gpu_ranks 0 0" in ranks
    for part, title in (("layer", "Layer"), ("model", "Model")):
        tables = (out / f"{part}.txt").read_text(encoding="utf-8")
        for heading in (f"SDPA's backends ({title}, fp32)", f"{title}, fp32, triton path: ms",
                        f"{title}, fp32, plain path: peak MiB", f"{title}, fp32: Triton kernels compiled"):
            assert heading in tables, (part, heading)
        assert "Triton's interpreter" in tables
    train = (out / "train.txt").read_text(encoding="utf-8")
    assert "| APE | " in train and "| our shaw | " in train and "| our music | " not in train  # --train-methods
