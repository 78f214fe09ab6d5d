"""onmt_train's and onmt_translate's logs say what ran, once per process: each side's position
method with its settings, each side's self-attention with its settings, the path every kind of
self-attention call took, and why the fused kernel did not take it where it was asked for
(hooks/model_builder.py, model/attention/self_attention.py)."""
import collections
import re

import pytest
from conftest import TOY_ENDE, build_tiny_vocab, command, head, run, train_tiny

# method -> (its onmt_train keys, each side's positions line, each side's self-attention line)
METHODS = {
    "ape": ({}, "sinusoidal, SinusoidalEncoding(embedding_scale=sqrt(d))", "2 x SelfAttention()"),
    "shape": ({"shape_max_shift": 20, "shape_inference_offset": 20},
              "shape, ShiftedSinusoidalEncoding(max_shift=20, inference_offset=20, embedding_scale=sqrt(d))",
              "2 x SelfAttention()"),
    "rpe": ({"position_encoding": False, "max_relative_positions": 8},
            "none (no position module, no sqrt(d) scale: OpenNMT-py's embeddings without position_encoding)",
            "2 x ShawRelativeAttention(max_relative_positions=8, values='shared')"),
    "alibi": ({"position_encoding": False, "max_relative_positions": -2},
              "none (no position module, no sqrt(d) scale: OpenNMT-py's embeddings without position_encoding)",
              "2 x AlibiAttention()"),
}
SIDES = ("encoder", "decoder")
# tiny_transformer: hidden_size 64, heads 4
D_HEAD = 16
SHAW_PLAIN = "its key term is gathered per (query, key) pair and its value term sums the weights per distance"
ON_THE_CPU = "the queries are on cpu, and the kernel runs on CUDA"


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """{(method, command): its log lines without the logging prefix}: each method trained 2 steps
    with onmt_train (attention_kernel triton for Shaw), then its model translated by onmt_translate
    (attention_kernel triton for APE and Shaw)."""
    workdir = build_tiny_vocab(tmp_path_factory.mktemp("what_ran"))
    src = head(TOY_ENDE / "src-test.txt", workdir / "test.src", 5)
    logs = {}
    for method, (keys, _, _) in METHODS.items():
        kernel = {"attention_kernel": "triton"} if method == "rpe" else {}
        trained = train_tiny(workdir, method, train_steps=2, **keys, **kernel)
        args = ["-attention_kernel", "triton"] if method in ("ape", "rpe") else []
        translated = run([command("onmt_translate"), "-model", workdir / f"{method}_step_2.pt", "-src", src,
                          "-output", workdir / f"{method}.hyp", *args])
        for name, result in (("onmt_train", trained), ("onmt_translate", translated)):
            logs[method, name] = [re.sub(r"^\[[\d\- :,]+ (\w+)\] ", r"\1 ", line)
                                  for line in (result.stdout + result.stderr).splitlines()]
    return logs


def said(lines, start):
    """The lines that start with `start` (after the level), each with how often it was said."""
    return collections.Counter(line for line in lines if line.split(" ", 1)[-1].startswith(start))


@pytest.mark.parametrize("name", ["onmt_train", "onmt_translate"])
@pytest.mark.parametrize("method", METHODS)
def test_each_side_s_positions_and_self_attention_are_said_once(logs, method, name):
    _, positions, attention = METHODS[method]
    lines = logs[method, name]
    assert said(lines, "onmt-posenc positions of the") == {
        f"INFO onmt-posenc positions of the {side}: {positions}": 1 for side in SIDES}
    assert said(lines, "onmt-posenc self-attention of the") == {
        f"INFO onmt-posenc self-attention of the {side}: {attention}": 1 for side in SIDES}


def paths(lines):
    """{(level, path, the call's kind): what follows} of the lines naming a self-attention's path;
    each kind said once."""
    found = {}
    for line in lines:
        match = re.fullmatch(r"(\w+) onmt-posenc self-attention on (PyTorch's \w+(?: path)?) \(([^)]*)\): (.*)", line)
        if match:
            key = match.groups()[:3]
            assert key not in found, line
            found[key] = match.group(4)
    return found


@pytest.mark.parametrize("method", ["ape", "shape"])
def test_absolute_positions_say_their_sdpa_backend(logs, method):
    trained, translated = paths(logs[method, "onmt_train"]), paths(logs[method, "onmt_translate"])
    for side in SIDES:
        what = trained["INFO", "PyTorch's SDPA", f"{side}, whole sequence, float32, cpu, d_head {D_HEAD}, "
                                                 "boolean mask, dropout"]
        assert re.fullmatch(r"\w+ backend", what), what  # no kernel to speak of: absolute positions have no term
    assert re.fullmatch(r"\w+ backend", translated["INFO", "PyTorch's SDPA", f"decoder, one query, float32, cpu, "
                                                                             f"d_head {D_HEAD}, no mask"])
    # on PyTorch's SDPA alone, every call
    assert {path for _, path, _ in {**trained, **translated}} == {"PyTorch's SDPA"}


def test_attention_kernel_triton_on_absolute_positions_is_said_not_taken(logs):
    assert said(logs["ape", "onmt_translate"], "onmt-posenc: attention_kernel triton") == {
        "WARNING onmt-posenc: attention_kernel triton, but the fused Triton kernel does not take SelfAttention: it "
        "has no relative term for the kernel (PyTorch's SDPA runs)": 1}
    assert not said(logs["shape", "onmt_translate"], "onmt-posenc: attention_kernel")  # auto, the default


@pytest.mark.parametrize("name", ["onmt_train", "onmt_translate"])
def test_shaw_says_its_plain_path_and_why_the_kernel_it_asked_for_did_not_run(logs, name):
    found = paths(logs["rpe", name])
    assert {path for _, path, _ in found} == {"PyTorch's plain path"}
    kinds = [f"{side}, whole sequence, float32, cpu, d_head {D_HEAD}, mask, dropout" for side in SIDES] \
        if name == "onmt_train" else [f"encoder, whole sequence, float32, cpu, d_head {D_HEAD}, mask",
                                      f"decoder, one query, float32, cpu, d_head {D_HEAD}, no mask"]
    for kind in kinds:
        what = found["WARNING", "PyTorch's plain path", kind]  # a warning: attention_kernel triton was asked for
        assert what.startswith(f"{SHAW_PLAIN}; the fused Triton kernel not taken: attention_kernel triton, but "
                               f"{ON_THE_CPU}"), what


def test_a_lab_method_says_its_sdpa_backend_and_why_not_the_kernel(logs):
    """ALiBi with attention_kernel auto (the default) on the CPU: SDPA with its additive bias, and
    the kernel, which takes ALiBi on CUDA, not taken, in an info line."""
    found = paths(logs["alibi", "onmt_train"])
    for side in SIDES:
        what = found["INFO", "PyTorch's SDPA", f"{side}, whole sequence, float32, cpu, d_head {D_HEAD}, additive bias, "
                                               "dropout"]
        assert re.fullmatch(rf"\w+ backend; the fused Triton kernel not taken: attention_kernel auto, but "
                            rf"{re.escape(ON_THE_CPU)}.*", what), what
