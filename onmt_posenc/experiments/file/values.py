"""What a value of the experiment file must be. Each check returns the value, or fails with
an ExperimentError naming the file and the key (`where`)."""
from onmt_posenc.core.arguments import is_one_token
from onmt_posenc.experiments.file.spec import fail, shown


def check_mapping(value, path, where):
    if value is None:
        return {}
    if not isinstance(value, dict):
        fail(path, f"{where} must be a mapping, got {type(value).__name__}")
    return value


def check_string(value, path, where):
    """A name or a path. YAML reads `5`, `true` or `[a]` as other types, which neither
    Path nor a lookup among the names can take."""
    if not isinstance(value, str) or not value:
        fail(path, f"{where}: must be a non-empty string, got {shown(value)}")
    return value


def check_names(value, path, where):
    """A non-empty list of names: a single name (`sets: valid`) would be read letter by letter."""
    if not isinstance(value, list) or not value or not all(isinstance(name, str) and name for name in value):
        fail(path, f"{where}: must be a non-empty list of names, got {shown(value)}")
    return value


def check_labels(mapping, path, where):
    """The labels of `methods` or `data`: they name folders and runs."""
    for label in mapping:
        if not isinstance(label, str) or not label or "/" in label:
            fail(path, f"{where}: {shown(label)} cannot name runs and folders; use a word (a string without '/')")
    return mapping


def check_integer(value, path, where, least=0):
    if not isinstance(value, int) or isinstance(value, bool):
        fail(path, f"{where}: must be an integer, got {shown(value)}")
    if value < least:
        fail(path, f"{where}: must be >= {least}, got {value}")
    return value


def check_offsets(value, path, where):
    if (not isinstance(value, list) or len(value) < 2
            or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in value)
            or len(set(value)) < 2):
        fail(path, f"{where}: must be a list of two or more different integers >= 0 (offsets compared with each "
                    f"other), got {shown(value)}")
    return value


def check_separator(value, path, where):
    if not isinstance(value, str) or not is_one_token(value):
        fail(path, f"{where}: must be one token (a string without spaces), got {shown(value)}")
    return value


def check_positive(value, path, where):
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        fail(path, f"{where} must be a positive integer, got {value!r}")
    return value


def check_option_names(keys, path, where):
    """OpenNMT-py keys are option names: a YAML `5:` or `true:` is none."""
    for key in keys:
        if not isinstance(key, str):
            fail(path, f"{where}: {shown(key)} is not an option name")
    return keys
