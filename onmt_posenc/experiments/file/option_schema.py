"""The OpenNMT-py keys of an experiment file as JSON Schema, generated from the commands' own
parsers (with the extension's options): `settings`, `methods` and each data setting's `settings`
take what the runner's check takes (opennmt_checks: onmt_train's options, or another command's,
as in any OpenNMT-py YAML), `evaluation.translate` onmt_translate's; the keys the runner sets
itself are left out. Each key has the type its parser converts to, its choices as an enum,
and the least value the extension checks (each position scheme's `option_minimums`, the
schedule's counts), so that an editor flags what `onmt-posenc run` would refuse."""
import argparse
import re

from onmt_posenc.core.arguments import non_negative_int, one_token, positive_int
from onmt_posenc.experiments.file.spec import RUNNER_KEYS, RUNNER_TRANSLATE_KEYS

# What JSON Schema says of the value of an option of each argparse type (None: a string)
TYPES = {
    None: {"type": "string"},
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    positive_int: {"type": "integer", "minimum": 1},
    non_negative_int: {"type": "integer", "minimum": 0},
    one_token: {"type": "string", "pattern": r"^\S+$"},
}
FLAGS = (argparse._StoreTrueAction, argparse._StoreFalseAction)
# refused by the runner in `settings`, `methods` and data settings (owned_keys.reject_runner_keys)
REFUSED_IN_TRAINING = (*RUNNER_KEYS, "seed")


def option_minimums():
    """{option: its least value} where the extension checks one (each registered position
    scheme's and self-attention variant's `option_minimums`, the schedule's counts)."""
    from onmt_posenc.hooks.preflight import SCHEDULE_STEPS
    from onmt_posenc.model.attention import ATTENTIONS
    from onmt_posenc.model.positions import POSITION_ENCODINGS

    minimums = dict.fromkeys(SCHEDULE_STEPS, 1)
    for registered in (*POSITION_ENCODINGS.values(), *ATTENTIONS.values()):
        minimums.update(registered.option_minimums)
    return minimums


def value_schema(action, minimum=None):
    """The JSON Schema of an option's value in YAML (a list where it takes several, or one of them)."""
    if isinstance(action, FLAGS):
        return {"type": "boolean"}
    if isinstance(action, argparse._CountAction):
        return {"type": "integer", "minimum": 0}
    one = {"enum": list(action.choices)} if action.choices is not None else dict(TYPES.get(action.type, {}))
    if minimum is not None:
        one["minimum"] = minimum
    if action.nargs in ("+", "*") or isinstance(action.nargs, int) or isinstance(action, argparse._AppendAction):
        # configargparse takes a YAML list, or one value alone
        return {"if": {"type": "array"}, "then": {"items": one}, "else": one}
    return one


def first_sentence(text):
    """The help text up to its first full stop ("et al.", "e.g.", "i.e." end no sentence)."""
    return re.split(r"(?<!\bal)(?<!e\.g)(?<!i\.e)\. ", text or "")[0].strip().rstrip(".")


def options_schema(parsers, refused):
    """A mapping of the options of `parsers` (the first that has a key describes it) without
    the `refused` keys, in JSON Schema: no other key."""
    minimums = option_minimums()
    properties = {}
    for parser in parsers:
        for action in parser._actions:
            if (getattr(action, "is_config_file_arg", False) or getattr(action, "is_write_out_config_file_arg", False)
                    or isinstance(action, argparse._HelpAction)):
                continue
            for key in parser.get_possible_config_keys(action):
                if key.startswith("-") or key in refused or key in properties:
                    continue
                properties[key] = {**value_schema(action, minimums.get(key)),
                                   **({"description": first_sentence(parser._get_formatter()._expand_help(action))}
                                      if action.help else {})}
    # `key:` with no value: nothing set
    return {"type": ["object", "null"], "properties": dict(sorted(properties.items())), "additionalProperties": False}


def training_options_schema():
    from onmt_posenc.config.strict import command_parsers

    return options_schema(command_parsers().values(), REFUSED_IN_TRAINING)


def translation_options_schema():
    from onmt_posenc.config.strict import command_parsers

    return options_schema([command_parsers()["onmt_translate"]], RUNNER_TRANSLATE_KEYS)
