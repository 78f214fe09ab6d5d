"""Self-attention for absolute positions (or none), the base of every variant here."""
import re

import torch
import torch.nn.functional as F
from onmt.modules.multi_headed_attn import MultiHeadedAttention, shape, unshape
from onmt.utils.logging import logger
from torch.nn.attention import SDPBackend

from onmt_posenc.model.attention import ATTENTIONS, fused_kernel, register_attention
from onmt_posenc.model.attention.fused_kernel import first_use
from onmt_posenc.model.registry import check_minimums, settings_text


def masked_value(dtype):
    """A logit that vanishes in the softmax and stays finite after another logit
    is added to it (a fully masked row then averages instead of giving NaN)."""
    return torch.finfo(dtype).min / 2


def relative_distances(query_len, key_len, device):
    """(query_len, key_len) matrix of j - i. The queries are the last `query_len`
    of `key_len` positions: equal lengths in training, the newest positions
    while decoding step by step with keys from the layer cache."""
    keys = torch.arange(key_len, device=device)
    queries = keys[key_len - query_len :, None]
    return keys[None, :] - queries


def ctranslate2_before(release):
    """Is the installed CTranslate2 older than `release` ('4.8.5')?"""
    import ctranslate2

    def numbers(version):
        return tuple(int(part) for part in re.findall(r"\d+", version)[:3])

    return numbers(ctranslate2.__version__) < numbers(release)


def sdpa_backend(q, k, v, bias, dropout, causal):
    """The backend PyTorch's SDPA takes for these inputs: 'flash_attention',
    'efficient_attention', 'cudnn_attention', 'math' (its own choice function, private: where
    a PyTorch release has changed it, 'not known' rather than a failed forward)."""
    try:
        backend = int(torch._fused_sdp_choice(q, k, v, bias, dropout, causal, scale=1.0))
    except (AttributeError, RuntimeError, TypeError) as error:
        return f"not known ({type(error).__name__} from torch._fused_sdp_choice)"
    return next((key.lower() for key, value in SDPBackend.__members__.items() if int(value) == backend), str(backend))


# The kinds of SDPA call already said in the log (the benchmark clears it to hear them again)
SDPA_LOGGED = set()
# The kinds of call on the plain path already said in the log
PLAIN_LOGGED = set()


def call_entry(module, q, mask, dropout):
    """A kind of call as the log names it: side, one query or a whole sequence, dtype, device,
    head size, mask, dropout."""
    return ("decoder" if module.is_decoder else "encoder", "one query" if q.size(2) == 1 else "whole sequence",
            str(q.dtype).replace("torch.", ""), q.device.type, f"d_head {q.size(-1)}", mask,
            *(("dropout",) if dropout > 0 else ()))


def log_path(module, logged, entry, path, kernel_declined):
    """Say once for each kind of call (`entry`, from `call_entry`; `logged`: the kinds said) the
    path it takes, (what, how), and why the fused kernel does not take it where it could
    (`kernel_declined()`, see `SelfAttention.kernel_declined`): a warning where attention_kernel
    triton asked for it."""
    if entry in logged:
        return
    logged.add(entry)
    why_not = kernel_declined()
    declined = f"; the fused Triton kernel not taken: {why_not}" if why_not else ""
    say = logger.warning if why_not and module.kernel == "triton" else logger.info
    say("onmt-posenc self-attention on %s (%s): %s%s", path[0], ", ".join(entry), path[1], declined)


def log_sdpa_backend(module, q, k, v, bias, dropout, causal, kernel_declined=lambda: None):
    """Say in the log which backend PyTorch's SDPA chooses (flash, efficient (memory-efficient),
    cuDNN, math), once for each kind of call (`call_entry`)."""
    mask = "causal flag" if causal else "no mask" if bias is None else "boolean mask" if bias.dtype == torch.bool \
        else "additive bias"
    entry = call_entry(module, q, mask, dropout)
    if entry not in SDPA_LOGGED:
        log_path(module, SDPA_LOGGED, entry, ("PyTorch's SDPA", f"{sdpa_backend(q, k, v, bias, dropout, causal)} "
                                              "backend"), kernel_declined)


@register_attention("absolute")
class SelfAttention(MultiHeadedAttention):
    """OpenNMT-py self-attention for absolute positions (or none).

    `fused=True` calls SDPA whenever the attention weights are not requested;
    `fused=False` is the plain matmul-softmax-matmul path (OpenNMT-py's
    `self_attn_type: scaled-dot`). Subclasses add a relative term through
    `relative_logits`, or override `attend`.
    """

    # Its line in relative_attention's help: a variant with a summary is a choice of that option;
    # one without is chosen by OpenNMT-py's own options (`chosen_by_onmt`, `implied_by_onmt`).
    summary = None
    # When `implied_by_onmt` holds, in words, for relative_attention's help (None: not said there)
    implied_when = None
    # The options it adds itself (add_options): set with another variant, an error
    own_options = ()
    # onmt_translate options that only its models take (model.options.add_translate_options): an
    # experiment's evaluation variant that sets one applies to the runs of this variant only
    translate_options = ()
    # {option: the least value it takes}, checked by `check_options` and written into the
    # experiment file's JSON Schema (onmt-posenc schema)
    option_minimums = {}
    # It clips distances at max_relative_positions, which must then be > 0 (else it takes none)
    needs_distance = True
    # CTranslate2's flash attention (CUDA decoders) computes its positions too: where it drops
    # them, the export says so in config.json and `model.export.open_translator` refuses it.
    survives_flash_attention = True

    @classmethod
    def chosen_by_onmt(cls, buckets, distance):
        """Do OpenNMT-py's own options (relative_positions_buckets, max_relative_positions)
        choose this variant, whatever relative_attention says?"""
        return False

    @classmethod
    def implied_by_onmt(cls, distance):
        """Is this the variant when neither OpenNMT-py's options nor relative_attention choose
        one? Absolute positions (this class) for max_relative_positions 0."""
        return cls is SelfAttention and distance <= 0

    @classmethod
    def computed_by_onmt(cls, values):
        """Does OpenNMT-py compute this variant of relative_attention itself, with relative_values
        `values`? Where not, a layer configuration only OpenNMT-py's attention has is an error."""
        return False

    @classmethod
    def add_options(cls, group):
        """Add the variant's own options to OpenNMT-py's model options (by default none)."""

    @classmethod
    def check_options(cls, opt):
        """Check the options of a model of this variant (chosen by relative_attention) and fill
        in their defaults; raise ValueError naming the option at fault."""
        if cls.needs_distance and opt.max_relative_positions <= 0:
            raise ValueError(f"relative_attention {cls.name} needs max_relative_positions > 0, the distance at "
                             f"which it clips, got {opt.max_relative_positions}")
        if not cls.needs_distance and opt.max_relative_positions != 0:
            raise ValueError(f"relative_attention {cls.name} takes no distance: max_relative_positions must be 0, "
                             f"got {opt.max_relative_positions}")
        check_minimums(cls.option_minimums, opt)
        for owner in ATTENTIONS.values():
            for name in owner.own_options:
                if owner is not cls and getattr(opt, name, None) is not None:
                    raise ValueError(f"{name} applies to relative_attention {owner.name} only ({cls.name} does not "
                                     "take it)")

    # --- Its CTranslate2 export (onmt_posenc.model.export, onmt_posenc.hooks.ctranslate2) ---

    @classmethod
    def export_refusal(cls, model_opt):
        """Why CTranslate2 cannot run a model with this self-attention (None: the export
        writes it). A variant without export code says so; absolute positions (this class)
        export as each side's position table."""
        if cls is SelfAttention:
            return None
        return (f"relative_attention {cls.name}: the CTranslate2 export of this attention is not written (a "
                "variant's file writes it: export_refusal, ctranslate2_attention, ctranslate2_layer)")

    @classmethod
    def ctranslate2_attention(cls, model_opt):
        """CTranslate2's spec of this self-attention (a `MultiHeadAttentionSpec` made with the
        arguments that declare its positions), whose attributes the export adds to every
        self-attention layer of a model the stock converter built for absolute positions;
        None where the stock converter writes the variant itself (absolute positions, Shaw)."""
        return None

    @classmethod
    def ctranslate2_layer(cls, attention, model_opt, variables, scope, is_decoder):
        """Fill in one layer's values in its `attention` spec (`variables`: the checkpoint's
        tensors; `scope`: this layer's self-attention in their names, as
        'encoder.transformer.0.self_attn'); only for a variant with a `ctranslate2_attention`."""

    @classmethod
    def export_record(cls, model_opt):
        """The model options that config.json records of this variant (key onmt_posenc)."""
        return {}

    # The attention_kernel option for this layer ('auto', 'triton', 'pytorch'; see KERNEL_MODES):
    # 'pytorch' for a variant without a term, whose fused path is SDPA. `replacement_for` sets it,
    # and `takes_kernel` where the layer can take the kernel (`choose_kernel` then sets it again).
    kernel = "pytorch"
    takes_kernel = False
    # A decoder whose future is masked in every pass (not full_context_alignment's second one)
    always_causal = False
    # Why `replacement_for` gave it no kernel (self_attn_type scaled-dot, no relative term, ...)
    kernel_refusal = None
    # The attributes that hold its own settings (Shaw's distance, ...): the model print and the
    # log line that says each side's self-attention show them (`extra_repr`)
    settings = ()
    # Why its PyTorch path is the plain one whatever self_attn_type says (None: SDPA, unless
    # self_attn_type is scaled-dot)
    plain_path_why = None

    def __init__(self, head_count, model_dim, dropout=0.1, is_decoder=True, add_qkvbias=False, fused=True):
        super().__init__(
            head_count, model_dim, dropout=dropout, is_decoder=is_decoder, attn_type="self", add_qkvbias=add_qkvbias
        )
        self.fused = fused

    def forward(self, key, value, query, mask=None, sliding_window=0, step=0, return_attn=False, self_attn_type=None):
        """OpenNMT-py's signature. `mask` (batch, 1, query_len, key_len) is True
        where a key is hidden; None while decoding step by step."""
        q = shape(self.linear_query(query), self.dim_per_head)
        k = shape(self.linear_keys(key), self.dim_per_head)
        v = shape(self.linear_values(value), self.dim_per_head)
        cache = self.layer_cache[1] if self.layer_cache[0] else None  # incremental decoding
        earlier = cache["keys"].size(2) if cache is not None and cache["keys"].numel() else 0
        q, k = self.rotated(q, k, first_position=earlier)
        if earlier:  # prepend the earlier steps' keys and values
            k = torch.cat((cache["keys"], k), dim=2)
            v = torch.cat((cache["values"], v), dim=2)
        if cache is not None:
            cache["keys"], cache["values"] = k, v
        q = q * self.dim_per_head**-0.5
        if self.on_kernel(q, k, mask, return_attn):
            context, attn = self.kernel_attend(q, k, v, mask), None
        else:
            self.on_sdpa = False  # `attend` sets it where it calls SDPA
            context, attn = self.attend(q, k, v, mask, return_attn)
            if not self.on_sdpa:
                why = ("the attention weights are asked for" if return_attn else self.plain_path_why
                       or ("self_attn_type scaled-dot" if not self.fused else f"{type(self).__name__}.attend takes it"))
                log_path(self, PLAIN_LOGGED, call_entry(self, q, "no mask" if mask is None else "mask",
                                                        self.dropout_p if self.training else 0.0),
                         ("PyTorch's plain path", why), lambda: self.kernel_declined(q, k, mask, return_attn))
        return self.final_linear(unshape(context)), attn

    def extra_repr(self):
        return settings_text(self)

    def kernel_declined(self, q, k, mask, return_attn):
        """Why a call that does not run on the fused kernel is not on it, where this layer could
        take it (None: it cannot, see `kernel_refusal`; or the kernel runs)."""
        if not self.takes_kernel:
            return None
        if self.kernel == "pytorch":
            return "attention_kernel pytorch"
        if return_attn:
            return "the attention weights are asked for"
        unusable = fused_kernel.unusable(q)
        if unusable:
            return f"attention_kernel {self.kernel}, but {unusable}"
        verdict = first_use.VERDICTS.get(first_use.call_kind(self, q, k, mask))
        return None if verdict is None or verdict[0] else f"attention_kernel auto: {verdict[1]}"

    def on_kernel(self, q, k, mask, return_attn):
        """Does this call attend on the fused kernel? Where it runs (`fused_kernel.usable`:
        CUDA, or the CPU under Triton's interpreter) and the weights are not asked for, with
        attention_kernel 'triton', or 'auto' once the kernel has passed its first-use check
        for this kind of call (`fused_kernel.first_use`)."""
        if self.kernel == "pytorch" or return_attn or not fused_kernel.usable(q):
            return False
        if self.kernel == "triton":
            return first_use.unchecked(self, q, k, mask)
        return first_use.passes(self, q, k, mask)

    def rotated(self, q, k, first_position):
        """Queries and keys as the attention sees them; only rotary positions change them."""
        return q, k

    def relative_logits(self, q, key_len):
        """Position logits added to q.k; absolute positions have none."""
        return None

    def attend(self, q, k, v, mask, return_attn):
        """softmax(q k^T + relative logits) v for scaled queries q (batch, heads, Lq, d).
        Returns the context and, on the plain path, the attention weights."""
        rel = self.relative_logits(q, k.size(2))
        if self.fused and not return_attn:
            causal = False
            if rel is None:
                bias, causal = self.sdpa_mask(q, k, mask)
            else:
                bias = rel if mask is None else rel.masked_fill(mask, masked_value(rel.dtype))
            del rel  # a view of a (Lq, 2L) buffer: let it go before the attention
            dropout = self.dropout_p if self.training else 0.0
            self.on_sdpa = True
            log_sdpa_backend(self, q, k, v, bias, dropout, causal, lambda: self.kernel_declined(q, k, mask, return_attn))
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout, is_causal=causal,
                                                  scale=1.0), None
        scores = q @ k.transpose(-1, -2)
        if rel is not None:
            scores += rel
        del rel
        dropped, attn = self.attention_weights(scores, mask)
        return dropped @ v, attn

    def sdpa_mask(self, q, k, mask):
        """SDPA's (attn_mask, is_causal) for OpenNMT-py's boolean mask (True: hidden). A
        boolean mask keeps SDPA off its flash backend; on CUDA a decoder's whole-sequence mask
        is the future's and right padding's, and its rows that are not padding see exactly
        their past (padding comes after every token): the causal flag computes those rows
        alike (padding rows, which no loss reads, then see their past too), and flash takes
        it. The CPU keeps the mask (its outputs stay those it had)."""
        if mask is None:
            return None, False
        if q.is_cuda and self.always_causal and q.size(2) == k.size(2):
            return None, True
        return ~mask, False

    def kernel_attend(self, q, k, v, mask):
        """`attend` on the fused Triton kernel (`fused_kernel`), with the relative term that
        `kernel_terms` describes. The mask is the padding of the keys (the mask's last row:
        a decoder's last query sees every key that is not padding) and, in a decoder, the
        future."""
        key_padding = None if mask is None else mask[:, 0, -1].to(torch.uint8).contiguous()
        dropout = self.dropout_p if self.training else 0.0
        terms = fused_kernel.RelativeTerms(causal=self.is_decoder, key_padding=key_padding, dropout=dropout,
                                           seed=fused_kernel.new_seed() if dropout > 0 else 0)
        table, values = self.kernel_terms(q, k.size(2), terms)
        return fused_kernel.attention(q, k, v, terms, table, values)

    @classmethod
    def kernel_covers(cls):
        """Does the fused kernel compute this variant? Where the variant says its relative
        term (`kernel_terms`). A variant without a term (absolute positions, rotary) takes
        PyTorch's SDPA, and one added without `kernel_terms` keeps its PyTorch paths rather
        than losing its term on the kernel."""
        return cls.kernel_terms is not SelfAttention.kernel_terms

    def kernel_terms(self, q, key_len, terms):
        """Describe this variant's relative term to the fused kernel: fill in `terms` (a
        `fused_kernel.RelativeTerms`) and return the tensors that take gradients, (table,
        R_V) (see `fused_kernel.attention`). A variant with a term overrides it."""
        raise NotImplementedError

    def attention_weights(self, scores, mask):
        """Masked softmax (in float32, as OpenNMT-py, or float64 for float64 scores: the
        kernel's tests' reference); returns the weights after and before attention dropout.
        `scores` is overwritten."""
        if mask is not None:
            scores.masked_fill_(mask, masked_value(scores.dtype))
        attn = scores.softmax(dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32)).to(scores.dtype)
        return (self.dropout(attn) if self.dropout_p > 0 else attn), attn

    @classmethod
    def from_stock(cls, stock, settings, fused, values):
        """Ours for the stock module `stock` (`settings`: what every variant takes;
        `values`: the relative_values option). The caller then shares the stock
        module's projections with it."""
        return cls(**settings, fused=fused)
