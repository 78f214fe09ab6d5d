"""Rotary positions (Su et al. 2021) as OpenNMT-py computes them, on fused attention."""
from onmt.modules.multi_headed_attn import apply_rotary_emb, rotaryembeddings
from onmt.utils.logging import logger

from onmt_posenc.model.attention import register_attention
from onmt_posenc.model.attention.rotary_scaling import RotaryScaling, RotaryScalingError, rotation_table
from onmt_posenc.model.attention.self_attention import SelfAttention

# OpenNMT-py's rotary table length (grown on demand).
ROTARY_POSITIONS = 2048


@register_attention("rotary")
class RotaryAttention(SelfAttention):
    """Rotary positions (Su et al. 2021, RoFormer, eq. 34): the query at position m
    and the key at position n are rotated by m*theta_i and n*theta_i in each plane i,
    theta_i = base**(-2i/d), so that q.k depends on n - m only.

    OpenNMT-py's own rotation (`rotaryembeddings`, `apply_rotary_emb`, its
    `rotary_interleave`, `rotary_theta` and `rotary_dim`), applied before the keys
    enter the layer cache, then fused attention: OpenNMT-py 3.5.1 uses its plain
    path for rotary on CPU and in every encoder.

    At translation, `scaling` (onmt_translate's rotary_scaling: `rotary_scaling`) rescales
    the rotation for inputs longer than the model's longest training source; set per batch by
    `scale_for_input`, None otherwise.
    """

    settings = ("rotary_dim", "rotary_interleave", "rotary_theta")
    # onmt_translate's rescaling (model.options.add_translate_options; `choose_scaling`)
    translate_options = ("rotary_scaling", "rotary_training_length")

    # (method, the longest training source) of onmt_translate's rotary_scaling, else None
    scaling_rule = None
    # the RotaryScaling of the batch being translated, or None: OpenNMT-py's table
    scaling = None

    @classmethod
    def chosen_by_onmt(cls, buckets, distance):
        return buckets <= 0 and distance == -1  # T5's buckets first, as in OpenNMT-py

    @classmethod
    def export_refusal(cls, model_opt):
        return None

    @classmethod
    def ctranslate2_attention(cls, model_opt):
        """CTranslate2's rotary attention, which means the same by each option (0 dimensions:
        the whole head). The stock converter writes it for decoder-only models only
        (CTranslate2 issues 1283, 1657)."""
        from ctranslate2.specs.attention_spec import MultiHeadAttentionSpec

        if model_opt.decoder_type == "transformer_lm":
            return None
        return MultiHeadAttentionSpec(self_attention=True, rotary_dim=model_opt.rotary_dim,
                                      rotary_interleave=model_opt.rotary_interleave, rotary_base=model_opt.rotary_theta)

    @classmethod
    def export_record(cls, model_opt):
        return dict(max_relative_positions=model_opt.max_relative_positions,
                    rotary_interleave=model_opt.rotary_interleave, rotary_theta=model_opt.rotary_theta,
                    rotary_dim=model_opt.rotary_dim)

    def __init__(self, head_count, model_dim, rotary_dim, rotary_interleave, rotary_theta, dropout=0.1,
                 is_decoder=True, add_qkvbias=False, fused=True):
        super().__init__(head_count, model_dim, dropout, is_decoder, add_qkvbias, fused)
        self.rotary_dim, self.rotary_interleave, self.rotary_theta = rotary_dim, rotary_interleave, rotary_theta
        # Not a buffer: `Module.to(dtype)`, which OpenNMT-py applies to the model,
        # would cast the complex table to real. Not named `rope` either: the stock
        # decoder moves a layer's `rope`, `cos` and `sin` when it has a `rope`.
        self.rotations = self.angles(ROTARY_POSITIONS)

    def angles(self, positions):
        """(positions, rotary_dim) complex rotations: OpenNMT-py's table, or the one `scaling`
        makes (at a factor of 1 every scaling is OpenNMT-py's rotation: its table)."""
        if self.scaling is None or self.scaling.factor == 1:
            return rotaryembeddings(self.rotary_dim, maxseqlen=positions, base=self.rotary_theta)[0]
        return rotation_table(self.scaling, self.rotary_dim, positions, self.rotary_theta)

    def scale_for_input(self, input_length):
        """The rotation for a batch whose longest source has `input_length` tokens, by the
        layer's scaling rule (none: unchanged)."""
        if self.scaling_rule is None:
            return
        method, training_length = self.scaling_rule
        scaling = RotaryScaling.for_input(method, input_length, training_length)
        if scaling != self.scaling:
            self.scaling = scaling
            self.rotations = self.angles(ROTARY_POSITIONS)

    def rotated(self, q, k, first_position):
        last = first_position + q.size(2)
        if last > self.rotations.size(0):  # as OpenNMT-py: a longer table, 2,048 positions to spare
            self.rotations = self.angles(last + ROTARY_POSITIONS)
        if self.rotations.device != q.device:
            self.rotations = self.rotations.to(q.device)
        return apply_rotary_emb(q, k, self.rotations[first_position:last], interleave=self.rotary_interleave)

    @classmethod
    def from_stock(cls, stock, settings, fused, values):
        return cls(**settings, rotary_dim=stock.rotary_dim, rotary_interleave=stock.rotary_interleave,
                   rotary_theta=stock.rotary_theta, fused=fused)


def choose_scaling(model, model_opt, opt):
    """onmt_translate's rotary_scaling for every rotary self-attention of a loaded model: the
    method and the longest training source (rotary_training_length, else what the checkpoint
    records: `longest_training_source`). RotaryScalingError where the model has no rotary
    positions or no length is known."""
    method = getattr(opt, "rotary_scaling", None)
    if method is None:
        return
    layers = [module for module in model.modules() if isinstance(module, RotaryAttention)]
    where = f"-rotary_scaling {method}, model {', '.join(map(str, getattr(opt, 'models', None) or ['?']))}"
    if not layers:
        raise RotaryScalingError(f"{where}: the model has no rotary positions (max_relative_positions -1)")
    length = getattr(opt, "rotary_training_length", None) or getattr(model_opt, "longest_training_source", None)
    if not length:
        raise RotaryScalingError(f"{where}: the checkpoint records no longest training source (onmt_train records it "
                                "since issue 72): give -rotary_training_length N, its longest training source in "
                                "tokens")
    for layer in layers:
        layer.scaling_rule = (method, length)
    logger.info("onmt-posenc: rotary positions rescaled (%s) for sources longer than %d tokens, the longest training "
                "source%s", method, length, "" if getattr(opt, "rotary_training_length", None) else
                " the checkpoint records")


def scale_for_input(model, input_length):
    """Each rotary self-attention of `model` rescaled for a batch whose longest source has
    `input_length` tokens (where onmt_translate's rotary_scaling asks); a factor other than the
    previous batch's is said in the log."""
    layers = [module for module in model.modules() if isinstance(module, RotaryAttention)]
    before = layers[0].scaling if layers else None
    for layer in layers:
        layer.scale_for_input(input_length)
    scaling = layers[0].scaling if layers else None
    if scaling is not None and scaling != before and (before is not None or scaling.factor > 1):
        logger.info("onmt-posenc: rotary positions rescaled by s = %.3g (%s) for a batch of sources up to %d tokens",
                    scaling.factor, scaling.method, input_length)
