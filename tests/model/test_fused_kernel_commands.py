"""Every method with a relative term through the stock commands with the fused kernel forced on
(attention_kernel: triton; on the CPU under Triton's interpreter): onmt_train follows the same
run on the PyTorch path to its logged precision, and onmt_translate of its checkpoint gives the
same translations on the kernel as on the PyTorch path (onmt_translate's own attention_kernel).
The kernel is the running command's choice, never the checkpoint's."""
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


@pytest.fixture(scope="module")
def trained(workdir):
    """trained(method, kernel): (the checkpoint of `method` trained STEPS updates with
    attention_kernel `kernel`, onmt_train's log), each trained once for the module (the
    checkpoint tests below start from the same Shaw runs as the parametrized test)."""
    done = {}

    def checkpoint(method, kernel):
        if (method, kernel) not in done:
            name = f"{method.replace(' ', '_')}_{kernel}"
            result = train_tiny(workdir, name, env=KERNEL, **SMALL, **METHODS[method], attention_kernel=kernel)
            done[method, kernel] = workdir / f"{name}_step_{STEPS}.pt", result.stdout + result.stderr
        return done[method, kernel]

    return checkpoint


def logged(log):
    return re.findall(r"Step +\d+/ *\d+; acc: *([0-9.]+); ppl: *([0-9.]+); xent: *([0-9.]+)", log)


def translate(workdir, model, name, *options):
    """(the translations, onmt_translate's log)."""
    output = workdir / f"{name}.hyp"
    done = run([command("onmt_translate"), "-model", model, "-src", workdir / "test.src", "-output", output,
                "-beam_size", "2", "-max_length", "10", *options], env=KERNEL)
    return output.read_text(encoding="utf-8").splitlines(), done.stdout + done.stderr


def without_kernel_option(checkpoint_path, saved_as):
    """A copy of the checkpoint whose opt has no attention_kernel (as a checkpoint made before
    the option), the weights the same."""
    checkpoint = torch.load(checkpoint_path)
    del checkpoint["opt"].attention_kernel
    torch.save(checkpoint, saved_as)
    return saved_as


def kept_off_the_kernel(log):
    """The log of a command run with attention_kernel pytorch: the kernel neither ran nor was
    checked, and the log says why (the attention path's line)."""
    return ("the fused Triton kernel runs" not in log and "first-use check" not in log
            and "the fused Triton kernel not taken: attention_kernel pytorch" in log)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_train_and_translate_on_the_kernel(workdir, trained, method):
    name = method.replace(" ", "_")
    runs = {kernel: trained(method, kernel) for kernel in ("triton", "pytorch")}
    assert "the fused Triton kernel runs" in runs["triton"][1] and kept_off_the_kernel(runs["pytorch"][1])
    assert len(logged(runs["triton"][1])) == STEPS
    assert logged(runs["triton"][1]) == logged(runs["pytorch"][1])
    kernel_lines, log = translate(workdir, runs["triton"][0], f"{name}_kernel", "-attention_kernel", "triton")
    assert len(kernel_lines) == 4 and any(kernel_lines) and "the fused Triton kernel runs" in log
    pytorch_lines, log = translate(workdir, runs["triton"][0], f"{name}_pytorch", "-attention_kernel", "pytorch")
    assert kernel_lines == pytorch_lines and kept_off_the_kernel(log)


def test_a_checkpoint_from_before_the_option_takes_the_checked_kernel(workdir, trained):
    """A checkpoint made before attention_kernel existed holds none: 'auto', the kernel once it
    has passed its first-use check, with the PyTorch path's translations."""
    checkpoint, log = trained("shaw shared", "pytorch")
    assert kept_off_the_kernel(log)
    before = without_kernel_option(checkpoint, workdir / "before_option_old.pt")
    lines, log = translate(workdir, before, "before_option_old")
    assert "passed its first-use check" in log and "unchecked" not in log
    assert lines == translate(workdir, checkpoint, "before_option_pytorch", "-attention_kernel", "pytorch")[0]


def test_a_checkpoint_trained_unchecked_translates_and_resumes_on_the_checked_kernel(workdir, trained):
    """A checkpoint trained with attention_kernel triton (as every checkpoint made before 'auto'
    was the default) holds 'triton' in its options; onmt_translate and a run resumed from it take
    their own option, 'auto' by default: never the kernel unchecked (here, on the interpreter, the
    kernel after its first-use check; on CUDA in float32, the PyTorch path). The resumed run's
    checkpoint records its own option."""
    checkpoint, log = trained("shaw shared", "triton")
    assert "the fused Triton kernel runs" in log
    assert torch.load(checkpoint)["opt"].attention_kernel == "triton"
    lines, log = translate(workdir, checkpoint, "forced_default")
    assert "passed its first-use check" in log and "the fused Triton kernel runs" not in log
    assert lines == translate(workdir, checkpoint, "forced_pytorch", "-attention_kernel", "pytorch")[0]
    resumed = train_tiny(workdir, "forced_resumed", env=KERNEL, **{**SMALL, "train_steps": STEPS + 1},
                         **METHODS["shaw shared"], train_from=str(checkpoint))
    log = resumed.stdout + resumed.stderr
    assert "passed its first-use check" in log and "the fused Triton kernel runs" not in log
    assert torch.load(workdir / f"forced_resumed_step_{STEPS + 1}.pt")["opt"].attention_kernel == "auto"
