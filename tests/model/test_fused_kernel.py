"""The fused Triton attention kernel (onmt_posenc/model/attention/fused_kernel) against each
method's PyTorch path, on the CPU through Triton's interpreter: outputs and every gradient
(input, projections, tables), with the encoder's padding mask and the decoder's causal and
padding masks, lengths that are not a multiple of the 16-wide blocks, step-by-step decoding
with the layer cache (one query), attention dropout given the same mask, float16 and
bfloat16.

ONMT_POSENC_KERNEL_TEST_DEVICE=cuda runs the same tests compiled on a GPU, without the
interpreter (tools/gpu_check.sh does).
"""
import os
import sys

import pytest
import torch
from onmt.modules.multi_headed_attn import MultiHeadedAttention
from rounding import assert_matches
from test_relative_attention import SIDES, randomized

from onmt_posenc.model.attention import fused_kernel, replacement_for

DEVICE = torch.device(os.environ.get("ONMT_POSENC_KERNEL_TEST_DEVICE", "cpu"))



def import_triton_interpreted():
    """Triton's interpreter must be on when triton is first imported: its language's own
    helpers (tl.zeros, ...) are kernels defined then. On for that import only, so that the
    other tests (and the commands they run) never see it; the fixture below turns it on
    again around each test here, for our kernels and `fused_kernel.usable`."""
    if "triton" in sys.modules or DEVICE.type == "cuda":
        pytest.importorskip("triton")
        return  # imported here before (pytest imports this file once per process)
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        pytest.importorskip("triton")
    finally:
        del os.environ["TRITON_INTERPRET"]


import_triton_interpreted()

HEADS, DIM, FAR = 2, 32, 6  # d_head 16, the kernel's smallest tile
LENGTHS = [37, 30]  # 37: three blocks of 16, the last partial; distances beyond FAR both ways

# Each method as `install` builds it from OpenNMT-py's layer: its MultiHeadedAttention
# options and our relative_attention / relative_values.
METHODS = {
    "absolute": (dict(), None, None),
    "rotary": (dict(max_relative_positions=-1), None, None),
    "alibi": (dict(max_relative_positions=-2), None, None),
    "t5": (dict(max_relative_positions=20, relative_positions_buckets=8), None, None),
    "shaw shared": (dict(max_relative_positions=FAR), "shaw", "shared"),
    "shaw separate": (dict(max_relative_positions=FAR), "shaw", "separate"),
    "shaw keys only": (dict(max_relative_positions=FAR), "shaw", "none"),
    "music": (dict(max_relative_positions=FAR), "music", None),
    "decay": (dict(), "decay", None),
}


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    """On the CPU: Triton's interpreter for this file's tests only: TRITON_INTERPRET is read when a
    kernel is defined (the kernel modules are first imported under it here) and by
    `fused_kernel.usable` at every call; the other tests' processes never see it."""
    if DEVICE.type == "cpu":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    import onmt_posenc.model.attention.fused_kernel.function  # noqa: F401


def build(method, is_decoder, dropout=0.0):
    options, relative_attention, values = METHODS[method]
    stock = MultiHeadedAttention(HEADS, DIM, dropout=dropout, is_decoder=is_decoder, attn_type="self", **options)
    module = replacement_for(stock, "scaled-dot-flash", relative_attention, values)
    return randomized(module).to(DEVICE)


def run(module, x, mask, kernel, seed=1):
    """Output and the gradients of the input and of every parameter, on the kernel or on
    the method's plain PyTorch path (which takes attention dropout from `module.dropout`)."""
    module.kernel, module.fused = kernel, False
    torch.manual_seed(seed)
    x = x.clone().requires_grad_()
    out, _ = module(x, x, x, mask=mask)
    (out * torch.linspace(-1, 1, out.numel(), device=DEVICE).view_as(out)).sum().backward()
    grads = {name: p.grad.clone() for name, p in module.named_parameters()}
    module.zero_grad()
    return out, x.grad, grads


def assert_same(expected, actual, rounding=None, eps_multiple=64):
    (out_e, dx_e, grads_e), (out_a, dx_a, grads_a) = expected, actual
    assert_matches(out_a.float(), out_e, rounding, eps_multiple, msg="output")
    assert_matches(dx_a.float(), dx_e, rounding, eps_multiple, msg="input gradient")
    assert grads_a.keys() == grads_e.keys()
    for name in grads_e:
        assert_matches(grads_a[name].float(), grads_e[name], rounding, eps_multiple, msg=name)


def inputs(lengths=LENGTHS):
    return torch.randn(len(lengths), max(lengths), DIM, generator=torch.Generator().manual_seed(2)).to(DEVICE)


def masks(side, lengths=LENGTHS):
    return SIDES[side][1](lengths).to(DEVICE)


def test_the_kernel_runs_only_where_asked():
    """Without the interpreter on the CPU, and with a head size no tile takes, the PyTorch path."""
    q = torch.zeros(1, 1, 4, 16, device=DEVICE)
    assert fused_kernel.usable(q)
    assert not fused_kernel.usable(torch.zeros(1, 1, 4, 24, device=DEVICE))
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("TRITON_INTERPRET")
        assert not fused_kernel.usable(q)


@pytest.mark.parametrize("side", sorted(SIDES))
@pytest.mark.parametrize("method", sorted(METHODS))
def test_kernel_matches_pytorch_path(method, side):
    module = build(method, SIDES[side][0]).train()
    x, mask = inputs(), masks(side)
    assert_same(run(module, x, mask, kernel=False), run(module, x, mask, kernel=True))


@pytest.mark.parametrize("method", ["shaw shared", "music", "t5", "decay"])
def test_step_by_step_decoding(method):
    """One query at a time with the layer cache (the keys of the earlier steps): the same
    outputs, and through them the same gradients, as the PyTorch path stepping alike."""
    module = build(method, is_decoder=True).train()
    x = inputs([21, 21])

    def stepped(kernel):
        module.kernel, module.fused = kernel, False
        x_ = x.clone().requires_grad_()
        module.layer_cache = (True, {"keys": torch.tensor([]), "values": torch.tensor([])})
        out = torch.cat([module(x_[:, t : t + 1], x_[:, t : t + 1], x_[:, t : t + 1], mask=None)[0]
                         for t in range(x.size(1))], dim=1)
        module.layer_cache = (False, {"keys": torch.tensor([]), "values": torch.tensor([])})
        (out * torch.linspace(-1, 1, out.numel(), device=DEVICE).view_as(out)).sum().backward()
        grads = {name: p.grad.clone() for name, p in module.named_parameters()}
        module.zero_grad()
        return out, x_.grad, grads

    expected = stepped(kernel=False)
    assert_same(expected, stepped(kernel=True))
    # and the whole sequence at once (no cache) gives the same outputs
    full, _ = module(x, x, x, mask=masks("decoder", [21, 21]))
    assert_matches(full, expected[0])


@pytest.mark.parametrize("side", sorted(SIDES))
@pytest.mark.parametrize("method", ["absolute", "shaw separate", "music", "decay"])
def test_dropout_matches_pytorch_path_given_the_same_mask(method, side):
    """The kernel draws its dropout mask from a seed (and backward the same mask again);
    the PyTorch path, given that mask as its dropout, computes the same outputs and
    gradients. The mask keeps about 1 - p of the pairs."""
    p = 0.3
    module = build(method, SIDES[side][0], dropout=p).train()
    x, mask = inputs(), masks(side)
    batch, length = x.shape[:2]
    torch.manual_seed(1)
    keep = fused_kernel.dropout_keep_mask(batch * HEADS, length, length, fused_kernel.new_seed(), p, x.device)
    assert abs(keep.float().mean().item() - (1 - p)) < 0.03
    module.dropout.forward = lambda weights: weights * keep.view_as(weights) / (1 - p)
    expected = run(module, x, mask, kernel=False)
    del module.dropout.forward
    assert_same(expected, run(module, x, mask, kernel=True))


# Against the float32 PyTorch path on the same rounded parameters and inputs, within 64 eps
# of the low precision (float16 2**-10, bfloat16 2**-7) times each tensor's largest entry:
# the kernel rounds its tiles (the weights before the product with v, dS before dQ and dK)
# to that precision, and sums in float32.
LOW_PRECISION = [torch.float16, pytest.param(torch.bfloat16, marks=pytest.mark.skipif(
    DEVICE.type == "cpu", reason="Triton 3.9's interpreter multiplies bfloat16 tiles wrongly (tl.dot of a "
    "16x16 bfloat16 tile with itself: off by 2.6e10; upcast to float32 first: exact)"))]


@pytest.mark.parametrize("dtype", LOW_PRECISION)
@pytest.mark.parametrize("side", sorted(SIDES))
@pytest.mark.parametrize("method", ["alibi", "t5", "shaw shared", "music", "decay"])
def test_low_precision(method, side, dtype):
    module = build(method, SIDES[side][0]).train().to(dtype)
    x, mask = inputs().to(dtype), masks(side)
    actual = run(module, x, mask, kernel=True)
    assert actual[0].dtype == dtype
    expected = run(module.float(), x.float(), mask, kernel=False)
    assert_same(expected, actual, rounding=dtype)


@pytest.mark.parametrize("extra, kernel", [
    ([], True),
    (["-attention_kernel", "pytorch"], False),
    (["-self_attn_type", "scaled-dot"], False),
])
@pytest.mark.parametrize("method", [["-position_encoding"], ["-max_relative_positions", "8"],
                                    ["-relative_attention", "decay"]])
def test_attention_kernel_option(method, extra, kernel):
    """onmt_train's options choose the kernel for every self-attention of a model: on by
    default (where it runs), off with attention_kernel pytorch and with self_attn_type
    scaled-dot (OpenNMT-py's plain path, the comparison)."""
    import pyonmttok
    from onmt import model_builder
    from onmt.bin.train import _get_parser
    from onmt.constants import DefaultTokens
    from onmt.utils.parse import ArgumentParser

    from onmt_posenc.model.attention.self_attention import SelfAttention

    opt, _ = _get_parser().parse_known_args(
        ["-data", "{}", "-src_vocab", "unused", "-encoder_type", "transformer", "-decoder_type", "transformer",
         "-layers", "1", "-heads", "2", "-hidden_size", "32", "-word_vec_size", "32", "-transformer_ff", "64",
         *method, *extra])
    ArgumentParser.update_model_opts(opt)
    ArgumentParser.validate_model_opts(opt)
    specials = [DefaultTokens.UNK, DefaultTokens.PAD, DefaultTokens.BOS, DefaultTokens.EOS]
    vocab = pyonmttok.build_vocab_from_tokens(["a", "b"], special_tokens=specials)
    model = model_builder.build_base_model(opt, {"src": vocab, "tgt": vocab, "data_task": "seq2seq",
                                                 "decoder_start_token": DefaultTokens.BOS})
    attentions = [module for module in model.modules() if isinstance(module, SelfAttention)]
    assert len(attentions) == 2
    assert all(module.kernel is kernel for module in attentions)


# The kernels compiled for an H100 (sm_90) by Triton's own compiler, which needs no GPU: what
# the interpreter lets through and a compiled kernel does not (a global read in a kernel, a
# type that changes in a loop) fails here. Run without the interpreter, in its own process.
COMPILE_FOR_SM90 = """
import sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from onmt_posenc.model.attention.fused_kernel.backward import attention_backward_keys, attention_backward_queries
from onmt_posenc.model.attention.fused_kernel.forward import attention_forward

dtype, precision = sys.argv[1], (None if sys.argv[1] != "fp32" else "ieee")
pointers = dict(LSE="fp32", W="fp32", G="fp32", DELTA="fp32", DTABLE="fp32", SLOPES="fp32", BUCKET="i32", PAD="u8",
                LENGTHS="i32")
constants = dict(D=64, BLOCK_M=64, BLOCK_N=32, CAUSAL=True, HAS_TABLE=True, ALIBI=True, HAS_PAD=True, RAMP=2,
                 DROPOUT=True, VALUES=True, NB_PAD=64, ROW_TABLE=True, PRECISION=precision)
for kernel in (attention_forward, attention_backward_keys, attention_backward_queries):
    names = kernel.arg_names
    # pointers are named in capitals (H, the head count, is not one)
    signature = {name: "constexpr" if name in constants else "*" + pointers.get(name, dtype)
                 if name.isupper() and name != "H" else "fp32" if name in ("dropout_p", "farthest_weight") else "i32"
                 for name in names}
    source = ASTSource(fn=kernel, signature=signature,
                       constexprs={(names.index(name),): value for name, value in constants.items() if name in names})
    print(kernel.__name__, "cubin" in triton.compile(source, target=GPUTarget("cuda", 90, 32)).asm)
"""


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
def test_kernels_compile_for_a_gpu(dtype, tmp_path):
    """Every kernel with every term on (the decaying mask's ramp with a table and ALiBi too:
    the compiler sees each branch) compiles to an sm_90 cubin."""
    import subprocess

    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env.update(TRITON_CACHE_DIR=str(tmp_path), TRITON_DEFAULT_FP_FUSION="1")
    done = subprocess.run([sys.executable, "-c", COMPILE_FOR_SM90, dtype], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["attention_forward", "True", "attention_backward_keys", "True",
                                   "attention_backward_queries", "True"]


def test_a_variant_that_does_not_describe_its_term_keeps_its_pytorch_paths():
    """Every registered variant describes its term to the kernel (or has none); one added with
    its own relative_logits and no kernel_terms is not put on the kernel, which would drop
    its term."""
    from onmt_posenc.model.attention import ATTENTIONS
    from onmt_posenc.model.attention.self_attention import SelfAttention

    class Window(SelfAttention):
        def relative_logits(self, q, key_len):
            return torch.zeros(q.size(2), key_len)

    assert all(variant.kernel_covers() for variant in ATTENTIONS.values())
    assert not Window.kernel_covers()
