"""The fused kernels as an autograd Function on (batch, heads, length, d_head) tensors."""
import torch
import triton

from onmt_posenc.model.attention.fused_kernel.backward import attention_backward_keys, attention_backward_queries
from onmt_posenc.model.attention.fused_kernel.forward import attention_forward, keep_mask

# (queries, keys) per tile: small under the interpreter, where a tile is a numpy array
BLOCKS = {"cuda": (64, 32), "cpu": (16, 16)}


def _table_strides(table):
    """(batch, head, row) strides of a (batch or 1, heads, Lq or 1, buckets) table, 0 where
    a dimension of size 1 is shared; the buckets are contiguous."""
    return tuple(table.stride(dim) if table.size(dim) > 1 else 0 for dim in range(3))


def dot_precision(dtype):
    """Triton's precision of the tiles' float32 products: TF32 where PyTorch's matmuls take it
    (torch.backends.cuda.matmul.allow_tf32), else IEEE float32; Triton's default for others."""
    if dtype != torch.float32:
        return None
    return "tf32" if torch.backends.cuda.matmul.allow_tf32 else "ieee"


def _padded_buckets(count):
    return max(16, triton.next_power_of_2(count))


class FusedAttention(torch.autograd.Function):
    """softmax(q k^T + relative terms) v for scaled queries, see `fused_kernel.attention`."""

    @staticmethod
    def forward(ctx, q, k, v, table, values, terms):
        # the kernels step through the head dimension and the buckets one element at a time
        q, k, v = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, k, v))
        if table is not None and table.stride(-1) != 1:
            table = table.contiguous()
        batch, heads, query_len, dim = q.shape
        key_len = k.size(2)
        block_m, block_n = BLOCKS[q.device.type]
        buckets = table.size(-1) if table is not None else 1
        nb_pad = _padded_buckets(buckets)
        out = torch.empty(batch, heads, query_len, dim, dtype=q.dtype, device=q.device)
        lse = torch.empty(batch * heads, query_len, dtype=torch.float32, device=q.device)
        per_bucket = (torch.empty(batch * heads, query_len, nb_pad, dtype=torch.float32, device=q.device)
                      if values is not None else lse)
        table_arg = table if table is not None else lse
        grid = (triton.cdiv(query_len, block_m), batch * heads)
        attention_forward[grid](
            q, k, v, out, lse, per_bucket, table_arg, *terms.pointers(lse),
            *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
            *(_table_strides(table) if table is not None else (0, 0, 0)),
            heads, query_len, key_len, terms.seed, terms.dropout, terms.farthest_weight,
            D=dim, BLOCK_M=block_m, BLOCK_N=block_n, VALUES=values is not None, NB_PAD=nb_pad,
            HAS_TABLE=table is not None, PRECISION=dot_precision(q.dtype), **terms.flags(),
        )
        if values is not None:  # Shaw's value term: sum_c W[i, c] R_V[c]
            weights = per_bucket.view(batch, heads, query_len, nb_pad)[..., :buckets]
            out = out + (weights @ values.float()).to(out.dtype)
        ctx.save_for_backward(q, k, v, out, lse, table, values, per_bucket)
        ctx.terms = terms
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        q, k, v, out, lse, table, values, per_bucket = ctx.saved_tensors
        terms = ctx.terms
        batch, heads, query_len, dim = q.shape
        key_len = k.size(2)
        block_m, block_n = BLOCKS[q.device.type]
        buckets = table.size(-1) if table is not None else 1
        nb_pad = _padded_buckets(buckets)
        grad_out = grad_out.contiguous()
        # D_i = dO_i . z_i, z_i the whole output (value term included)
        delta = (grad_out.float() * out.float()).sum(-1).view(batch * heads, query_len)
        if values is not None:  # G = dO R_V^T, each row read at the bucket of (i, j)
            value_grads = torch.zeros(batch, heads, query_len, nb_pad, dtype=torch.float32, device=q.device)
            value_grads[..., :buckets] = grad_out.float() @ values.float().T
        else:
            value_grads = lse
        table_arg = table if table is not None else lse
        common = (table_arg, *terms.pointers(lse), value_grads,
                  *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *grad_out.stride()[:3],
                  *(_table_strides(table) if table is not None else (0, 0, 0)),
                  heads, query_len, key_len, terms.seed, terms.dropout, terms.farthest_weight)
        constants = dict(D=dim, BLOCK_M=block_m, BLOCK_N=block_n, VALUES=values is not None, NB_PAD=nb_pad,
                         HAS_TABLE=table is not None, PRECISION=dot_precision(q.dtype), **terms.flags())
        grad_k = torch.empty(batch, heads, key_len, dim, dtype=k.dtype, device=k.device)
        grad_v = torch.empty_like(grad_k, dtype=v.dtype)
        attention_backward_keys[(triton.cdiv(key_len, block_n), batch * heads)](
            q, k, v, grad_out, lse, delta, grad_k, grad_v, *common, **constants)
        grad_q = torch.empty(batch, heads, query_len, dim, dtype=q.dtype, device=q.device)
        per_row = terms.table_per_query
        if table is None:
            grad_table = lse
        elif per_row:
            grad_table = torch.empty(batch * heads, query_len, nb_pad, dtype=torch.float32, device=q.device)
        else:
            grad_table = torch.zeros(batch * heads, nb_pad, dtype=torch.float32, device=q.device)
        attention_backward_queries[(triton.cdiv(query_len, block_m), batch * heads)](
            q, k, v, grad_out, lse, delta, grad_q, grad_table, *common, ROW_TABLE=per_row, **constants)
        if table is not None:
            if per_row:
                grad_table = grad_table.view(batch, heads, query_len, nb_pad)[..., :buckets]
            else:
                grad_table = grad_table.view(batch, heads, 1, nb_pad)[..., :buckets].sum(0, keepdim=True)
            grad_table = grad_table.to(table.dtype).expand_as(table)
        grad_values = None
        if values is not None:  # dR_V = sum over batch, heads, rows of W[i, c] dO_i
            weights = per_bucket.view(batch, heads, query_len, nb_pad)[..., :buckets]
            grad_values = (weights.transpose(-1, -2) @ grad_out.float()).sum((0, 1)).to(values.dtype)
        return grad_q, grad_k, grad_v, grad_table if table is not None else None, grad_values, None


def dropout_keep_mask(batch_heads, query_len, key_len, seed, dropout, device):
    """The (batch * heads, Lq, Lk) mask (True: kept) that the kernels draw for `seed`."""
    keep = torch.empty(batch_heads, query_len, key_len, dtype=torch.int8, device=device)
    block_m, block_n = BLOCKS[device.type]
    keep_mask[(triton.cdiv(query_len, block_m), batch_heads)](keep, query_len, key_len, seed, dropout,
                                                               BLOCK_M=block_m, BLOCK_N=block_n)
    return keep.bool()
