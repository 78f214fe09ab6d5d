"""The extension's way into OpenNMT-py: `activate()` runs once, right after `import onmt`
(see onmt_posenc.startup), and installs every hook. Each hook names the OpenNMT-py 3.5.1
function it wraps, in the module of what it patches; when OpenNMT-py changes, those
modules are where it breaks:

    parser          onmt.opts, onmt.utils.parse.ArgumentParser
    data_pipeline   onmt.inputters, onmt.transforms, onmt.bin.build_vocab
    model_builder   onmt.model_builder, onmt.modules (their skip_init), onmt.translate.translator
    commands        torch.load / torch.save, the commands' checks, sys.excepthook, onmt.trainer
    ctranslate2     ctranslate2.converters.opennmt_py (installed by the start-up hook
                    when CTranslate2's converter is imported)
"""
from onmt_posenc.hooks import commands, data_pipeline, model_builder, parser

_active = False


def activate():
    global _active
    if _active:
        return
    _active = True
    data_pipeline.register_transforms()
    data_pipeline.split_tokens_on_any_whitespace()
    data_pipeline.support_concat_pairs()
    data_pipeline.dump_samples_before_the_pool_ends()
    data_pipeline.say_how_to_build_the_vocabulary_again()
    parser.add_options()
    parser.read_config_includes_and_flag_values()
    parser.reject_unknown_config_keys()
    parser.validate_options()
    model_builder.build_layers_without_the_meta_device()
    model_builder.build_position_encodings()
    model_builder.build_attention()
    model_builder.initialize_parameters()
    model_builder.apply_the_translating_options_to_loaded_models()
    model_builder.rescale_rotary_positions_when_translating()
    data_pipeline.carry_target_phrases()
    commands.load_checkpoints_safely()
    commands.check_checkpoint_folders()
    commands.check_before_starting()
    commands.no_empty_translation_on_failure()
    commands.errors_in_one_line()
    commands.record_the_longest_training_source()
