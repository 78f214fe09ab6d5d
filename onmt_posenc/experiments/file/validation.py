"""An experiment file's mapping checked against its schema (schema.ExperimentKeys), and a
mistake said in one line: `FILE:LINE: where.key: what is wrong`, the line that of the key in
the file (none for a value a `--set` gave), pydantic's own words replaced by the project's."""
import yaml
from pydantic import ValidationError

from onmt_posenc.experiments.file.schema import ExperimentKeys
from onmt_posenc.experiments.file.spec import fail, shown, source_loc

# pydantic's error types, in the words the file's other checks use
MESSAGES = {
    "string_type": "must be a non-empty string", "string_too_short": "must be a non-empty string",
    "int_type": "must be an integer", "float_type": "must be a number", "bool_type": "must be true or false",
    "model_type": "must be a mapping", "dict_type": "must be a mapping", "too_short": "must not be empty",
}
MAPPING = ("model_type", "dict_type")


def validated(mapping, path, overridden=()):
    """The file's keys (an ExperimentKeys) of `mapping`, read from `path` (and the files it
    includes: reading.ExperimentMapping); `overridden`: the key paths (tuples) that `--set`
    gave, which have no line in the file."""
    try:
        return ExperimentKeys.model_validate(mapping)
    except ValidationError as errors:
        error = errors.errors()[0]
        loc = list(error["loc"])
        if loc[-1:] == ["[key]"]:  # a key of a mapping that is wrong itself: the message shows it
            loc = loc[:-2]
        context = error.get("ctx") or {}
        loc += [context["key"]] if "key" in context else []
        if loc[:1] == ["grid"] and not isinstance(mapping.get("grid"), list):
            del loc[1]  # one mapping of axes, which validation took as a grid of one line
        at = loc + [context["at"]] if "at" in context else loc
        what = where(loc) or ("the experiment file" if error["type"] in MAPPING else "")
        fail(place(mapping, path, at, overridden), f"{what}: {message(error)}" if what else message(error))


def key_place(mapping, path, overridden, source, key):
    """`place` of `key` in a run's config layer `source`, as Run.sources names it ('methods.shape',
    'settings', ...); the file alone for a layer it does not hold (the recipe)."""
    loc = source_loc(source)
    return path if loc is None else place(mapping, path, [*loc, key], overridden)


def place(mapping, path, loc, overridden=()):
    """'FILE:LINE' of the key at `loc` (its keys and list indices from the top) in the file it
    comes from (an included file's own, see reading.ExperimentMapping); the file alone where the
    key has no line (a value that `--set` gave: `overridden`, its key paths as tuples)."""
    origin = mapping.origin(loc[0], path) if loc and hasattr(mapping, "origin") else path
    line = None if any(tuple(loc[:len(key)]) == key for key in overridden) else line_of(origin, loc)
    return f"{origin}:{line}" if line else origin


def message(error):
    kind = error["type"]
    if kind == "missing":
        return "is required"
    if kind == "greater_than_equal":
        return f"must be >= {error['ctx']['ge']}, got {shown(error['input'])}"
    if kind in MESSAGES:
        return f"{MESSAGES[kind]}, got {shown(error['input'])}"
    return error["msg"]  # the schema's own errors: worded there


def where(loc):
    """('grid', 1, 'seed') -> 'grid[1].seed'; () -> ''."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text


def line_of(path, loc):
    """The line of the deepest key of `loc` that the file holds (a missing key: the line of the
    mapping that lacks it); None where the file holds none of it."""
    try:
        node = yaml.compose(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    line = None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            found = next(((key, value) for key, value in node.value if key.value == str(part)), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            found = (node.value[part], node.value[part])
        else:
            found = None
        if found is None:
            break
        line, node = found[0].start_mark.line + 1, found[1]
    return line
