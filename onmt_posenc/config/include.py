"""`include:` in OpenNMT-py YAML configs, so recipes state shared settings once.

    # recipes/shape.yaml
    include: base.yaml        # a path relative to this file, or a list of them
    shape_max_shift: 500

Included files are read first, in order; the including file's keys win. The
merged mapping then goes through configargparse's own YAML handling, so every
other key behaves exactly as in stock OpenNMT-py.
"""
import io
import re
from pathlib import Path

import configargparse
import yaml

from onmt_posenc.core.text import scan_text

INCLUDE_KEY = "include"


def _included_paths(mapping, path):
    includes = mapping.get(INCLUDE_KEY) or []
    if isinstance(includes, str):
        includes = [includes]
    if not isinstance(includes, list) or not all(isinstance(name, str) for name in includes):
        raise configargparse.ConfigFileParserException(
            f"{path}: {INCLUDE_KEY} must be a file name or a list of them, got {includes!r}")
    return [(Path(path).parent / name).resolve() for name in includes]


def yaml_error_text(path, error):
    """A YAML error in one line, 'FILE:LINE: not valid YAML (what)': PyYAML's own text
    spans several lines and names the stream, not always the file."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    where = f"{path}:{mark.line + 1}" if mark else f"{path}"
    what = getattr(error, "problem", None) or getattr(error, "context", None) or str(error).splitlines()[0]
    return f"{where}: not valid YAML ({what})"


def read_yaml(path):
    """The YAML value of a file. Text that is not UTF-8 or not YAML is a
    ConfigFileParserException naming the file and line, which configargparse (and so
    every OpenNMT-py command) reports as a one-line usage error."""
    try:
        with open(path, encoding="utf-8") as f:
            return yaml.safe_load(f)
    except UnicodeDecodeError:
        _, line, reason = scan_text(path)
        raise configargparse.ConfigFileParserException(f"{path}:{line}: not UTF-8 text ({reason})") from None
    except yaml.YAMLError as error:
        raise configargparse.ConfigFileParserException(yaml_error_text(path, error)) from None


def _read_mapping(path):
    mapping = read_yaml(path) or {}
    if not isinstance(mapping, dict):
        raise configargparse.ConfigFileParserException(f"{path}: a config file must be a YAML mapping")
    return mapping


def config_chain(path, _seen=()):
    """The config file and everything it includes, included files first."""
    path = Path(path).resolve()
    if path in _seen:
        cycle = " -> ".join(str(p) for p in (*_seen, path))
        raise configargparse.ConfigFileParserException(f"include cycle: {cycle}")
    if not path.is_file():
        where = f" (included from {_seen[-1]})" if _seen else ""
        raise configargparse.ConfigFileParserException(f"config file not found: {path}{where}")
    chain = []
    for included in _included_paths(_read_mapping(path), path):
        chain.extend(config_chain(included, (*_seen, path)))
    return chain + [path]


def merged_mapping(path):
    merged = {}
    for config in config_chain(path):
        mapping = _read_mapping(config)
        mapping.pop(INCLUDE_KEY, None)
        merged.update(mapping)
    return merged


class IncludingYAMLConfigFileParser(configargparse.YAMLConfigFileParser):
    def parse(self, stream):
        path = getattr(stream, "name", None)
        if path is None or not Path(path).is_file():
            return super().parse(stream)
        merged = merged_mapping(path)
        empty = [key for key, value in merged.items() if value is None]
        if empty:
            # configargparse drops a key without a value: the option's default would
            # be used without a word (`train_steps:` trains for 100,000 updates)
            raise configargparse.ConfigFileParserException(
                f"{empty[0]} has no value (set in {where_set(empty[0], path)}): give it one, or remove "
                "the line to use the default"
            )
        return super().parse(io.StringIO(yaml.safe_dump(merged, sort_keys=False)))


def on_command_line(key, argv):
    """Whether `argv` (the command's arguments) sets `-key`/`--key`."""
    return any(re.fullmatch(rf"--?{re.escape(key)}(=.*)?", token) for token in argv or ())


def where_set(key, config_path, argv=None):
    """'file:line' of a top-level YAML key (the including file wins), or 'the command line'
    (also where `argv` sets it: the command line overrides the config)."""
    if config_path and not on_command_line(key, argv):
        pattern = re.compile(rf"^{re.escape(key)}\s*:")
        for path in reversed(config_chain(config_path)):
            with open(path, encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    if pattern.match(line):
                        return f"{path}:{number}"
    return "the command line"
