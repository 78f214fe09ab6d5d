"""The fused kernels as an autograd Function on (batch, heads, length, d_head) tensors."""
import dataclasses
import functools
from typing import Optional

import torch
import triton

from onmt_posenc.model.attention.fused_kernel import NUM_STAGES, RelativeTerms, tile_shape
from onmt_posenc.model.attention.fused_kernel.backward import attention_backward_keys, attention_backward_queries
from onmt_posenc.model.attention.fused_kernel.forward import attention_forward, keep_mask


def dot_precision(dtype):
    """Triton's precision of the tiles' float32 products: TF32 where PyTorch's matmuls take it
    (torch.backends.cuda.matmul.allow_tf32), else IEEE float32; Triton's default for others."""
    if dtype != torch.float32:
        return None
    return "tf32" if torch.backends.cuda.matmul.allow_tf32 else "ieee"


@dataclasses.dataclass
class KernelArguments:
    """Every argument of the kernels, by the kernels' own names: each launch passes the ones
    its kernel takes (`for_kernel`), so a call site names only the kernel and its outputs.

    q, k, v: (batch, heads, L, d), the last dimension contiguous; o: the output (or dO in
    backward, read with its strides); `table`: Q R^T (batch, heads, Lq, buckets) for a
    per-query table, T5's (heads, buckets), or None; `values`: R_V (buckets, d) or None."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor
    terms: RelativeTerms
    table: Optional[torch.Tensor] = None
    values: Optional[torch.Tensor] = None
    row_max: Optional[torch.Tensor] = None
    row_log_sum: Optional[torch.Tensor] = None
    outputs: dict = dataclasses.field(default_factory=dict)

    @property
    def n_buckets(self):
        return self.table.size(-1) if self.table is not None else 1

    @functools.cached_property
    def first_key(self):
        """int32 (batch,): each sequence's first key that is not padding (Lk if none), for a
        causal kernel with padding (a row before it sees no key)."""
        padding = self.terms.key_padding
        if padding is None or not self.terms.causal:
            return None
        keys = torch.arange(padding.size(1), device=padding.device, dtype=torch.int32)
        return torch.where(padding.bool(), padding.size(1), keys).amin(-1).int()

    def window(self, block_m, block_n):
        """How many of a row's buckets the forward's value term takes a tile: a power of two
        (at least 16, a matrix product's), up to the M + N - 1 distances a tile spans, fewer
        where the buckets are fewer; 16 without a value term (unused)."""
        if self.values is None:
            return 16
        return max(16, triton.next_power_of_2(min(self.n_buckets, block_m + block_n - 1)))

    def for_kernel(self, kernel):
        """{name: value} of `kernel`'s arguments; the tensors a kernel does not read are
        given a placeholder (any pointer: never read)."""
        q, k, v, o, terms = self.q, self.k, self.v, self.o, self.terms
        placeholder = self.row_max if self.row_max is not None else q
        lo, hi = terms.clip or (0, 0)
        block_m, block_n, _ = tile_shape(q.device, kernel.__name__, q.size(-1))
        named = dict(
            Q=q, K=k, V=v, O=o, DO=o, ROW_MAX=self.row_max, ROW_LOG_SUM=self.row_log_sum, TABLE=self.table,
            BUCKET=terms.bucket, SLOPES=terms.slopes, PAD=terms.key_padding, FIRST_KEY=self.first_key,
            LENGTHS=terms.lengths,
            VALUES_TABLE=self.values,
            sqb=q.stride(0), sqh=q.stride(1), sqi=q.stride(2), skb=k.stride(0), skh=k.stride(1), skj=k.stride(2),
            svb=v.stride(0), svh=v.stride(1), svj=v.stride(2), sob=o.stride(0), soh=o.stride(1), soi=o.stride(2),
            H=q.size(1), Lq=q.size(2), Lk=k.size(2), n_buckets=self.n_buckets, lo=lo, hi=hi, seed=terms.seed,
            dropout_p=terms.dropout, farthest_weight=terms.farthest_weight,
            D=q.size(-1), BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=terms.causal,
            ROW_TABLE=terms.clip is not None, SHARED_TABLE=terms.bucket is not None, ALIBI=terms.slopes is not None,
            HAS_PAD=terms.key_padding is not None, RAMP=terms.ramp, DROPOUT=terms.dropout > 0,
            VALUES=self.values is not None, WINDOW=self.window(block_m, block_n),
            PRECISION=dot_precision(q.dtype), **self.outputs,
        )
        return {name: placeholder if named[name] is None and name in POINTERS else named[name]
                for name in kernel.arg_names}

    def launch(self, kernel):
        """Run `kernel` on a program per block of queries (of keys for dK and dV) and head."""
        kernel[self.grid(kernel)](**self.for_kernel(kernel), **self.options(kernel))

    def grid(self, kernel):
        block_m, block_n, _ = tile_shape(self.q.device, kernel.__name__, self.q.size(-1))
        blocks = triton.cdiv(self.k.size(2), block_n) if kernel is attention_backward_keys else triton.cdiv(
            self.q.size(2), block_m)
        return blocks, self.q.size(0) * self.q.size(1)

    def options(self, kernel):
        """The launch's warps and pipelining stages."""
        return dict(num_warps=tile_shape(self.q.device, kernel.__name__, self.q.size(-1))[2], num_stages=NUM_STAGES)


# The kernels' arguments that may be absent (a tensor the variant has no use for)
POINTERS = {"ROW_MAX", "ROW_LOG_SUM", "TABLE", "BUCKET", "SLOPES", "PAD", "FIRST_KEY", "LENGTHS", "VALUES_TABLE", "G",
            "DTABLE", "W"}


def row_table(q, keys):
    """Q R^T for a per-query table R (buckets, d), or one per head (heads, buckets, d)."""
    return (q @ keys.transpose(-1, -2).to(q.dtype)).contiguous()


class FusedAttention(torch.autograd.Function):
    """softmax(q k^T + relative terms) v for scaled queries, see `fused_kernel.attention`.

    Kept for the backward: q, k, v, the output, each row's maximum and log-sum (8 bytes a
    query and head) and the parameters; Q R^T of a per-query table is made again (one small
    matmul) rather than kept."""

    @staticmethod
    def forward(ctx, q, k, v, table, values, terms):
        # the kernels step through the head dimension and the buckets one element at a time
        q, k, v = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, k, v))
        batch, heads, query_len, dim = q.shape
        out = torch.empty(batch, heads, query_len, dim, dtype=q.dtype, device=q.device)
        row_max = torch.empty(batch * heads, query_len, dtype=torch.float32, device=q.device)
        row_log_sum = torch.empty_like(row_max)
        arguments = KernelArguments(q, k, v, out, terms, kernel_table(q, table, terms),
                                    None if values is None else values.to(q.dtype).contiguous(), row_max, row_log_sum)
        arguments.launch(attention_forward)
        ctx.save_for_backward(q, k, v, out, row_max, row_log_sum, table, values)
        ctx.terms = terms
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        with torch.autocast(grad_out.device.type, enabled=False):  # its float32 products stay float32
            return gradients(ctx.saved_tensors, ctx.terms, grad_out)


def gradients(saved, terms, grad_out):
    """FusedAttention's backward: the kernels, then the tables' gradients from their sums."""
    q, k, v, out, row_max, row_log_sum, table, values = saved
    batch, heads, query_len, dim = q.shape
    key_len = k.size(2)
    grad_out = grad_out.contiguous()
    flat = dict(dtype=torch.float32, device=q.device)
    arguments = KernelArguments(q, k, v, grad_out, terms, kernel_table(q, table, terms),
                                None if values is None else values.to(q.dtype).contiguous(), row_max, row_log_sum)
    # D_i = dO_i . z_i, z_i the whole output (value term included)
    delta = (grad_out.float() * out.float()).sum(-1).view(batch * heads, query_len)
    grad_k = torch.empty(batch, heads, key_len, dim, dtype=k.dtype, device=k.device)
    grad_v = torch.empty_like(grad_k, dtype=v.dtype)
    per_bucket = (batch * heads, query_len, arguments.n_buckets)
    g = None
    if values is not None:  # G = dO R_V^T, each row read at the bucket of (i, j)
        g = (grad_out.float() @ values.float().T).view(per_bucket).contiguous()
    arguments.outputs = dict(DELTA=delta, DK=grad_k, DV=grad_v, G=g)
    arguments.launch(attention_backward_keys)
    grad_q = torch.empty(batch, heads, query_len, dim, dtype=q.dtype, device=q.device)
    if terms.clip is not None:
        sums = torch.zeros(per_bucket, **flat)
    elif terms.bucket is not None:
        sums = torch.zeros(batch * heads, query_len + key_len - 1, **flat)
    else:
        sums = None
    weights = torch.zeros(per_bucket, **flat) if values is not None else None
    arguments.outputs = dict(DELTA=delta, DQ=grad_q, DTABLE=sums, W=weights, G=g)
    arguments.launch(attention_backward_queries)
    grad_table = grad_values = None
    if terms.clip is not None:  # dT per query and bucket: dQ += dT R, dR = dT^T Q
        grad_rows = sums.view(batch, heads, query_len, -1)
        grad_q = grad_q + (grad_rows @ table.float()).to(grad_q.dtype)
        grad_table = (grad_rows.transpose(-1, -2) @ q.float()).sum((0, 1) if table.dim() == 2 else 0)
        grad_table = grad_table.to(table.dtype)
    elif terms.bucket is not None:  # T5: the sums per distance, summed per bucket
        per_distance = sums.view(batch, heads, -1).sum(0)
        grad_table = torch.zeros(table.shape, **flat).index_add_(-1, terms.bucket.long(), per_distance)
        grad_table = grad_table.to(table.dtype)
    if values is not None:  # dR_V = sum over batch, heads, rows of W[i, c] dO_i
        grad_values = (weights.view(batch, heads, query_len, -1).transpose(-1, -2) @ grad_out.float()).sum((0, 1))
        grad_values = grad_values.to(values.dtype)
    return grad_q, grad_k, grad_v, grad_table, grad_values, None


def kernel_table(q, table, terms):
    """The table as the kernels read it: Q R^T for a per-query table, else as given."""
    if table is None:
        return None
    return row_table(q, table) if terms.clip is not None else table.contiguous()


def dropout_keep_mask(batch_heads, query_len, key_len, seed, dropout, device):
    """The (batch * heads, Lq, Lk) mask (True: kept) that the kernels draw for `seed`."""
    keep = torch.empty(batch_heads, query_len, key_len, dtype=torch.int8, device=device)
    block_m, block_n, _ = tile_shape(device, "attention_forward", 64)
    keep_mask[(triton.cdiv(query_len, block_m), batch_heads)](keep, query_len, key_len, seed, dropout,
                                                               BLOCK_M=block_m, BLOCK_N=block_n)
    return keep.bool()
