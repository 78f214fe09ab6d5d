"""The fused kernel proves itself before a run relies on it (attention_kernel: auto).

On CUDA it is taken only in float16 and bfloat16 (FIT_ON_CUDA), whose compiled kernels fit the
GPU's registers (tools/kernel_resources.py); float32 keeps the PyTorch path without a check.

At the first call of each kind (`call_kind`: the variant and its tables, encoder or decoder,
dtype, head size, device, dropout, mask, decoding step) in the process, the kernel and the
layer's plain PyTorch path compute a small problem of that kind, with fresh random tables, in
the run's dtype (under the caller's autocast), and the PyTorch path again in float64: output
and every gradient (q, k, v, the tables). The kernel passes where each of its errors against
float64 (the RMS error and the error along the reference, `error_ratios`) is at most
ERROR_RATIO times the larger of the PyTorch path's own error in the same dtype and the floor
that rounding allows there (`floors`), the way FlashAttention's tests bind their kernels to the
PyTorch path's error; the tests bind the kernel by the same function. A compile error or a miss
turns the kernel off for that kind of call in this process, with one warning line that says why
(the tensor, its error, the ratio judged and what it divided by); the PyTorch path runs.
It takes a few seconds (the compiles, on a GPU); the global random state is left as it was.
"""
import copy
import time

import torch
from onmt.utils.logging import logger

from onmt_posenc.model.attention.fused_kernel import dropout_keep_mask, new_seed, tile_shape

# The kernel passes where each of its errors against float64 (`error_ratios`: the RMS error and
# the scale error of each output and gradient) is at most this many times the larger of the
# PyTorch path's own (in the same dtype, on the same rounded inputs) and the floor that rounding
# alone allows (`floors`). Two correct computations that round at different points differ by
# independent rounding errors, which add in quadrature: 3 lets the kernel have up to 9 times the
# PyTorch path's independent roundings of the same size. FlashAttention's tests take 2 (on the
# largest error). A wrong kernel (a term, a bucket, a head off) is off by tens to thousands.
ERROR_RATIO = 3
# The dtypes 'auto' puts on the kernel on CUDA. In float32 the tiles' products spill registers
# (docs/kernel_resources.md): with IEEE products, OpenNMT-py's default model_dtype fp32, the
# dK/dV kernel keeps kilobytes a thread in local memory; with TF32, tens to hundreds of bytes.
# The CPU's interpreter (tests) has no registers to spill.
FIT_ON_CUDA = (torch.float16, torch.bfloat16)
# (passed, why) for each kind of call checked in this process, or left to the PyTorch path unchecked
VERDICTS = {}
# The kinds of call that attention_kernel 'triton' put on the kernel unchecked (each said once)
UNCHECKED = set()


def call_kind(module, q, k, mask):
    """What a call's kernel depends on (the kernels compiled, the terms they take)."""
    tables = tuple((name, tuple(parameter.shape)) for name, parameter in module.named_parameters()
                   if not name.startswith(("linear_", "final_linear")))
    tf32 = q.dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32
    return (type(module).__name__, "decoder" if module.is_decoder else "encoder", tables, q.dtype, q.size(-1),
            str(q.device), tf32, module.training and module.dropout_p > 0, mask is None,
            "one query" if q.size(2) == 1 else "queries after cached keys" if q.size(2) < k.size(2) else "sequence")


def passes(module, q, k, mask):
    """Has the kernel passed the check for this kind of call (checking it the first time)?"""
    kind = call_kind(module, q, k, mask)
    if kind in VERDICTS:
        return VERDICTS[kind][0]
    described, why_unfit = describe(kind), unfit(q)
    if why_unfit:
        VERDICTS[kind] = False, why_unfit
        logger.info("onmt-posenc: attention_kernel auto keeps %s on the PyTorch path, unchecked: %s", described,
                    why_unfit)
        return False
    started = time.perf_counter()
    VERDICTS[kind] = passed, why = check(module, q, k, mask)
    if passed:
        logger.info("onmt-posenc: the fused Triton kernel passed its first-use check for %s in %.1f s (%s)",
                    described, time.perf_counter() - started, why)
    else:
        logger.warning("onmt-posenc: the fused Triton kernel is off for %s in this process, the PyTorch path "
                       "runs: %s", described, why)
    return passed


def unfit(q):
    """Why 'auto' does not check the kernel for these queries (None: it does)."""
    if q.device.type == "cuda" and q.dtype not in FIT_ON_CUDA:
        return (f"its {str(q.dtype).replace('torch.', '')} kernels spill registers at d_head 64 "
                "(docs/kernel_resources.md); the kernel takes float16 and bfloat16 (onmt_train's model_dtype fp16, "
                "onmt_translate's -precision fp16), attention_kernel triton forces it")
    return None


def unchecked(module, q, k, mask):
    """attention_kernel 'triton': the kernel runs, unchecked; the log says so once a kind, with
    a warning where 'auto' would not have taken it (float32 on CUDA: its kernels spill)."""
    kind = call_kind(module, q, k, mask)
    if kind not in UNCHECKED:
        UNCHECKED.add(kind)
        logger.info("onmt-posenc: the fused Triton kernel runs %s unchecked (attention_kernel triton)", describe(kind))
        why_unfit = unfit(q)
        if why_unfit:
            logger.warning("onmt-posenc: attention_kernel triton puts %s on the fused Triton kernel, which auto "
                           "would not: %s", describe(kind), why_unfit)
    return True


def describe(kind):
    name, side, _, dtype, head_size, device, tf32, dropout, no_mask, queries = kind
    return (f"{name} ({side}, {str(dtype).replace('torch.', '')}{' TF32' if tf32 else ''}, d_head {head_size}, "
            f"{device}{', dropout' if dropout else ''}{', no mask' if no_mask else ''}, {queries})")


def check(module, q, k, mask):
    """(passed, why) for the kernel on a small problem of this call's kind."""
    devices = [q.device] if q.device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices), torch.inference_mode(False), torch.enable_grad():
            return judged(*compute(module, q, k, mask))
    except Exception as error:  # a compile error, anything the kernel raises: the PyTorch path runs
        lines = str(error).strip().splitlines() or [""]
        return False, f"{type(error).__name__}: {lines[0][:300]}"


def problem(module, q, k, mask, generator):
    """q, k, v and the mask of the check: 2 sequences, the layer's heads and head size, a
    length of a query tile, a key tile and 7 keys more (several key tiles and a partial one:
    16 x 16 tiles on the CPU, 35 keys; 64 x 32 at d_head 64 on CUDA, 103), the second sequence ending in
    padding where the call has a mask; the call's kind of queries (all of them, a few after
    cached keys, or one)."""
    block_m, block_n, _ = tile_shape(q.device, "attention_forward", q.size(-1))
    key_len = block_m + block_n + 7
    query_len = key_len if q.size(2) == k.size(2) else min(q.size(2), 3)
    q_, k_, v_ = (torch.randn(2, module.head_count, length, q.size(-1), generator=generator).to(q.device) * 0.5
                  for length in (query_len, key_len, key_len))
    if mask is None:
        return q_, k_, v_, None
    keys = torch.arange(key_len, device=q.device)
    hidden = (keys >= torch.tensor([key_len, key_len - 9], device=q.device)[:, None])[:, None, None, :]
    if module.is_decoder:
        hidden = hidden | (keys[None, :] > torch.arange(key_len - query_len, key_len, device=q.device)[:, None])
    return q_, k_, v_, hidden.expand(2, 1, query_len, key_len)


def compute(module, q, k, mask):
    """The results of the kernel and of the PyTorch path in the call's dtype, and of the
    PyTorch path in float64, on the problem of `problem` and fresh random tables."""
    generator = torch.Generator().manual_seed(0)
    # a copy with fresh random parameters and no layer cache (the module's own are untouched)
    memo = {id(module.layer_cache): (False, {})}
    for parameter in module.parameters():
        memo[id(parameter)] = torch.nn.Parameter(
            (torch.randn(parameter.shape, generator=generator) * 0.3).to(parameter.device, parameter.dtype))
    checked = copy.deepcopy(module, memo)
    checked.fused = False  # the plain path: its dropout can take the kernel's mask
    q_, k_, v_, mask_ = problem(module, q, k, mask, generator)
    q_, k_, v_ = (x.to(q.dtype) for x in (q_, k_, v_))
    if checked.training and checked.dropout_p > 0:
        torch.manual_seed(0)
        seed = new_seed()
        keep = dropout_keep_mask(q_.size(0) * q_.size(1), q_.size(2), k_.size(2), seed, checked.dropout_p,
                                              q.device)
        p = checked.dropout_p
        checked.dropout.forward = lambda weights: weights * keep.view_as(weights).to(weights.dtype) / (1 - p)
    weights = torch.randn(q_.shape, generator=generator).to(q.device)
    torch.manual_seed(0)  # the kernel draws the seed above again
    kernel = results(checked, checked.kernel_attend, (q_, k_, v_, mask_), weights)
    pytorch = results(checked, lambda *inputs: checked.attend(*inputs, False)[0], (q_, k_, v_, mask_), weights)
    reference_module = copy.deepcopy(checked).double()
    with torch.autocast(q.device.type, enabled=False):
        reference = results(reference_module, lambda *inputs: reference_module.attend(*inputs, False)[0],
                            (q_.double(), k_.double(), v_.double(), mask_), weights.double())
    return kernel, pytorch, reference, q.dtype, summed_terms(q_, k_)


def results(module, attend, inputs, weights):
    """{name: tensor}: the output of attend(q, k, v, mask) and the gradients of
    sum(output * weights) for q, k, v and every parameter that takes one."""
    q, k, v, mask = inputs
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    out = attend(q, k, v, mask)
    named = {"q": q, "k": k, "v": v, **dict(module.named_parameters())}
    grads = torch.autograd.grad((out.float() * weights.float()).sum(), list(named.values()), allow_unused=True)
    return {"output": out.detach(), **{f"d{name}": g for name, g in zip(named, grads) if g is not None}}


def summed_terms(q, k):
    """How many products the longest chain of sums of an output or gradient entry takes, for
    queries q (batch, heads, Lq, d) and keys k (.., Lk, d): batch x heads x Lq x Lk x d. (The
    values projection's gradient sums the batch's Lk tokens of dV, each over Lq queries of dO,
    each over the d_model = heads x d outputs of the output projection; a table's gradient the
    batch x heads x Lq x Lk pairs, each a product over d.)"""
    return q.size(0) * q.size(1) * q.size(2) * k.size(2) * q.size(3)


def floors(dtype, terms):
    """(RMS floor, scale floor), relative to the reference's RMS and as a fraction: what rounding
    alone allows a correct computation in `dtype` whose sums of up to `terms` products run in
    float32 (the kernel's accumulators; PyTorch's on these devices) in any order.

    RMS: the result rounded to the dtype is off by up to u (the dtype's unit roundoff, eps / 2)
    of each entry: u times the reference's RMS. A sum of n terms in float32, in any order, with
    independent rounding errors of mean zero, is off by at most about lambda sqrt(n) u32 times the
    terms' size (Higham and Mary, "A new approach to probabilistic rounding error analysis", SIAM
    J. Sci. Comput. 41(5), 2019, Thm. 3.1): sqrt(terms) u32 of the RMS more. In float32 that is
    the larger part (1,600 u at the tests' Music K = 100, where the kernel's RMS error in the
    values projection's gradient is 39 u and the PyTorch path's 14 u); in float16 and bfloat16
    it is under 0.5 u and 0.1 u at the check's problem. Where the terms cancel (a gradient summed
    over pairs whose weights sum to zero) the error is larger than this; the PyTorch path's error
    shows it too.

    Scale: round to nearest is unbiased, so rounding errors average out along the reference;
    one rounding of every entry in the same direction would make a scale error of u. Up to half
    that, u / 2, is taken as rounding, with the float32 sums' share as above (`error_ratios`
    adds the share that errors of the RMS the PyTorch path shows make by chance). A result 1 %
    off is 2.56 u in bfloat16 (u = 2^-8), 20 u in float16."""
    u, u32 = torch.finfo(dtype).eps / 2, torch.finfo(torch.float32).eps / 2
    accumulated = terms**0.5 * u32
    return u + accumulated, u / 2 + accumulated


def error_ratios(kernel, pytorch, reference, dtype, terms):
    """{name: (what, the kernel's error, the PyTorch path's, the unit it is judged by, ratio)}
    for the output and each gradient: the larger ratio of two statistics of the error e (of the
    kernel, of the PyTorch path in the same dtype) against the float64 `reference` r, each
    divided by the larger of the PyTorch path's own and its floor (`floors`; `terms`:
    `summed_terms` of the problem):

    - the RMS error: the size of e. It is the mean of many entries' errors, so the ratio of two
      correct computations' RMS errors is stable where the largest errors' is not (one extreme
      entry each).
    - the scale error |<e, r>| / <r, r>: e's share along r (a result scaled by 1 + s). Rounding
      errors average out there; a wrong factor, table or term that scales the result does not.
      In bfloat16 a result 1 % off has an RMS error that rounding nearly reaches (2.56 u against
      the PyTorch path's 1-2 u at the check's problem), but a scale error four to five times its
      floor. Rounding errors are independent between a tensor's rows (each row of the output,
      of dQ, dK, dV, of a table's gradient takes its own roundings; within a row they may share
      one, the row's softmax normalizer), so their share along r, for errors of RMS e, has a
      standard deviation of about e / sqrt(rows) of r's RMS: two of those, with e the RMS unit
      below, are added to the floor (R = ERROR_RATIO times it is then six)."""
    if kernel.keys() != reference.keys() or pytorch.keys() != reference.keys():
        raise ValueError(f"gradients of {sorted(kernel)} against {sorted(reference)}")
    rms_floor, scale_floor = floors(dtype, terms)
    ratios = {}
    for name, expected in reference.items():
        expected = expected.double()
        rms = expected.pow(2).mean().sqrt().item()
        kernel_error, pytorch_error = kernel[name].double() - expected, pytorch[name].double() - expected
        rms_errors = [e.pow(2).mean().sqrt().item() for e in (kernel_error, pytorch_error)]
        rms_unit = max(rms_errors[1], rms_floor * rms)
        rows = expected.numel() // expected.size(-1) if expected.dim() > 1 else 1
        squares = max(expected.pow(2).sum().item(), 1e-300)
        scale_errors = [abs((e * expected).sum().item()) / squares for e in (kernel_error, pytorch_error)]
        scale_unit = max(scale_errors[1], scale_floor + 2 * rms_unit / max(rms, 1e-300) / rows**0.5)
        judged_by = [("RMS error", *rms_errors, rms_unit), ("scale error", *scale_errors, scale_unit)]
        ratios[name] = max(((*judged, judged[1] / max(judged[3], 1e-300)) for judged in judged_by),
                           key=lambda judged: (judged[4] != judged[4], judged[4]))  # NaN first
    return ratios


def judged(kernel, pytorch, reference, dtype, terms):
    """(passed, why): every ratio of `error_ratios` at most ERROR_RATIO; why names the largest."""
    ratios = error_ratios(kernel, pytorch, reference, dtype, terms)
    name, (what, kernel_error, pytorch_error, unit, worst) = max(ratios.items(), key=lambda item: (
        item[1][4] != item[1][4], item[1][4]))  # NaN first
    if worst <= ERROR_RATIO:
        return True, f"largest error ratio {worst:.2f}, {name}'s {what}"
    return False, (f"its {name}'s {what} against float64 is {kernel_error:.3g}, {worst:.3g} times {unit:.3g}, the "
                   f"larger of the PyTorch path's own ({pytorch_error:.3g}) and rounding's floor (at most "
                   f"{ERROR_RATIO} times passes)")
