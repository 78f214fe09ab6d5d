"""Per-distance tables to (query, key) pairs and back, without (L, L, d) tensors:
the shared arithmetic of Shaw's and Music's relative attention."""
import torch
import torch.nn.functional as F


def gather_pairs(per_distance, bucket, a, b, hidden=0.0):
    """(a @ b)[..., i, j] + per_distance[..., i, bucket[..., i, j]] for (batch, heads, ...)
    tensors. Bucket index `per_distance.size(-1)` marks a masked pair, which reads
    `hidden`. The per-distance values are gathered to (Lq, Lk), then the matmul
    accumulates into them in place: one (Lq, Lk) tensor is written, no other."""
    pairs = F.pad(per_distance, (0, 1), value=hidden).gather(-1, bucket)
    pairs.flatten(0, 1).baddbmm_(a.flatten(0, 1), b.flatten(0, 1))
    return pairs


# Above this many elements, a CPU temporary of the size of the attention weights
# comes as fresh pages from the operating system and costs more than the work.
CPU_LARGE_TEMPORARY = 2**22


def masked_row_sums(pairs, mask):
    """(pairs * mask).sum(-1) for a (Lq, Lk) mask shared by the leading dims, as
    (..., Lq, 1). On CPU, for large pairs, one matrix product per query instead,
    which needs no temporary of the size of pairs."""
    if pairs.device.type == "cpu" and pairs.numel() > CPU_LARGE_TEMPORARY:
        by_query = pairs.flatten(0, -3).transpose(0, 1)  # (Lq, batch * heads, Lk), a view
        sums = torch.bmm(by_query, mask.to(pairs.dtype)[..., None])
        return sums.transpose(0, 1).unflatten(0, pairs.shape[:-2])
    return (pairs * mask).sum(-1, keepdim=True)


def distance_sums(pairs, lo, hi):
    """Sum of pairs[..., i, j] per distance j - i clipped to [lo, hi]: (..., Lq, hi - lo + 1),
    the queries being the last Lq of Lk positions. This is the adjoint of gathering
    per-distance values to pairs, and the value term of Shaw et al.

    Strictly between lo and hi a distance has at most one key per query (a small
    gather); distances <= lo are a masked row sum; distances >= hi are the rest
    of the row."""
    *lead, query_len, key_len = pairs.shape
    if lo == hi:
        return pairs.sum(-1, keepdim=True)
    positions = torch.arange(key_len - query_len, key_len, device=pairs.device)[:, None]
    keys = positions + torch.arange(lo + 1, hi, device=pairs.device)  # (Lq, hi - lo - 1)
    inside = (keys >= 0) & (keys < key_len)
    middle = pairs.gather(-1, keys.clamp(0, key_len - 1).expand(*lead, -1, -1)) * inside
    below = masked_row_sums(pairs, torch.arange(key_len, device=pairs.device) <= positions + lo)
    # The rest by subtraction, in at least float32 (float16 weights lose too much).
    dtype = torch.promote_types(pairs.dtype, torch.float32)
    above = pairs.sum(-1, keepdim=True, dtype=dtype) - middle.sum(-1, keepdim=True, dtype=dtype) - below.to(dtype)
    return torch.cat((below, middle, above.to(pairs.dtype)), dim=-1)


def table_gradient(per_distance, other, table):
    """Gradient of a distance table used as per_distance @ table, summed over the
    batch (and over the heads for a table shared by all heads); in float32 under
    mixed precision, returned in the table's dtype."""
    grad = per_distance.transpose(-1, -2).float() @ other.float()
    return grad.sum((0, 1) if table.dim() == 2 else 0).to(table.dtype)
