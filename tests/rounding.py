"""Comparing two computations of the same formula in floating point."""
import torch

# Two correct orders of summation differ by a few eps of the largest summands. The
# largest differences measured, in eps times the largest entry of the tensor compared:
# 7.9 (float32, an AVX2 CPU: Music against the direct computation), 3.7 (float32, an
# AVX512 CPU: fused attention's query gradient), 1.6 (bfloat16 autocast against float32).
# A wrong formula is off by orders of magnitude more.
EPS_MULTIPLE = 64


def assert_matches(actual, expected, rounding=None, eps_multiple=EPS_MULTIPLE, msg=None):
    """Every entry within eps_multiple * eps * max|expected| of `expected`, eps that of
    `rounding` (default: expected's dtype). An entry's rounding error follows the
    summands that made it, as large as the tensor's largest entries, not the entry:
    a fixed tolerance fails on large values and blurs small ones."""
    eps = torch.finfo(rounding or expected.dtype).eps
    atol = eps_multiple * eps * expected.abs().max().item()
    torch.testing.assert_close(actual, expected, rtol=0, atol=atol, msg=msg)
