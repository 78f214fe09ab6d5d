"""An experiment file: the grid of OpenNMT-py runs that compare position
methods, their data, and how they are evaluated. `onmt-posenc run` executes it.

    name: demo                       # default: the file's name
    output: runs/demo                # default: runs/<name>, relative to the current directory
    recipe: ../base.yaml             # OpenNMT-py config every run starts from (relative to this file)
    settings: {train_steps: 2000}    # OpenNMT-py keys for every run, over the recipe
    methods:                         # position methods: label -> OpenNMT-py keys
      ape: {}
      shape: {shape_max_shift: 40}
      rpe: {position_encoding: false, max_relative_positions: 16}
    baseline: ape                    # gains and speeds are relative to it (default: the first method)
    data:                            # data settings: label -> files (relative to this file)
      vanilla:
        train: {src: train.en, tgt: train.de}
        valid: {src: dev.en, tgt: dev.de, lines: 500}     # onmt_train's validation set
        eval:                                            # sets translated and scored
          valid: {src: dev.en, tgt: dev.de, lines: 500}  # lines: the first N lines only
          test: {src: test.bpe.en, tgt: test.bpe.de, ref: test.de}  # ref: raw text for BLEU
          concat: {src: test.en, tgt: test.de, join: 2}  # join: N sentences per line, with <sep>
          long: {src: test.en, tgt: test.de, join: 3, joint: space}  # 3 per line, a plain space between
        settings: {}                 # OpenNMT-py keys of this data setting
      extrapolate:
        folder: ../../data/multi30k  # the files of `--data FOLDER` (see folder_data)
        extrapolate: 50              # EXTRAPOLATE: training pairs longer than 50 tokens on either side dropped
        joined_sets: [2, 3]          # every set that joins nothing also joined 2 and 3 per line with a plain
                                     # space: valid-join2, test-join2, valid-join3, test-join3 (long inputs)
      interpolate:
        folder: ../../data/multi30k
        interpolate: 10              # INTERPOLATE: 10 adjacent pairs joined with <sep>, in training,
                                     # validation and every evaluation set
        single_pairs: 10             # also train on the single pairs, 10 per joined example
                                     # (a second corpus of the same files; see opennmt_config.corpora)
      interpolate-warm:
        folder: ../../data/multi30k
        interpolate: 10
        warm_start: vanilla          # each run starts from the model of its method, K and seed
                                     # in data setting vanilla (see warm_start_source)
      synthetic:
        synthetic: {seed: 1}         # generated offline (onmt_posenc.data.synthetic), nothing else needed
    grid:                            # the runs are the product of these axes
      method: [ape, shape, rpe]      # default: every method
      data: [toy-ende]               # default: every data setting
      seed: [1, 2, 3]                # default: [1]
      K: [10, 40]                    # optional: SHAPE's K (shape_max_shift), for SHAPE methods only
    # or a list of such products, run in order (a design that is no single product):
    #   grid:
    #     - {data: [vanilla], method: [ape], seed: [1, 2, 3]}
    #     - {data: [vanilla], method: [shape], K: [10, 40, 100], seed: [1]}
    evaluation:
      sets: [valid, test]            # the BLEU table's columns (default: every eval set)
      average_last: 10               # checkpoints averaged before translating (default: all saved)
      translate: {beam_size: 4}      # onmt_translate keys
    tensorboard: true                # each run's curves for TensorBoard in <run>/tensorboard/
    analyses:                        # each key present runs that analysis; options inside
      length_buckets: {sets: [test], width: 10}
      shift_invariance: {set: valid, offsets: [0, 100, 250, 500], sentences: 200}
      swapped: {set: concat, train_examples: 1000}   # and on 1,000 joined training examples (0: none)
      token_nll: {set: test}
      position_ablation: {set: valid, sentences: 200}

Each run's OpenNMT-py config is, later keys winning: the recipe, `settings`,
the data setting's `settings`, the method's keys, K, the seed, and what the
runner owns: the corpora with the data setting's transforms (EXTRAPOLATE:
`filtertoolong` on the training corpus only; INTERPOLATE: `concat_pairs` on the
training and validation corpora), their options, vocabularies and save_model.
An experiment key the runner would override, or a recipe corpus whose
transforms it would drop, is an error naming the key and the file.

Relative training speed is measured in every run (see curves.training_speed);
there is no speed analysis to ask for.

`--data FOLDER` runs the same experiment on a folder of real files: every data
setting takes its files from the folder (see `folder_data`) and keeps its
EXTRAPOLATE/INTERPOLATE choice and settings.
"""
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from onmt_posenc.core.errors import UserError
from onmt_posenc.core.joining import DEFAULT_SEP
from onmt_posenc.data.synthetic import SyntheticTask

# The option the grid's K axis sets (SHAPE's K)
K_OPTION = "shape_max_shift"
# `--data FOLDER`: OpenNMT-py's quickstart layout, as in its toy-ende data.
FOLDER_FILES = ("src-train.txt", "tgt-train.txt", "src-val.txt", "tgt-val.txt", "src-test.txt", "tgt-test.txt")
# The draw of `train_sample`: the same pairs for every run and every machine.
SAMPLE_SEED = 1
# Evaluation sets cut to their first lines, to keep translation affordable on a CPU.
FOLDER_VALID_LINES, FOLDER_TEST_LINES = 500, 1000
# Keys the runner sets in every run's config; an experiment cannot set them.
RUNNER_KEYS = ("data", "save_data", "src_vocab", "tgt_vocab", "save_model", "log_file", "overwrite", "train_from",
               "dump_samples", "tensorboard", "tensorboard_log_dir")
# onmt_translate options the runner gives on its command line, over evaluation.translate.
RUNNER_TRANSLATE_KEYS = ("model", "src", "output")
# Keys each data setting's transforms own (see data_setting_keys).
EXTRAPOLATE_KEYS = ("src_seq_length", "tgt_seq_length")
INTERPOLATE_KEYS = ("concat_n", "concat_sep")
JOIN_TRAINING_KEYS = ("join_adjacent_max",)
# Transforms that the runner puts on the right corpora; in a global `transforms`
# they would reach the validation corpus too.
SETTING_TRANSFORMS = {"filtertoolong": "extrapolate", "concat_pairs": "interpolate", "join_adjacent": "join_training"}


class ExperimentError(UserError, ValueError):
    pass


@dataclass(frozen=True)
class FilePair:
    src: Path
    tgt: Path  # as the model reads it (tokenized like the training targets)
    ref: Path = None  # the reference BLEU is computed against, if not tgt (e.g. untokenized)
    lines: int = None  # only the first `lines` lines
    join: int = None  # INTERPOLATE: `join` consecutive lines per example
    docids: Path = None  # one document id per line: joined lines never cross a document
    joint: str = "sep"  # what joins them: "sep" (the separator token <sep>) or "space" (a plain space)
    sample: int = None  # only `sample` lines drawn at random (SAMPLE_SEED), kept in file order

    @property
    def separator(self):
        """The token between joined sentences; None: a plain space (joining.join_lines)."""
        return DEFAULT_SEP if self.joint == "sep" else None


@dataclass(frozen=True)
class DataSetting:
    label: str
    train: FilePair = None
    valid: FilePair = None
    eval_sets: dict = field(default_factory=dict)  # name -> FilePair
    settings: dict = field(default_factory=dict)
    synthetic: SyntheticTask = None  # generated: train, valid and eval sets come from it
    extrapolate: int = None  # EXTRAPOLATE: the longest training pair kept, in tokens per side
    interpolate: int = None  # INTERPOLATE: sentences joined per example
    single_pairs: int = None  # INTERPOLATE: single training pairs mixed in per joined example
    join_training: int = None  # each training example joins 1 to N adjacent pairs with a plain space
    warm_start: str = None  # the data setting whose run of the same method, K and seed each run starts from
    target_language: str = None  # chooses the BLEU tokenizer (scoring.bleu_tokenizer); None: from the text

    @property
    def kind(self):
        """The SHAPE paper's name of this data setting."""
        return "EXTRAPOLATE" if self.extrapolate else "INTERPOLATE" if self.interpolate else "VANILLA"

    @property
    def design(self):
        """Its kind and options: 'INTERPOLATE (interpolate: 10, warm_start: vanilla)'."""
        options = {key: getattr(self, key) for key in (*COUNT_KEYS, "warm_start") if getattr(self, key)}
        return self.kind + (f" ({', '.join(f'{key}: {value}' for key, value in options.items())})" if options else "")


# A data setting's keys that make it EXTRAPOLATE or INTERPOLATE, or join its training pairs, each a
# count (see DataSetting)
COUNT_KEYS = ("extrapolate", "interpolate", "single_pairs", "join_training")


def data_setting_keys(setting):
    """The OpenNMT-py options of a data setting's transforms (see opennmt_config.corpora)."""
    keys = {}
    if setting.extrapolate:
        # filtertoolong drops a target longer than tgt_seq_length - 2 (room for <s> and </s>)
        keys.update(src_seq_length=setting.extrapolate, tgt_seq_length=setting.extrapolate + 2)
    if setting.interpolate:
        keys.update(concat_n=setting.interpolate, concat_sep=DEFAULT_SEP)
    if setting.join_training:
        keys.update(join_adjacent_max=setting.join_training)
    return keys


@dataclass(frozen=True)
class Run:
    data: str
    method: str
    shift: int  # K of the K axis, None where it does not apply
    seed: int
    config: dict  # OpenNMT-py keys, without the runner's paths
    sources: dict = field(default_factory=dict, compare=False)  # key -> where in the file it was set

    @property
    def label(self):
        """The method as tables show it: 'shape-K40' where the grid varies K."""
        return self.method if self.shift is None else f"{self.method}-K{self.shift}"

    @property
    def id(self):
        return f"{self.data}/{self.label}/seed{self.seed}"


@dataclass(frozen=True)
class Variant:
    """An evaluation variant (evaluation.variants): the runs of `methods` also translated with
    `translate` over the evaluation's onmt_translate options, scored as <label>+<name>."""
    methods: tuple  # labels under methods
    translate: dict  # onmt_translate keys over evaluation.translate


# What joins a run's label and a variant's name where the report shows the variant: rotary+ntk
VARIANT_JOINT = "+"


@dataclass
class Experiment:
    path: Path
    name: str
    output: Path
    baseline: str
    data: dict  # label -> DataSetting
    runs: list
    eval_sets: list  # the BLEU table's columns
    average_last: int
    translate: dict
    analyses: dict  # name -> options (defaults filled in)
    # one run of each method and data setting no grid line uses: never run, but check_options checks their keys
    unused: list = field(default_factory=list)
    tensorboard: bool = False  # each run logs its curves for TensorBoard in <run>/tensorboard/
    # (a run's config layer as Run.sources names it, a key) -> 'FILE:LINE' of the key
    # (validation.key_place); None: the file alone
    locate: object = None
    variants: dict = field(default_factory=dict)  # name -> Variant (evaluation.variants)

    def fail_at(self, source, key, message):
        """An ExperimentError about `key` of a run's config layer `source` (Run.sources), at the
        key's line: `FILE:LINE: source.key: message`."""
        raise ExperimentError(f"{self.locate(source, key) if self.locate else self.path}: {source}.{key}: {message}")

    @property
    def translated_sets(self):
        """The evaluation sets each run translates: the BLEU table's and those whose translations
        the analyses read (length buckets; the swapped evaluation's original order)."""
        named = [*self.analyses.get("length_buckets", {}).get("sets", []),
                 *([self.analyses["swapped"]["set"]] if "swapped" in self.analyses else [])]
        return list(dict.fromkeys([*self.eval_sets, *named]))

    def variants_of(self, run):
        """{name: Variant} of the evaluation variants that apply to `run` (its method's)."""
        return {name: variant for name, variant in self.variants.items() if run.method in variant.methods}

    def warm_start_source(self, run):
        """The run `run` starts from (its data setting's warm_start), or None."""
        return warm_start_source(self.data, self.runs[:self.runs.index(run)], run, self.path)


def fail(path, message):
    raise ExperimentError(f"{path}: {message}")


def source_loc(source):
    """The keys from the top of the experiment file to a run's config layer, as Run.sources names
    it ('settings', 'methods.LABEL', 'data.LABEL.settings', 'grid.K', 'grid[1].seed'), or
    'evaluation.translate', 'evaluation.variants.NAME(.translate)'; None for one that the file does not
    hold (the recipe)."""
    if source in ("settings", "evaluation.translate"):
        return source.split(".")
    for pattern, loc in ((r"evaluation\.variants\.(.+)\.translate", lambda m: ["evaluation", "variants", m[1],
                                                                              "translate"]),
                         (r"evaluation\.variants\.(.+)", lambda m: ["evaluation", "variants", m[1]]),
                         (r"methods\.(.+)", lambda m: ["methods", m[1]]),
                         (r"data\.(.+)\.settings", lambda m: ["data", m[1], "settings"]),
                         (r"grid\[(\d+)\]\.(\w+)", lambda m: ["grid", int(m[1]), m[2]]),
                         (r"grid\.(\w+)", lambda m: ["grid", m[1]])):
        match = re.fullmatch(pattern, source)
        if match:
            return loc(match)
    return None


def shown(value):
    """A value as YAML writes it (true, [a, b]), as the user wrote it in the file or in --set."""
    return yaml.safe_dump(value, default_flow_style=True, width=1000).strip().removesuffix("...").strip()


def position_schemes(config):
    """The (encoder, decoder) position scheme classes of a run's config (as
    onmt_posenc.model.positions registers them); None for a name no scheme has (the option
    checks refuse it)."""
    from onmt_posenc.model.positions import POSITION_ENCODINGS, side_schemes

    return tuple(POSITION_ENCODINGS.get(name) for name in side_schemes(config.get))


def takes_translate_options(config, options):
    """Can the model of a run's config take the onmt_translate `options`? An option that a
    self-attention variant declares as its own (its `translate_options`: rotary's rescaling)
    only where the config chooses that variant."""
    from onmt_posenc.model.attention import ATTENTIONS, attention_scheme

    scheme = attention_scheme(config.get("relative_positions_buckets"), config.get("max_relative_positions"),
                              config.get("relative_attention"))
    return all(scheme in owners or not owners
               for owners in ([name for name, variant in ATTENTIONS.items() if option in variant.translate_options]
                              for option in options))


def needs_target_phrases(config):
    """Does a run's config train a decoder on the phrases of its training target (phrase-level
    perSPE), from a phrase file that the runner makes beside it? Its scheme says so."""
    _, target = position_schemes(config)
    return target is not None and target.needs_target_phrases(config.get)


def uses_shape(config):
    """Does a run's method take the grid's K (SHAPE's shape_max_shift): a scheme of it reads it?"""
    return config.get(K_OPTION) is not None or any(K_OPTION in scheme.option_names
                                                   for scheme in position_schemes(config) if scheme is not None)


def warm_start_source(data, earlier, run, path):
    """The run whose model `run` starts from (its data setting's `warm_start`: the same
    method, K and seed there), among the runs `earlier` in the grid; None without
    warm_start. A small corpus joined 10 sentences per example (INTERPOLATE) does not
    train from random weights at the sizes we use (opennmt_config.corpora); from a model trained on
    single sentences it does (Bao et al. 2021, G-Transformer, section 3)."""
    label = data[run.data].warm_start
    if label is None:
        return None
    where = f"data.{run.data}.warm_start"
    if label not in data:
        fail(path, f"{where}: {label!r} is not under data: {sorted(data)}")
    if label == run.data:
        fail(path, f"{where}: a data setting cannot start from its own runs; name one trained from scratch")
    if data[label].warm_start is not None:
        fail(path, f"{where}: data.{label} starts from another setting itself; start from one trained from scratch")
    source = next((other for other in earlier if (other.data, other.method, other.shift, other.seed)
                   == (label, run.method, run.shift, run.seed)), None)
    if source is None:
        fail(path, f"{where}: the run {run.id} starts from {label}/{run.label}/seed{run.seed}, which no grid "
                    "line makes before it; add that run to an earlier grid line")
    return source


def parse_shard(text):
    """'i/n' (1 <= i <= n) -> (i, n)."""
    try:
        i, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise ExperimentError(f"--shard expects I/N such as 1/4, got {text!r}") from None
    if not 1 <= i <= n:
        raise ExperimentError(f"--shard {text}: need 1 <= I <= N")
    return i, n


def shard(runs, i, n):
    """The runs of shard i of n: every n-th run, starting at the i-th."""
    return runs[i - 1 :: n]
