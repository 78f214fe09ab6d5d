"""The experiment file's keys, their types and defaults, declared once: pydantic models that
check a file as it is read (validation), that `onmt-posenc schema` prints as a JSON Schema
for editors, and that docs/experiments.md's key tables are tested against.

What one key cannot say alone (a baseline among the methods, a grid's names among the data
settings, a data setting's design) is checked where the file is turned into runs (loading,
data_settings, grid). A key's own message is the `msg` of its error here, in the words
validation prints after the file and the key: `must be ..., got VALUE` (VALUE as YAML
writes it); its context's `key` is a key of the mapping the message is about, `at` the key
whose line it names."""
import dataclasses
import json
from typing import Any, ClassVar, Literal, Optional, Union

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, WithJsonSchema, create_model,
                      model_validator)
from pydantic_core import PydanticCustomError
from typing_extensions import Annotated

from onmt_posenc.core.arguments import is_one_token
from onmt_posenc.core.joining import DEFAULT_SEP
from onmt_posenc.data.synthetic import SyntheticTask
from onmt_posenc.experiments.file.spec import shown


def _refuse(kind, message, value):
    raise PydanticCustomError(kind, message, {"value": shown(value)})


def _integer(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _option_name(key):
    if not isinstance(key, str):  # YAML reads `5:` and `true:` as a number and a boolean
        _refuse("option_name", "{value} is not an option name", key)
    return key


def _label(key):
    if not isinstance(key, str) or not key or "/" in key:
        _refuse("label", "{value} cannot name runs and folders; use a word (a string without '/')", key)
    return key


def _names(value):
    # A single name (`sets: valid`) would be read letter by letter.
    if not isinstance(value, list) or not value or not all(isinstance(name, str) and name for name in value):
        _refuse("names", "must be a non-empty list of names, got {value}", value)
    return value


def _offsets(value):
    if (not isinstance(value, list) or len(value) < 2 or not all(_integer(k) and k >= 0 for k in value)
            or len(set(value)) < 2):
        _refuse("offsets", "must be a list of two or more different integers >= 0 (offsets compared with each "
                           "other), got {value}", value)
    return value


def _separator(value):
    if not isinstance(value, str) or not is_one_token(value):
        _refuse("separator", "must be one token (a string without spaces), got {value}", value)
    return value


def _axis(kind):
    """A grid axis: a non-empty list of names (method, data) or of integers >= 0 (seed, K);
    the message shows the item that is wrong."""
    def check(values):
        if not isinstance(values, list) or not values:
            _refuse("axis", "must be a non-empty list, got {value}", values)
        for value in values:
            if kind is str and not isinstance(value, str):
                _refuse("axis", "must be names, got {value}", value)
            if kind is int and not _integer(value):
                _refuse("axis", "must be integers, got {value}", value)
            if kind is int and value < 0:
                _refuse("axis", "must be >= 0, got {value}", value)
        return values
    return check


def _empty_if_none(value):
    return {} if value is None else value  # `key:` with no value: nothing set


Text = Annotated[str, Field(min_length=1)]
Count = Annotated[int, Field(ge=1)]
# (pydantic writes a constraint into the JSON Schema only when it comes before the validator)
OptionName = Annotated[str, BeforeValidator(_option_name)]
Label = Annotated[str, Field(pattern="^[^/]+$"), BeforeValidator(_label)]
Names = Annotated[list[Text], Field(min_length=1), BeforeValidator(_names)]
Offsets = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=2), BeforeValidator(_offsets)]
Separator = Annotated[str, Field(pattern=r"^\S+$"), BeforeValidator(_separator)]
NameAxis = Annotated[list[str], Field(min_length=1), BeforeValidator(_axis(str))]
NumberAxis = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1), BeforeValidator(_axis(int))]
# OpenNMT-py keys: their values are checked by OpenNMT-py's own parsers (opennmt_checks) when the
# runner starts; the JSON Schema names them (option_schema, generated from those parsers)
# (a reference that json_schema puts in place: the generated schemas need OpenNMT-py imported)
TRAINING_OPTIONS, TRANSLATION_OPTIONS = "OpenNMTTrainingOptions", "OpenNMTTranslationOptions"
OPTIONS_PLACEHOLDER = "onmt-posenc-options"


def _options(schema_name, description):
    return Annotated[dict[OptionName, Any], BeforeValidator(_empty_if_none),
                     WithJsonSchema({OPTIONS_PLACEHOLDER: schema_name}), Field(description=description)]


Options = _options(TRAINING_OPTIONS, "OpenNMT-py options (onmt_train's, or onmt_translate's)")
TranslateOptions = _options(TRANSLATION_OPTIONS, "onmt_translate's options")


def _labelled(kind):
    """label -> `kind`, a mapping with no value being empty."""
    return Annotated[dict[Label, kind],
                     BeforeValidator(_empty_if_none, json_schema_input_type=Optional[dict[Label, kind]])]


class Keys(BaseModel):
    """A mapping of the file: its keys known, its values of their types (YAML's `5` is no name)."""
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)
    # how an unknown key's message calls the keys of this mapping
    what: ClassVar[str] = "keys"
    # keys that once meant something, and why they are refused now
    refused: ClassVar[dict] = {}

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, value):
        """An unknown key named with the known ones, in the order they are declared (pydantic's
        own error would name the key alone)."""
        value = _empty_if_none(value)
        if not isinstance(value, dict):
            return value
        for key in value:
            if key in cls.refused:
                raise PydanticCustomError("refused", cls.refused[key], {"key": key})
        unknown = [key for key in value if key not in cls.model_fields]
        if unknown:
            raise PydanticCustomError("unknown", "unknown {what} {unknown}; known: {known}",
                                      {"what": cls.what, "unknown": repr(unknown),
                                       "known": repr(list(cls.model_fields)), "at": unknown[0]})
        return value

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema, handler):
        schema = handler(core_schema)
        handler.resolve_ref_schema(schema)["type"] = ["object", "null"]  # `key:` with no value: as {}
        return schema


class FilePairKeys(Keys):
    src: Text = Field(description="source file, relative to the experiment file")
    tgt: Text = Field(description="target file, as the model reads it (tokenized like the training targets)")
    ref: Optional[Text] = Field(None, description="raw reference BLEU is computed against (default: tgt)")
    lines: Optional[Count] = Field(None, description="only the first N lines")
    join: Optional[Count] = Field(None, description="INTERPOLATE: N consecutive lines per example")
    docids: Optional[Text] = Field(None, description="one document id per line: joined lines never cross a document")
    joint: Literal["sep", "space"] = Field("sep", description="with join: what joins the lines, the separator token "
                                                              "<sep> or a plain space")


class _SyntheticRanges(Keys):
    """The generated task's parameters (onmt_posenc.data.synthetic.SyntheticTask, which checks
    their ranges), built from its fields so that the two never disagree."""

    @model_validator(mode="after")
    def _in_range(self):
        self.task()
        return self

    def task(self):
        try:
            return SyntheticTask(**self.model_dump())
        except ValueError as error:
            raise PydanticCustomError("synthetic", str(error)) from None


def _synthetic_type(field):
    kind = float if field.name.endswith("_rate") else int
    return Optional[kind] if field.default is None else kind


SyntheticKeys = create_model("SyntheticKeys", __base__=_SyntheticRanges, __doc__=_SyntheticRanges.__doc__,
                             **{f.name: (_synthetic_type(f), f.default) for f in dataclasses.fields(SyntheticTask)})


class DataSettingKeys(Keys):
    train: FilePairKeys = Field(None, description="the training corpus")
    valid: FilePairKeys = Field(None, description="onmt_train's validation set")
    eval: dict[Text, FilePairKeys] = Field(None, description="name -> the sets translated and scored")
    folder: Text = Field(None, description="a folder in OpenNMT-py's layout, as `onmt-posenc prepare` "
                                                     "writes it: every set comes from it")
    synthetic: SyntheticKeys = Field(None, description="the generated task's parameters")
    extrapolate: Optional[Count] = Field(None, description="EXTRAPOLATE: training pairs longer than N tokens dropped")
    interpolate: Optional[Count] = Field(None, description="INTERPOLATE: N adjacent pairs joined with <sep>")
    single_pairs: Optional[Count] = Field(None, description="with interpolate: single pairs mixed in, W per joined "
                                                            "example")
    warm_start: Optional[Text] = Field(None, description="each run starts from the model of its method, K and seed "
                                                         "in this data setting")
    train_pairs: Optional[Count] = Field(None, description="the first N training pairs only")
    train_sample: Optional[Count] = Field(None, description="N training pairs drawn at random (the same draw for "
                                                            "every run), in file order")
    joined_sets: Optional[list[Annotated[int, Field(ge=2)]]] = Field(
        None, description="every evaluation set that joins nothing is also translated joined k sentences per line "
                          "with a plain space, as <set>-join<k>, for each k")
    join_training: Optional[Count] = Field(None, description="each training example joins 1 to N adjacent pairs with a "
                                                             "plain space, the count drawn per example (join_adjacent)")
    target_language: Optional[Text] = Field(None, description="the target's language code (sacreBLEU's tokenizer)")
    settings: Options = {}


class GridKeys(Keys):
    what: ClassVar[str] = "axes"
    method: Optional[NameAxis] = Field(None, description="methods (default: every method)")
    data: Optional[NameAxis] = Field(None, description="data settings (default: every data setting)")
    seed: Optional[NumberAxis] = Field(None, description="seeds (default: [1])")
    K: Optional[NumberAxis] = Field(None, description="SHAPE's K (shape_max_shift), for SHAPE methods only")


def _grid_lines(value):
    return value if isinstance(value, list) else [value]  # one mapping of axes: a grid of one line


Grid = Annotated[list[GridKeys], BeforeValidator(_grid_lines, json_schema_input_type=Union[GridKeys, list[GridKeys]]),
                 Field(min_length=1)]


class VariantKeys(Keys):
    """An evaluation variant: the runs of `methods` also translated with `translate` over the
    evaluation's options (loading._variants checks both)."""
    methods: Optional[Names] = Field(None, description="the methods whose runs it applies to (default: every method "
                                                       "whose models take its translate options)")
    translate: TranslateOptions = {}


class EvaluationKeys(Keys):
    sets: Optional[Names] = Field(None, description="the BLEU table's columns (default: every shared eval set)")
    average_last: Optional[Count] = Field(None, description="checkpoints averaged (default: every saved one)")
    translate: TranslateOptions = {}
    variants: _labelled(VariantKeys) = Field(
        {}, description="name -> onmt_translate keys over translate: each evaluated set of the runs it applies to is "
                        "also translated so, and scored as <method>+<name>")


class AnalysisKeys(Keys):
    what: ClassVar[str] = "options"
    # options added after runs recorded their analyses' options (state.evaluation_of): left out of
    # `chosen` while unset, so that a run made before them is not evaluated again for nothing
    later: ClassVar[tuple] = ()

    def chosen(self):
        return {key: value for key, value in self.model_dump().items() if not (key in self.later and value is None)}


def _multiples(value):
    if (not isinstance(value, list) or not value or not all(isinstance(m, (int, float)) and not isinstance(m, bool)
                                                            and m > 0 for m in value)
            or any(b <= a for a, b in zip(value, value[1:])) or 1 not in value):
        _refuse("multiples", "must be a list of increasing numbers > 0, 1 among them (multiples of the longest "
                             "training source, where a bucket must end), got {value}", value)
    return value


Multiples = Annotated[list[Annotated[float, Field(gt=0)]], Field(min_length=1), BeforeValidator(_multiples)]


class LengthBucketsKeys(AnalysisKeys):
    sets: Optional[Names] = Field(None, description="default: every evaluation set")
    width: Count = 10
    split_at: Optional[Count] = Field(None, description="a bucket ends here, and the sentences up to it and beyond "
                                                        "it are scored apart (default: each run's longest training "
                                                        "source)")
    relative: Optional[Multiples] = Field(None, description="buckets ending at these multiples of each run's "
                                                            "longest training source, instead of width's (and one "
                                                            "beyond the last, if any source is longer)")
    later: ClassVar[tuple] = ("relative",)

    @model_validator(mode="after")
    def _relative_or_width(self):
        given = sorted({"width", "split_at"} & self.model_fields_set)
        if self.relative is not None and given:
            raise PydanticCustomError("relative", "relative buckets end at multiples of each run's longest training "
                                                  "source, and the split lies at 1x; leave out {given}",
                                      {"given": ", ".join(given), "key": given[0]})
        return self


class ShiftInvarianceKeys(AnalysisKeys):
    set: Optional[Text] = Field(None, description="default: the first evaluation set")
    offsets: Offsets = [0, 100, 250, 500]
    sentences: Count = 200


class SwappedKeys(AnalysisKeys):
    set: Text = "concat"
    sep: Separator = DEFAULT_SEP
    train_examples: Annotated[int, Field(ge=0)] = Field(1000, description="joined training examples (0: none)")


class TokenNllKeys(AnalysisKeys):
    set: Optional[Text] = Field(None, description="default: the first evaluation set")
    position_width: Count = 10
    frequency_bins: Count = 4


class PositionAblationKeys(AnalysisKeys):
    set: Optional[Text] = Field(None, description="default: the first evaluation set")
    sentences: Count = 200


class AnalysesKeys(Keys):
    """Each analysis named runs on every run, with its options (none: the defaults)."""
    what: ClassVar[str] = "analyses"
    refused: ClassVar[dict] = {"speed": "training speed is measured in every run while it trains; remove it"}
    length_buckets: LengthBucketsKeys = None
    shift_invariance: ShiftInvarianceKeys = None
    swapped: SwappedKeys = None
    token_nll: TokenNllKeys = None
    position_ablation: PositionAblationKeys = None

    # the order the file names them in, which the runner runs them in and the runs' records keep
    _order: list = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _in_the_file_s_order(cls, value, handler):
        keys = handler(value)
        keys._order = list(value) if isinstance(value, dict) else []
        return keys

    def chosen(self):
        """{name: options} of the analyses the file names (`name:` alone: its defaults)."""
        return {name: getattr(self, name).chosen() for name in self._order}


def analysis_keys(name):
    """The model of an analysis' options."""
    return AnalysesKeys.model_fields[name].annotation


class ExperimentKeys(Keys):
    """An experiment file (onmt_posenc.experiments.file.spec shows one with comments)."""
    include: Optional[Text] = Field(None, description="an experiment file this one starts from: its keys, each "
                                                      "top-level key this file gives replacing the included one")
    name: Optional[Text] = Field(None, description="the batch's name (default: the file's name)")
    output: Optional[Text] = Field(None, description="output folder (default: runs/<name>)")
    recipe: Optional[Text] = Field(None, description="an OpenNMT-py YAML every run starts from")
    settings: Options = {}
    methods: _labelled(Options) = Field(
        {}, description="label -> OpenNMT-py keys; at least one")
    baseline: Optional[Text] = Field(None, description="the method gains and speeds are relative to (default: the "
                                                       "first)")
    data: _labelled(DataSettingKeys) = Field(
        {}, description="label -> data setting; at least one")
    grid: Grid = Field(default_factory=lambda: [GridKeys()],
                       description="a mapping of axes, or a list of them (default: every method x every data setting "
                                   "x seed 1)")
    evaluation: EvaluationKeys = Field(default_factory=EvaluationKeys)
    analyses: AnalysesKeys = Field(default_factory=AnalysesKeys, description="the analyses each run makes, each "
                                                                             "with its options")
    tensorboard: bool = Field(False, description="each run's curves for TensorBoard")


# The analyses and their options' defaults (a set None: the first evaluation set; sets: every one)
ANALYSES = {name: analysis_keys(name)().model_dump() for name in AnalysesKeys.model_fields}


def _null_merged(node):
    """`node` with every "X or null" (pydantic's anyOf [X, {type: null}]) written as X taking
    null too: a validator's message then names the value and what it must be, not "is not
    valid under any of the given schemas"."""
    if isinstance(node, list):
        return [_null_merged(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _null_merged(value) for key, value in node.items()}
    if OPTIONS_PLACEHOLDER in node:
        node["$ref"] = f"#/$defs/{node.pop(OPTIONS_PLACEHOLDER)}"
    choices = node.get("anyOf", [])
    if len(choices) == 2 and {"type": "null"} in choices:
        (other,) = [choice for choice in choices if choice != {"type": "null"}]
        if "type" in other:
            del node["anyOf"]
            kinds = other["type"] if isinstance(other["type"], list) else [other["type"]]
            node = {**other, **node, "type": [*kinds, "null"]}
        elif "$ref" in other and set(other) == {"$ref"}:  # a Keys mapping, which takes null itself
            del node["anyOf"]
            node = {**other, **node}
    return node


def json_schema():
    """The experiment file's JSON Schema, for editors (recipes/experiments/schema.json)."""
    from onmt_posenc.experiments.file.option_schema import training_options_schema, translation_options_schema

    schema = _null_merged(ExperimentKeys.model_json_schema())
    schema["$defs"].update({TRAINING_OPTIONS: training_options_schema(),
                            TRANSLATION_OPTIONS: translation_options_schema()})
    # the file itself is a mapping (Keys lets a key's mapping be empty)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema, "type": "object",
            "title": "onmt-posenc experiment file"}


def add_arguments(parser):
    """`onmt-posenc schema` takes no arguments."""


def main(args):
    print(json.dumps(json_schema(), indent=2, ensure_ascii=False))
    return 0
