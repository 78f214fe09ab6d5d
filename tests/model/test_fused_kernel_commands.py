"""Every method with a relative term through the stock commands with the fused kernel forced on
(attention_kernel: triton; on the CPU under Triton's interpreter): onmt_train follows the same
run on the PyTorch path to its logged precision, and onmt_translate of its checkpoint gives the
same translations on the kernel as on the PyTorch path (the checkpoint's attention_kernel
changed, the weights the same)."""
import re

import onmt  # noqa: F401  (activates the extension: its checkpoints' allow-list)
import pytest
import torch
from conftest import TOY_ENDE, build_tiny_vocab, command, head, run, train_tiny

pytest.importorskip("triton")

STEPS = 2
# A 1-layer model, d_head 16, small batches (the interpreter is slow), no attention dropout (the
# kernel draws its own masks)
SMALL = dict(train_steps=STEPS, report_every=1, layers=1, heads=2, hidden_size=32, word_vec_size=32,
             transformer_ff=64, batch_size=96, attention_dropout=[0.0], position_encoding=False)
METHODS = {
    "shaw shared": dict(max_relative_positions=8),
    "shaw separate": dict(max_relative_positions=8, relative_values="separate"),
    "shaw keys only": dict(max_relative_positions=8, relative_values="none"),
    "music": dict(max_relative_positions=8, relative_attention="music"),
    "t5": dict(max_relative_positions=16, relative_positions_buckets=8),
    "alibi": dict(max_relative_positions=-2),
    "decay": dict(max_relative_positions=0, relative_attention="decay"),
}
KERNEL = {"TRITON_INTERPRET": "1"}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    workdir = build_tiny_vocab(tmp_path_factory.mktemp("kernel_commands"))
    head(TOY_ENDE / "src-test.txt", workdir / "test.src", 4)
    return workdir


def logged(log):
    return re.findall(r"Step +\d+/ *\d+; acc: *([0-9.]+); ppl: *([0-9.]+); xent: *([0-9.]+)", log)


def translate(workdir, model, name):
    """(the translations, onmt_translate's log)."""
    output = workdir / f"{name}.hyp"
    done = run([command("onmt_translate"), "-model", model, "-src", workdir / "test.src", "-output", output,
                "-beam_size", "2", "-max_length", "10"], env=KERNEL)
    return output.read_text(encoding="utf-8").splitlines(), done.stdout + done.stderr


def with_kernel_option(checkpoint_path, value, saved_as):
    """A copy of the checkpoint whose opt says attention_kernel `value` (None: as a checkpoint
    made before the option, which has none), the weights the same."""
    checkpoint = torch.load(checkpoint_path)
    if value is None:
        del checkpoint["opt"].attention_kernel
    else:
        checkpoint["opt"].attention_kernel = value
    torch.save(checkpoint, saved_as)
    return saved_as


@pytest.mark.parametrize("method", sorted(METHODS))
def test_train_and_translate_on_the_kernel(workdir, method):
    name = method.replace(" ", "_")
    runs = {}
    for kernel in ("triton", "pytorch"):
        result = train_tiny(workdir, f"{name}_{kernel}", env=KERNEL, **SMALL, **METHODS[method],
                            attention_kernel=kernel)
        runs[kernel] = workdir / f"{name}_{kernel}_step_{STEPS}.pt", result.stdout + result.stderr
    assert "the fused Triton kernel runs" in runs["triton"][1] and "Triton" not in runs["pytorch"][1]
    assert len(logged(runs["triton"][1])) == STEPS
    assert logged(runs["triton"][1]) == logged(runs["pytorch"][1])
    assert torch.load(runs["triton"][0])["opt"].attention_kernel == "triton"
    on_pytorch = with_kernel_option(runs["triton"][0], "pytorch", workdir / f"{name}_triton_on_pytorch.pt")
    kernel_lines, log = translate(workdir, runs["triton"][0], f"{name}_kernel")
    assert len(kernel_lines) == 4 and any(kernel_lines) and "the fused Triton kernel runs" in log
    pytorch_lines, log = translate(workdir, on_pytorch, f"{name}_pytorch")
    assert kernel_lines == pytorch_lines and "Triton" not in log


def test_a_checkpoint_from_before_the_option_takes_the_checked_kernel(workdir):
    """A checkpoint made before attention_kernel existed holds none: 'auto', the kernel once it
    has passed its first-use check, with the PyTorch path's translations."""
    result = train_tiny(workdir, "before_option", **SMALL, **METHODS["shaw shared"], attention_kernel="pytorch")
    assert "Triton" not in result.stdout + result.stderr
    trained = workdir / f"before_option_step_{STEPS}.pt"
    before = with_kernel_option(trained, None, workdir / "before_option_old.pt")
    lines, log = translate(workdir, before, "before_option_old")
    assert "passed its first-use check" in log and "unchecked" not in log
    assert lines == translate(workdir, trained, "before_option_pytorch")[0]
