"""Options checked by OpenNMT-py's own parsers before anything runs: what a command's
parser, and the checks after it, say of a YAML config, as one message naming the key."""
import re
import tempfile

import yaml


class ParserStopped(Exception):
    pass


def parse_error_text(message, key):
    """An OpenNMT-py parser's or option check's message without the option's own name."""
    message = re.sub(r"^\S+: error: ", "", message.strip())
    message = re.sub(r"^argument [-\w/]+: ", "", message)
    message = re.sub(r" \(set in [^)]*\)", "", message)  # strict_config names the generated file's line
    return message.removeprefix(f"{key} ").replace(f"unknown option '{key}'", "unknown option")


def parser_problem(get_parser, config, args=(), validate=lambda opt: None):
    """What an OpenNMT-py command's parser, then `validate`, says of the YAML config
    `config` (and the command line `args`), or None: an unknown key, a value of the
    wrong type or out of range."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", encoding="utf-8") as f:
        f.write(config)
        f.flush()
        parser = get_parser()

        def stop(status=0, message=None):
            raise ParserStopped(message or "")

        parser.exit, parser.error = stop, lambda message: stop(2, message)
        try:
            opt, _ = parser.parse_known_args(["-config", f.name, *args])
            validate(opt)
        except (ParserStopped, ValueError, AssertionError) as error:
            return str(error)
    return None


def key_named(message, keys):
    """The key among `keys` that a parser's message is about, or None."""
    unknown = re.search(r"unknown option '(\w+)'", message)
    named = sorted((key for key in map(str, keys) if re.search(rf"(?<![\w]){re.escape(key)}(?![\w])", message)),
                   key=len, reverse=True)
    return unknown.group(1) if unknown else named[0] if named else None


def translate_options_problem(translate):
    """What onmt_translate's parser says of the options `translate` (a mapping), as
    (the key it is about or None, what is wrong), or None: checked before anything is
    translated, where onmt_translate itself would fail on the first use."""
    from onmt.bin.translate import _get_parser as translate_parser

    # parsed only: onmt_translate's validation (the extension's preflight) looks for the model and -src files
    message = parser_problem(translate_parser, yaml.safe_dump(translate), ["-model", "model.pt", "-src", "src"])
    if message is not None:
        key = key_named(message, translate)
        return key, parse_error_text(message, key or "")
    # a key of another command passes the parser, but onmt_translate refuses it when it runs
    known = {name.lstrip("-") for name in translate_parser()._option_string_actions}
    unknown = [key for key in translate if key not in known]
    return (unknown[0], "not an onmt_translate option") if unknown else None
