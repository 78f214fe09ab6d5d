"""A fused self-attention kernel family in Triton: FlashAttention's online softmax, forward
and backward, with the padding and causal masks, attention dropout drawn in the kernel
(backward draws the same mask again from the seed) and each method's relative term as a
function of (i, j) inside the kernel:

- a table read at a bucket of j - i: one row per query for Shaw's key term and Music
  (T[i, c] = q_i . R[c], i.e. Q R^T, computed before the kernel: its gradient reaches q
  and R through autograd), or one row shared by all queries for T5's bias;
- ALiBi's -m_h |j - i|;
- the decaying mask's ramp on the normalized weights;
- Shaw's value term: per row, the weights summed per bucket, then times R_V.

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

# The head sizes a tile's matrix products take (tl.arange needs a power of two, tl.dot >= 16)
HEAD_SIZES = (16, 32, 64, 128)
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def interpreted():
    """Does Triton run kernels on the CPU (its interpreter) in this process?"""
    return os.environ.get("TRITON_INTERPRET") == "1"


@functools.lru_cache(maxsize=None)
def triton_installed():
    return importlib.util.find_spec("triton") is not None


def usable(q):
    """Can the kernels compute attention for these scaled queries (batch, heads, Lq, d)?"""
    return (
        q.size(-1) in HEAD_SIZES
        and q.dtype in DTYPES
        and (q.device.type == "cuda" or (q.device.type == "cpu" and interpreted()))
        and triton_installed()
    )


@dataclass
class RelativeTerms:
    """What the kernels add to q_i . k_j and how they weigh it, besides the tensors that
    take gradients (the table, R_V).

    `bucket`: int32, the bucket of each distance j - i = -(Lk-1)..Lq-1 (with a table);
    `table_per_query`: the table has a row per query (Shaw, Music), else one row shared
    by all (T5); `slopes`: ALiBi's m_h (heads,); `key_padding`: uint8 (batch, Lk), 1 at
    padding; `ramp`: 0 none, 1 the decaying mask's causal ramp, 2 its bidirectional one
    over `lengths` (int32 (batch,)); `dropout`: attention dropout's p, drawn from `seed`.
    """

    causal: bool
    key_padding: Optional[torch.Tensor] = None
    bucket: Optional[torch.Tensor] = None
    table_per_query: bool = False
    slopes: Optional[torch.Tensor] = None
    ramp: int = 0
    lengths: Optional[torch.Tensor] = None
    farthest_weight: float = 0.0
    dropout: float = 0.0
    seed: int = 0

    def pointers(self, placeholder):
        """BUCKET, SLOPES, PAD, LENGTHS for the kernels (`placeholder` where unused: never read)."""
        return tuple(placeholder if tensor is None else tensor
                     for tensor in (self.bucket, self.slopes, self.key_padding, self.lengths))

    def flags(self):
        return dict(CAUSAL=self.causal, ALIBI=self.slopes is not None, HAS_PAD=self.key_padding is not None,
                    RAMP=self.ramp, DROPOUT=self.dropout > 0)


def attention(q, k, v, terms, table=None, values=None):
    """softmax(q k^T + T[., bucket(j - i)] - m |j - i|) weighted by the ramp and dropout,
    times v, plus Shaw's value term with R_V = `values` (buckets, d): q (batch, heads, Lq,
    d) already scaled, k and v (batch, heads, Lk, d), the queries being the last Lq of Lk
    positions; `table` (batch or 1, heads, Lq or 1, buckets)."""
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
