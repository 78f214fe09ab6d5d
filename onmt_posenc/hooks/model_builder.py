"""Hooks into OpenNMT-py's model builder (onmt.model_builder): each side's position module
and the self-attention variant put in place, before parameters are initialized or loaded, and
said in the log (in onmt_train's and onmt_translate's alike: both build the model here); its
layers built without the meta device."""
import functools

from onmt_posenc.model import options

SIDE_NAMES = {"src": "encoder", "tgt": "decoder"}


def build_position_encodings():
    """Replace the `pe` module that `build_embeddings` made with the chosen scheme, and say
    which, with its settings (the module's `extra_repr`)."""
    from onmt import model_builder
    from onmt.utils.logging import logger

    from onmt_posenc.model import positions

    stock_build_embeddings = model_builder.build_embeddings

    @functools.wraps(stock_build_embeddings)
    def build_embeddings(opt, vocabs, for_encoder=True):
        embeddings = stock_build_embeddings(opt, vocabs, for_encoder=for_encoder)
        side = "src" if for_encoder else "tgt"
        choice = getattr(opt, f"{side}_position_encoding", None)
        if choice is None:  # a caller that skipped validation: resolve now
            choice = getattr(options.resolve_position_options(opt), f"{side}_position_encoding")
        module = positions.install_position_encoding(embeddings, choice, opt)
        logger.info("onmt-posenc positions of the %s: %s", SIDE_NAMES[side], positions.described(choice, module))
        return embeddings

    model_builder.build_embeddings = build_embeddings


def build_attention():
    """Swap every Transformer layer's self-attention for ours (onmt_posenc.model.attention:
    fused attention for absolute and OpenNMT-py's own schemes, fast Shaw, Music) right after `build_task_specific_model`,
    which `build_base_model` calls for training and for translation: before
    parameters are initialized or loaded, with OpenNMT-py's parameter names."""
    from onmt import model_builder
    from onmt.utils.logging import logger

    from onmt_posenc.model import attention

    stock_build_task_specific_model = model_builder.build_task_specific_model

    @functools.wraps(stock_build_task_specific_model)
    def build_task_specific_model(model_opt, vocabs):
        model = stock_build_task_specific_model(model_opt, vocabs)
        for side, described in attention.install(model, options.resolve_attention_options(model_opt)).items():
            logger.info("onmt-posenc self-attention of the %s: %s", SIDE_NAMES[side], described)
        return model

    model_builder.build_task_specific_model = build_task_specific_model


def initialize_parameters():
    """`build_model` initializes the parameters of a new model (no checkpoint); then the
    word embeddings are drawn as word_embedding_init says, and our variants' own tables
    (Music's) get their own initialization. A run resumed with train_from builds from the
    checkpoint's options: its attention kernel is then set again from onmt_train's own (`opt`),
    and its checkpoints record that one.
    onmt_train reaches the wrapper because `onmt.train_single` imports `build_model` after
    `import onmt`."""
    from onmt import model_builder

    from onmt_posenc.model import attention, word_embeddings

    stock_build_model = model_builder.build_model

    @functools.wraps(stock_build_model)
    def build_model(model_opt, opt, vocabs, checkpoint, device_id):
        model = stock_build_model(model_opt, opt, vocabs, checkpoint, device_id)
        if checkpoint is None:  # otherwise they were loaded from it
            word_embeddings.initialize(model, model_opt)
            attention.initialize(model)
        attention.choose_kernel(model, model_opt, opt)
        return model

    model_builder.build_model = build_model


def apply_the_translating_options_to_loaded_models():
    """`load_test_model` builds the model from the checkpoint's options; the translating
    command's own options then set its attention kernel (attention_kernel: onmt_translate's, or
    'auto' for a caller whose options have none) and its rotary layers' rule (rotary_scaling,
    see `rescale_rotary_positions_when_translating`). The translator and the ensemble look the
    function up in `onmt.model_builder` when they call it."""
    from onmt import model_builder

    from onmt_posenc.model import attention

    stock_load_test_model = model_builder.load_test_model

    @functools.wraps(stock_load_test_model)
    def load_test_model(opt, *args, **kwargs):
        # rotary is imported when called: at activation the attention package may be importing still
        from onmt_posenc.model.attention import rotary

        vocabs, model, model_opt = stock_load_test_model(opt, *args, **kwargs)
        attention.choose_kernel(model, model_opt, opt)
        rotary.choose_scaling(model, model_opt, opt)
        return vocabs, model, model_opt

    model_builder.load_test_model = load_test_model


def build_layers_without_the_meta_device():
    """OpenNMT-py builds its embeddings and linear layers with torch's `skip_init`: on the meta
    device, then emptied on the CPU. On torch 2.13, initializing a meta tensor imports
    torch._dynamo on first use, which adds 2-3 s to the start of every onmt_translate on a CPU
    (half of a small model's translation). Here they are built on the CPU. The random state is
    saved and restored around the build, so the draws of a seeded run do not move. Their values
    do not matter: `build_model` then initializes every parameter, or loads it from the checkpoint,
    as it does after `skip_init`."""
    import torch
    from onmt import model_builder
    from onmt.modules import embeddings, multi_headed_attn, position_ffn

    def built_on_the_cpu(module_cls, *args, **kwargs):
        with torch.random.fork_rng(devices=[]):
            return module_cls(*args, **kwargs)

    for module in (embeddings, multi_headed_attn, position_ffn, model_builder):
        module.skip_init = built_on_the_cpu


def rescale_rotary_positions_when_translating():
    """onmt_translate's rotary_scaling: `load_test_model` (each model of an ensemble) gives the
    model's rotary layers their rule (`apply_the_translating_options_to_loaded_models`), and the translator's
    `_run_encoder`, which every batch's search starts with, their factor from the batch's longest
    source, before the encoder and the decoder run."""
    from onmt.translate.translator import Translator

    stock_run_encoder = Translator._run_encoder

    @functools.wraps(stock_run_encoder)
    def _run_encoder(self, batch):
        from onmt_posenc.model.attention import rotary

        rotary.scale_for_input(self.model, int(batch["srclen"].max()))
        return stock_run_encoder(self, batch)

    Translator._run_encoder = _run_encoder
