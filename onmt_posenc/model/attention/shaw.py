"""Shaw et al. (2018) relative positions, without the (L, L, d) tensor."""
import torch
from torch import nn

from onmt_posenc.model.attention import register_attention
from onmt_posenc.model.attention.distance_tables import distance_sums, gather_pairs, table_gradient
from onmt_posenc.model.attention.self_attention import SelfAttention, masked_value, relative_distances


class ShawScores(torch.autograd.Function):
    """Shaw et al. eq. 4 for scaled queries: e_ij = q_i . k_j + q_i . R[bucket(i, j)].

    Shaw's two terms are adjoint to each other: the gradient of the scores for q
    is the value term of the gradient (`distance_sums`), and the gradient of the
    context for the weights is the key term of the gradient (`gather_pairs`).
    Written out, a backward pass creates at most the one (Lq, Lk) gradient it
    returns; autograd through gather and scatter would add zero-filled (Lq, Lk)
    buffers and a gradient sum.
    """

    @staticmethod
    def forward(ctx, q, k, table, bucket):
        ctx.save_for_backward(q, k, table, bucket)
        return gather_pairs(q @ table.T, bucket, q, k.transpose(-1, -2), hidden=masked_value(q.dtype))

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        q, k, table, bucket = ctx.saved_tensors
        far = table.size(0) // 2
        per_distance = distance_sums(grad, -far, far)
        grad_q = grad @ k + per_distance @ table.to(grad.dtype)
        grad_k = grad.transpose(-1, -2) @ q
        return grad_q, grad_k, table_gradient(per_distance, q, table), None


class ShawContext(torch.autograd.Function):
    """Shaw et al. eq. 3: z_i = sum_j a_ij v_j + sum_b (sum of a_ij over bucket b) R[b]."""

    @staticmethod
    def forward(ctx, weights, v, table, bucket):
        far = table.size(0) // 2
        per_distance = distance_sums(weights, -far, far)
        ctx.save_for_backward(weights, v, table, bucket, per_distance)
        return weights @ v + per_distance @ table

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        weights, v, table, bucket, per_distance = ctx.saved_tensors
        grad_weights = gather_pairs(grad @ table.to(grad.dtype).T, bucket, grad, v.transpose(-1, -2))
        grad_v = weights.transpose(-1, -2) @ grad
        return grad_weights, grad_v, table_gradient(per_distance, grad, table), None


@register_attention("shaw")
class ShawRelativeAttention(SelfAttention):
    """Shaw et al. (2018), eqs. 3-5: e_ij = q_i . (k_j + a^K_ij) / sqrt(d) and
    z_i = sum_j alpha_ij (v_j + a^V_ij), with a_ij = R[clip(j - i, -K, K)].

    Both terms go through the 2K+1 distance buckets, never an (L, L, d) tensor:
    q_i . a^K_ij = (Q R_K^T)[i, bucket(i, j)] (`ShawScores`), and
    sum_j alpha_ij a^V_ij = sum_b (sum of alpha_ij over bucket b) R_V[b] (`ShawContext`).

    `values="shared"` is OpenNMT-py's parameterization: one table,
    `relative_positions_embeddings`, for keys and values, so OpenNMT-py's Shaw
    checkpoints load unchanged. `values="separate"` is the paper's two tables.
    `values="none"`: the key term alone (`relative_keys_embeddings`), the simplified
    RPE that the perSPE paper's Table 1 uses (Oka et al. 2022, sec. 5.1).
    On the PyTorch paths the value term needs the attention weights: always the plain path
    (the fused kernel, on CUDA, sums them per bucket in the tile: `kernel_terms`).
    """

    summary = ("Shaw et al. 2018, key and value terms (see relative_values), distances clipped at "
               "max_relative_positions")
    VALUES = ("shared", "separate", "none")
    # CTranslate2's flash attention has no relative position tables
    survives_flash_attention = False
    implied_when = "when max_relative_positions > 0"
    own_options = ("relative_values",)
    settings = ("max_relative_positions", "values")
    plain_path_why = "its key term is gathered per (query, key) pair and its value term sums the weights per distance"

    @classmethod
    def implied_by_onmt(cls, distance):
        return distance > 0  # OpenNMT-py's own relative attention

    @classmethod
    def computed_by_onmt(cls, values):
        return values in (None, "shared")  # its one table for keys and values

    @classmethod
    def add_options(cls, group):
        group.add(
            "--relative_values",
            "-relative_values",
            choices=cls.VALUES,
            default=None,
            help="Shaw's relative tables (unset: 'shared'). 'shared': one table for keys and "
            "values, OpenNMT-py's parameterization (its checkpoints load unchanged). "
            "'separate': the paper's two tables. 'none': the key term only, no value term "
            "(the simplified RPE of the perSPE paper's Table 1).",
        )

    @classmethod
    def check_options(cls, opt):
        if opt.max_relative_positions <= 0:
            raise ValueError(f"relative_attention shaw needs max_relative_positions > 0, the distance at which it "
                             f"clips, got {opt.max_relative_positions}")
        opt.relative_attention = "shaw"
        if getattr(opt, "relative_values", None) is None:
            opt.relative_values = "shared"

    @classmethod
    def export_refusal(cls, model_opt):
        return None  # the stock converter writes CTranslate2's relative_position_keys / values (hooks.ctranslate2)

    @classmethod
    def export_record(cls, model_opt):
        return dict(max_relative_positions=model_opt.max_relative_positions,
                    relative_attention=model_opt.relative_attention, relative_values=model_opt.relative_values)

    def __init__(self, head_count, model_dim, max_relative_positions, dropout=0.1, is_decoder=True,
                 add_qkvbias=False, values="shared"):
        super().__init__(head_count, model_dim, dropout, is_decoder, add_qkvbias, fused=False)
        self.max_relative_positions = max_relative_positions
        self.values = values
        buckets = 2 * max_relative_positions + 1
        if values == "shared":
            self.relative_positions_embeddings = nn.Embedding(buckets, self.dim_per_head)
        else:
            self.relative_keys_embeddings = nn.Embedding(buckets, self.dim_per_head)
        if values == "separate":
            self.relative_values_embeddings = nn.Embedding(buckets, self.dim_per_head)

    def tables(self):
        """(R_K, R_V), each (2K+1, d_head); R_V is None without a value term."""
        if self.values == "shared":
            return self.relative_positions_embeddings.weight, self.relative_positions_embeddings.weight
        values = self.relative_values_embeddings.weight if self.values == "separate" else None
        return self.relative_keys_embeddings.weight, values

    def attend(self, q, k, v, mask, return_attn):
        r_k, r_v = self.tables()
        far = self.max_relative_positions
        bucket = relative_distances(q.size(2), k.size(2), q.device).clamp(-far, far) + far
        if mask is not None:  # masked pairs read a vanishing logit: no separate masking pass
            bucket = bucket.masked_fill(mask, 2 * far + 1)
        bucket = bucket.expand(q.size(0), q.size(1), -1, -1)
        scores = ShawScores.apply(q, k, r_k, bucket)
        if mask is not None:  # a row that sees no key: equal logits and no gradient through them, as masked_fill
            scores.masked_fill_(mask.all(-1, keepdim=True), masked_value(scores.dtype))  # gives the other paths
        dropped, attn = self.attention_weights(scores, mask=None)
        if r_v is None:
            return dropped @ v, attn
        return ShawContext.apply(dropped, v, r_v, bucket), attn

    def kernel_terms(self, q, key_len, terms):
        """The key term as Q R_K^T read at clip(j - i, -K, K) + K, the value term as R_V."""
        terms.clip = (-self.max_relative_positions, self.max_relative_positions)
        return self.tables()

    @classmethod
    def from_stock(cls, stock, settings, fused, values):
        values = values or "shared"
        attention = cls(**settings, max_relative_positions=stock.max_relative_positions, values=values)
        if values == "shared":  # OpenNMT-py's one table, shared with the stock module
            attention.relative_positions_embeddings = stock.relative_positions_embeddings
        return attention
