"""A fused self-attention kernel family in Triton: FlashAttention's online softmax, forward
and backward, with the padding and causal masks, attention dropout drawn in the kernel
(backward draws the same mask again from the seed) and each method's relative term as a
function of (i, j) inside the kernel:

- a table read at a bucket of j - i: one row per query for Shaw's key term and Music
  (T[i, c] = q_i . R[c], i.e. Q R^T, made before the kernel, and again for the backward),
  read at clip(j - i, lo, hi) - lo, or one row per head shared by all queries for T5's
  bias, read at a bucket looked up per distance;
- ALiBi's -m_h |j - i|;
- the decaying mask's ramp on the normalized weights;
- Shaw's value term: per row, the weights summed per bucket, times R_V.

Each per-bucket sum costs O(M N) a tile of M queries and N keys (`tiles.py`), and the forward
keeps only each row's maximum and log-sum for the backward. With attention_kernel 'auto' a
layer takes the kernel once it has passed its first-use check (`first_use.py`).

This module imports no Triton: `attention` loads the kernels on first use, so CPU users
without Triton are unaffected. The kernels run on CUDA, and on the CPU under Triton's
interpreter (TRITON_INTERPRET=1, set before Triton is first imported), as the parity tests
run them.
"""
import functools
import importlib.util
import os
from dataclasses import dataclass
from typing import Optional

import torch
from onmt.utils.logging import logger

# The head sizes a tile's matrix products take (tl.arange needs a power of two, tl.dot >= 16)
HEAD_SIZES = (16, 32, 64, 128)
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# (queries, keys, warps) per tile of each kernel, for head sizes up to 64 and for 128: small
# under the interpreter, where a tile is a numpy array. On CUDA, tiles that compile without
# spills for sm_80 and sm_90 at d_head 64 (tools/kernel_resources.py measures them; the dQ
# kernel's tile is square: T5's sums per distance need it).
TILES = {
    "cuda": {
        64: {"attention_forward": (64, 32, 4), "attention_backward_keys": (32, 32, 4),
             "attention_backward_queries": (32, 32, 4)},
        128: {"attention_forward": (32, 32, 4), "attention_backward_keys": (32, 16, 4),
              "attention_backward_queries": (32, 32, 8)},
    },
    "cpu": {size: dict.fromkeys(("attention_forward", "attention_backward_keys", "attention_backward_queries"),
                                (16, 16, 4)) for size in (64, 128)},
}
# Software-pipelining stages of every launch (tools/kernel_resources.py compiles with them)
NUM_STAGES = 3


def tile_shape(device, kernel_name, head_size):
    """(BLOCK_M, BLOCK_N, warps) of a kernel for this device and head size."""
    return TILES[device.type][64 if head_size <= 64 else 128][kernel_name]


def interpreted():
    """Does Triton run kernels on the CPU (its interpreter) in this process?"""
    return os.environ.get("TRITON_INTERPRET") == "1"


@functools.lru_cache(maxsize=None)
def triton_installed():
    return importlib.util.find_spec("triton") is not None


# CUDA's limit on a launch grid's axes 1 and 2 (axis 0's is 2^31 - 1). Every launch of the kernels
# (forward, both backward kernels, the dropout mask's) puts batch x heads on axis 1 and the blocks
# of queries or keys (at most 2^31 / 16) on axis 0; translation's batch is the sentences times the
# beam (8 heads: 8,191 sequences).
GRID_AXIS_LIMIT = 65_535
# The batch x heads of the calls that were over GRID_AXIS_LIMIT in this process (the log says so at the first)
OVER_GRID = set()


def unusable(q):
    """Why the kernels cannot compute attention for these scaled queries (batch, heads, Lq, d),
    in words (None: they can)."""
    why = []
    if not (q.device.type == "cuda" or (q.device.type == "cpu" and interpreted())):
        why.append(f"the queries are on {q.device.type}, and the kernel runs on CUDA (on the CPU only under "
                   "Triton's interpreter, TRITON_INTERPRET=1)")
    if not triton_installed():
        why.append("Triton is not installed")
    if q.size(-1) not in HEAD_SIZES:
        why.append(f"d_head {q.size(-1)} is not one of {', '.join(map(str, HEAD_SIZES))}")
    if q.dtype not in DTYPES:
        why.append(f"{str(q.dtype).replace('torch.', '')} is not float32, float16 or bfloat16")
    return "; ".join(why) or None


def usable(q):
    """Can the kernels compute attention for these scaled queries (batch, heads, Lq, d)?"""
    return unusable(q) is None and fits_grid(q)


def fits_grid(q):
    """Does batch x heads fit a launch grid's axis 1 (GRID_AXIS_LIMIT)? Where it does not, the
    PyTorch path runs (the log says so once), on the CPU's interpreter too, which has no limit."""
    programs = q.size(0) * q.size(1)
    if programs <= GRID_AXIS_LIMIT:
        return True
    if not OVER_GRID:
        logger.info("onmt-posenc: batch x heads %d x %d = %d is over the %d programs a CUDA launch grid takes on "
                    "its axis 1: the PyTorch path runs such calls, not the fused Triton kernel", q.size(0), q.size(1),
                    programs, GRID_AXIS_LIMIT)
    OVER_GRID.add(programs)
    return False


@dataclass
class RelativeTerms:
    """What the kernels add to q_i . k_j and how they weigh it, besides the tensors that
    take gradients (the table, R_V).

    `clip`: (lo, hi) for a per-query table (Shaw, Music): the table R (buckets, d) or
    (heads, buckets, d) holds the distances lo..hi, and q_i . R[clip(j - i, lo, hi) - lo] is
    added; `bucket`: int32, T5's bucket of each distance j - i = -(Lk-1)..Lq-1 in its shared
    (heads, buckets) table; `slopes`: ALiBi's m_h (heads,); `key_padding`: uint8 (batch,
    Lk), 1 at padding; `ramp`: 0 none, 1 the decaying mask's causal ramp, 2 its
    bidirectional one over `lengths` (int32 (batch,)); `dropout`: attention dropout's p,
    drawn from `seed`.
    """

    causal: bool
    key_padding: Optional[torch.Tensor] = None
    clip: Optional[tuple] = None
    bucket: Optional[torch.Tensor] = None
    slopes: Optional[torch.Tensor] = None
    ramp: int = 0
    lengths: Optional[torch.Tensor] = None
    farthest_weight: float = 0.0
    dropout: float = 0.0
    seed: int = 0


def attention(q, k, v, terms, table=None, values=None):
    """softmax(q k^T + T[., bucket(j - i)] - m |j - i|) weighted by the ramp and dropout,
    times v, plus Shaw's value term with R_V = `values` (buckets, d): q (batch, heads, Lq,
    d) already scaled, k and v (batch, heads, Lk, d), the queries being the last Lq of Lk
    positions; `table` R (see `RelativeTerms.clip`: T = q R^T) or T5's (heads, buckets)."""
    from onmt_posenc.model.attention.fused_kernel.function import FusedAttention

    return FusedAttention.apply(q, k, v, table, values, terms)


def new_seed():
    """A seed for the kernels' dropout, from PyTorch's generator (so torch.manual_seed
    makes runs repeat)."""
    return int(torch.randint(2**31 - 1, ()).item())


def dropout_keep_mask(batch_heads, query_len, key_len, seed, dropout, device):
    """The (batch * heads, Lq, Lk) mask (True: kept) that the kernels draw for `seed`."""
    from onmt_posenc.model.attention.fused_kernel.function import dropout_keep_mask as draw

    return draw(batch_heads, query_len, key_len, seed, dropout, device)
