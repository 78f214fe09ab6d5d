"""CTranslate2 export (`onmt_release_model --format ctranslate2`) of APE, SHAPE,
per-side encodings, randomized positions, CAPE, Shaw RPE, rotary positions, T5's
bias and the word embeddings' own scale (`word_embedding_scale`), checked against
`onmt_translate` on 300 real sentences, greedy and beam 4, and token by token against
OpenNMT-py's scores of the reference translations.

Data: small_parallel_enja (En->Ja), the 2,000 training pairs in tests/data. Its
short sentences make 300-sentence decoding fast, and a 150-step 2-layer d=64 model
already translates them with varied output; on toy-ende's word-level vocabulary a
model of that size emits only <unk>.

Decoding settings are the same on both sides: no length normalization
(`-length_penalty none` / `length_penalty=0`), at most 250 tokens, no length
ratio cap, no minimum length. The two tools' default length penalties differ
(OpenNMT-py's 'avg' vs CTranslate2's 1.0 with its own stopping rule), so with
defaults their beam outputs differ for reasons unrelated to the export.
"""
import json
import sys
from concurrent.futures import ThreadPoolExecutor

import onmt  # noqa: F401  (activates the extension in this process too)
import pytest
import torch
from conftest import REPO, TEST_DATA, command, head, run, write_yaml
from ctranslate2.converters import OpenNMTPyConverter
from onmt.bin.translate import _get_parser, translate
from onmt.modules.embeddings import PositionalEncoding

from onmt_posenc.model import export
from onmt_posenc.analysis import models, token_nll

ENJA = TEST_DATA / "small_parallel_enja"
SENTENCES = 300
SHAPE_K = 20
MAX_LENGTH = 250
# Two engines sum float32 log-probabilities in different orders; hypotheses whose
# scores are this close are a tie that either engine may break its own way.
TIE = 1e-4

TRAINED = {
    "ape": {"position_encoding": True},
    "shape": {"shape_max_shift": SHAPE_K, "shape_inference_offset": SHAPE_K},
    "per_side": {"src_position_encoding": "sinusoidal", "tgt_position_encoding": "none"},
    # One model for the two, to save a training: randomized positions in the encoder
    # (L = 64 >= the longest training sequence, 16 tokens), CAPE in the decoder.
    "randomized_cape": {"src_position_encoding": "randomized", "tgt_position_encoding": "cape",
                        "randomized_max_position": 64, "randomized_eval_length": 31},
    "shaw_shared": {"max_relative_positions": 16},
    "shaw_separate": {"max_relative_positions": 16, "relative_values": "separate"},
    # the key term only (the perSPE paper's RPE): a value table of zeros in CTranslate2
    "shaw_keys": {"max_relative_positions": 16, "relative_values": "none"},
    # OpenNMT-py's defaults: rotary_interleave off (a store_true flag), theta 10000, the whole head.
    "rotary": {"max_relative_positions": -1},
    # T5's own settings: 32 buckets, max distance 128.
    "t5": {"relative_positions_buckets": 32, "max_relative_positions": 128},
    # The word embeddings' own options: N(0, d^-1/2), multiplied by 1 beside APE's sinusoid,
    # and by sqrt(d) on the sides of a Shaw model (no absolute positions there)
    "ape_unscaled": {"position_encoding": True, "word_embedding_init": "normal", "word_embedding_scale": "none"},
    "shaw_scaled": {"max_relative_positions": 16, "word_embedding_init": "normal", "word_embedding_scale": "sqrt_d"},
}  # fmt: skip
# Only their export is tried (it must be refused), so one step is enough.
REFUSED = {
    "music": {"max_relative_positions": 16, "relative_attention": "music"},
    "shaw_with_ape": {"max_relative_positions": 16, "src_position_encoding": "sinusoidal"},
    "alibi": {"max_relative_positions": -2},
    "decay": {"relative_attention": "decay"},
    "kerple": {"relative_attention": "kerple"},
    "fire": {"relative_attention": "fire"},
    "shaw_encoder_only": {"max_relative_positions": 16, "relative_positions_side": "encoder"},
}
# The trained rotary model with OpenNMT-py's other rotary options (its weights
# were trained for the default ones): checked by their scores only.
ROTARY_OPTIONS = {
    "rotary_interleaved_theta_1000": {"rotary_interleave": True, "rotary_theta": 1000},
    # 8 of the 16 dimensions of a head; OpenNMT-py's interleaved rotation needs them all.
    "rotary_dim_8": {"rotary_dim": 8},
}
# What is exported and compared: the SHAPE model once as trained (the released
# code's inference offset K) and once with the paper's offset 0.
VARIANTS = ["ape", "shape_offset_0", f"shape_offset_{SHAPE_K}", "per_side", "randomized_cape", "shaw_shared",
            "shaw_separate", "shaw_keys", "rotary", "t5", "shaw_scaled"]  # fmt: skip
# Compared by their scores only: APE at scale 1 (its embeddings at a sixth of the sinusoid's
# RMS) repeats a few sentences after 150 updates, too few outputs to compare translations.
SCORED = VARIANTS + ["ape_unscaled"] + list(ROTARY_OPTIONS)
# Largest difference of a token's log-probability between the engines: float32
# sums in different orders stay below 1e-5 here, each wrong T5 computation tried
# below moves them by 0.3 and more.
SCORE_GAP = 1e-4


def config(workdir, name, steps, extra):
    return write_yaml(
        workdir / f"{name}.yaml",
        {
            "data": {"corpus_1": {"path_src": str(ENJA / "train.en"), "path_tgt": str(ENJA / "train.ja")}},
            "src_vocab": str(workdir / "vocab.en"),
            "tgt_vocab": str(workdir / "vocab.ja"),
            "src_vocab_size": 3000,
            "tgt_vocab_size": 3000,
            "save_model": str(workdir / name),
            "save_checkpoint_steps": steps,
            "train_steps": steps,
            "valid_steps": 100000,
            "seed": 1,
            "encoder_type": "transformer",
            "decoder_type": "transformer",
            "layers": 2,
            "heads": 4,
            "hidden_size": 64,
            "word_vec_size": 64,
            "transformer_ff": 128,
            "dropout": [0.0],
            "batch_type": "tokens",
            # half the tokens of 2,048-token batches, half the fixture's training time; the
            # models still say different things (the >= 50 distinct outputs checked below)
            "batch_size": 1024,
            "bucket_size": 1024,
            "num_workers": 0,
            # A constant rate this high gets a model this small to varied output
            # in 150 steps.
            "optim": "adam",
            "learning_rate": 0.004,
            "adam_beta2": 0.98,
            "label_smoothing": 0.1,
            "param_init_glorot": True,
            "param_init": 0.0,
            "report_every": 50,
            **extra,
        },
    )


def run_two_at_a_time(commands):
    """Run the commands as a user would, two at once (CI has two cores); fail on the first
    error, showing its output."""
    with ThreadPoolExecutor(2) as pool:
        jobs = [pool.submit(run, args) for args in commands]
        try:
            for job in jobs:
                job.result()
        finally:  # after a failure, the commands not started yet are not
            for job in jobs:
                job.cancel()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("ct2")


@pytest.fixture(scope="module")
def checkpoints(workdir):
    """Every trained checkpoint by name; the SHAPE model under both offsets, the
    rotary model under each of ROTARY_OPTIONS."""
    vocab = config(workdir, "vocab", 1, {"save_data": str(workdir / "samples"), "overwrite": True})
    run([command("onmt_build_vocab"), "-config", vocab, "-n_sample", "-1"])
    jobs = {name: (150, extra) for name, extra in TRAINED.items()}
    jobs.update({name: (1, extra) for name, extra in REFUSED.items()})
    run_two_at_a_time([command("onmt_train"), "-config", config(workdir, name, steps, extra)]
                      for name, (steps, extra) in jobs.items())
    paths = {name: workdir / f"{name}_step_{steps}.pt" for name, (steps, _) in jobs.items()}
    # The inference offset is used only in evaluation mode, so this checkpoint is
    # the one training with shape_inference_offset 0 would have saved.
    paths[f"shape_offset_{SHAPE_K}"] = paths.pop("shape")
    checkpoint = torch.load(paths[f"shape_offset_{SHAPE_K}"])
    checkpoint["opt"].shape_inference_offset = 0
    paths["shape_offset_0"] = workdir / "shape_offset_0.pt"
    torch.save(checkpoint, paths["shape_offset_0"])
    # Rotation options are not parameters: the rotary checkpoint loads under any of them.
    for name, options in ROTARY_OPTIONS.items():
        checkpoint = torch.load(paths["rotary"])
        vars(checkpoint["opt"]).update(options)
        paths[name] = workdir / f"{name}.pt"
        torch.save(checkpoint, paths[name])
    return paths


@pytest.fixture(scope="module")
def exported(workdir, checkpoints):
    """Each variant released with the stock command, as a user would."""
    dirs = {name: workdir / f"ct2_{name}" for name in SCORED}
    run_two_at_a_time([command("onmt_release_model"), "--model", checkpoints[name], "--output", dirs[name],
                       "--format", "ctranslate2"] for name in SCORED)
    return dirs


@pytest.fixture(scope="module")
def sources(workdir):
    return head(ENJA / "test.en", workdir / "test.en", SENTENCES)


@pytest.fixture(scope="module")
def onmt_translations(workdir, checkpoints, sources):
    """onmt_translate's output per (variant, beam), computed once. It runs in this
    process (the function the onmt_translate command calls) to save start-ups."""
    done = {}

    def translations(name, beam):
        if (name, beam) not in done:
            output = workdir / f"{name}.beam{beam}.onmt"
            translate(_get_parser().parse_args([
                "-model", str(checkpoints[name]), "-src", str(sources), "-output", str(output),
                "-beam_size", str(beam), "-length_penalty", "none",
                "-max_length", str(MAX_LENGTH), "-max_length_ratio", "0",
            ]))  # fmt: skip
            done[name, beam] = [line.split() for line in output.read_text(encoding="utf-8").splitlines()]
        return done[name, beam]

    return translations


def ct2_translate(model_dir, sources, beam):
    translator = export.open_translator(model_dir, intra_threads=1)
    source = [line.split() for line in sources.read_text(encoding="utf-8").splitlines()]
    results = translator.translate_batch(
        source, beam_size=beam, length_penalty=0, max_decoding_length=MAX_LENGTH, min_decoding_length=0
    )
    return translator, source, [result.hypotheses[0] for result in results]


def score_gap(translator, source, ours, theirs, beam):
    """How far apart two different outputs score under the exported model: the
    whole sequences for beam search; for greedy search the two tokens at the
    first position where they part (the same prefix before it)."""
    a, b = translator.score_batch([source, source], [ours, theirs])
    if beam > 1:
        return abs(sum(a.log_probs) - sum(b.log_probs))
    first = next(i for i, (x, y) in enumerate(zip(ours + ["</s>"], theirs + ["</s>"])) if x != y)
    return abs(a.log_probs[first] - b.log_probs[first])


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("name", VARIANTS)
def test_ctranslate2_translates_as_onmt_translate(name, beam, exported, sources, onmt_translations, capsys):
    reference = onmt_translations(name, beam)
    translator, source, ours = ct2_translate(exported[name], sources, beam)
    assert len(ours) == len(reference) == SENTENCES
    # A model this small still has to say different things, or equality proves little.
    assert len({tuple(t) for t in reference}) >= 50
    differing = [i for i in range(SENTENCES) if ours[i] != reference[i]]
    gaps = {i: score_gap(translator, source[i], ours[i], reference[i], beam) for i in differing}
    not_ties = {i: gap for i, gap in gaps.items() if gap > TIE}
    with capsys.disabled():
        print(f"\n{name} beam {beam}: {SENTENCES - len(differing)}/{SENTENCES} identical, "
              f"{len(differing) - len(not_ties)} tied, {len(not_ties)} other")  # fmt: skip
    assert not not_ties, {i: (gap, " ".join(ours[i]), " ".join(reference[i])) for i, gap in not_ties.items()}


@pytest.fixture(scope="module")
def gold_pairs():
    """(sources, references) as token lists: the 300 test pairs, then 12 pairs of
    fifteen joined test pairs each (references of 153 to 183 tokens: distances
    past T5's max distance 128)."""
    sources = models.read_token_lines(ENJA / "test.en", SENTENCES)
    references = models.read_token_lines(ENJA / "test.ja", SENTENCES)
    for first in range(0, 180, 15):
        sources.append(sum(sources[first : first + 15], []))
        references.append(sum(references[first : first + 15], []))
    return sources, references


def onmt_log_probs(loaded, pairs):
    """OpenNMT-py's log-probability of each reference token and of the end of
    sentence, by teacher forcing (the terms of onmt_translate's GOLD SCORE)."""
    return [[-nll for nll in sentence] for sentence in token_nll.token_nlls(loaded, *pairs)]


def ct2_log_probs(model_dir, pairs):
    """The same, by CTranslate2's score_batch."""
    return [result.log_probs for result in export.open_translator(model_dir, intra_threads=1).score_batch(*pairs)]


def largest_gap(ours, theirs):
    assert [len(sentence) for sentence in ours] == [len(sentence) for sentence in theirs]
    return max(abs(a - b) for x, y in zip(ours, theirs) for a, b in zip(x, y))


@pytest.mark.parametrize("name", SCORED)
def test_ctranslate2_scores_as_onmt(name, checkpoints, exported, gold_pairs, capsys):
    """Token by token, the whole computation: each engine's log-probability of
    every reference token, at every position of references up to 183 tokens."""
    gap = largest_gap(onmt_log_probs(models.load_model(checkpoints[name]), gold_pairs),
                      ct2_log_probs(exported[name], gold_pairs))  # fmt: skip
    with capsys.disabled():
        print(f"\n{name}: largest log-probability gap {gap:.1e}")
    assert gap < SCORE_GAP


def t5_attentions(stack):
    """The self-attention modules of a stack, each with its own T5 table."""
    return [module for module in stack.modules() if getattr(module, "relative_attention_bias", None) is not None]


def bias_before_scaling(model):
    """(q.k + b) / sqrt(d) is q.k / sqrt(d) with the tables divided by sqrt(d)."""
    for attention in t5_attentions(model):
        attention.relative_attention_bias.weight.data /= attention.dim_per_head**0.5


def directions_swapped(model):
    """Causal buckets in the encoder, bidirectional ones in the decoder."""
    for attention in t5_attentions(model):
        attention.is_decoder = not attention.is_decoder


def first_table_in_every_layer(model):
    """What CTranslate2 4.8.1 computes (it shares a stack's first table, as T5)."""
    for stack in (model.encoder, model.decoder):
        first, *others = t5_attentions(stack)
        for attention in others:
            attention.relative_attention_bias.weight.data.copy_(first.relative_attention_bias.weight)


@pytest.mark.parametrize("other_computation", [bias_before_scaling, directions_swapped, first_table_in_every_layer])
def test_t5_bias_computed_where_onmt_computes_it(other_computation, checkpoints, exported, gold_pairs, capsys):
    """The T5 score parity above could not pass with the bias added before the
    1/sqrt(d) scaling, with the bidirectional side swapped, or with one table
    per stack: each moves OpenNMT-py's scores far from CTranslate2's."""
    loaded = models.load_model(checkpoints["t5"])
    other_computation(loaded.model)
    gap = largest_gap(onmt_log_probs(loaded, gold_pairs), ct2_log_probs(exported["t5"], gold_pairs))
    with capsys.disabled():
        print(f"\nt5, OpenNMT-py with {other_computation.__name__}: largest log-probability gap {gap:.2f}")
    assert gap > 1000 * SCORE_GAP


def test_shape_offset_changes_translations(onmt_translations):
    """The offset must matter, or the SHAPE parity above could not catch an export
    that ignores it."""
    zero, k = onmt_translations("shape_offset_0", 1), onmt_translations(f"shape_offset_{SHAPE_K}", 1)
    assert sum(a != b for a, b in zip(zero, k)) >= 10


@pytest.mark.parametrize(
    "name, side, first_row",
    [
        ("ape", "src", 0),
        ("ape", "tgt", 0),
        (f"shape_offset_{SHAPE_K}", "src", SHAPE_K),
        (f"shape_offset_{SHAPE_K}", "tgt", SHAPE_K),
        ("shape_offset_0", "tgt", 0),
        ("per_side", "src", 0),
        ("per_side", "tgt", None),
        ("randomized_cape", "src", "spread"),
        ("randomized_cape", "tgt", 0),
        ("shaw_shared", "src", None),
        ("rotary", "tgt", None),
        ("t5", "src", None),
    ],
)
def test_exported_position_term_is_onmt_sinusoid_from_the_offset(checkpoints, name, side, first_row):
    """What the export writes for a side against OpenNMT-py's own sinusoid table
    (5000 rows, K more for SHAPE): the rows from the inference offset on, with
    OpenNMT-py's scale sqrt(d) = 8; randomized positions' evaluation rows
    ("spread"); or, for a side without absolute positions
    (None), a table of zeros as long as OpenNMT-py's and no scale (1), as
    OpenNMT-py embeds a side without a position module."""
    checkpoint = torch.load(checkpoints[name])
    term = export.position_term(export.model_options(checkpoint["opt"]), checkpoint["model"], side)
    if first_row is None:
        expected = torch.zeros(5000, 64)
    elif first_row == "spread":  # randomized positions, L = 64, M = 31: token i at round((i+1) 65/32) - 1
        rows = [(2 * k * 65 + 32) // 64 - 1 for k in range(1, 5001)]  # as many tokens as APE, past its table
        expected = PositionalEncoding(64, "SinusoidalInterleaved", max_len=rows[-1] + 1).pe[rows, 0]
    else:
        rows = 5000 + (SHAPE_K if name.startswith("shape") else 0)
        expected = PositionalEncoding(64, "SinusoidalInterleaved", max_len=rows).pe[first_row:, 0]
    assert torch.equal(term.table, expected)
    assert term.scale == (1.0 if first_row is None else 8.0)


@pytest.mark.parametrize("name, scale, positions", [("ape_unscaled", 1.0, True), ("shaw_scaled", 8.0, False)])
@pytest.mark.parametrize("side", ["src", "tgt"])
def test_exported_scale_is_word_embedding_scale(checkpoints, name, scale, positions, side):
    """word_embedding_scale is the side's exported scale, where OpenNMT-py's rule gives the
    other (8 beside APE's sinusoid, 1 without positions); the table stays the side's."""
    checkpoint = torch.load(checkpoints[name])
    term = export.position_term(export.model_options(checkpoint["opt"]), checkpoint["model"], side)
    assert term.scale == scale
    expected = PositionalEncoding(64, "SinusoidalInterleaved").pe[:, 0] if positions else torch.zeros(5000, 64)
    assert torch.equal(term.table, expected)


@pytest.mark.parametrize(
    "name, reason",
    [
        ("music", "relative_attention music: its relative logits use a distance embedding per layer and head"),
        ("shaw_with_ape", "src_position_encoding sinusoidal with max_relative_positions 16: a CTranslate2 stack"),
        ("alibi", "max_relative_positions -2 (ALiBi) in an encoder-decoder model: OpenNMT-py adds"),
        ("decay", "relative_attention decay: the decaying mask multiplies the attention weights by a ramp"),
        ("kerple", "relative_attention kerple: its bias -r1 log(1 + r2 |i - j|) is learned per head"),
        ("fire", "relative_attention fire: its bias is an MLP of each (query, key) pair's positions"),
        ("shaw_encoder_only", "relative_positions_side encoder: CTranslate2's OpenNMT-py converter builds"),
    ],
)
def test_release_refuses_what_ctranslate2_cannot_run(workdir, checkpoints, name, reason):
    output = workdir / f"ct2_{name}"
    result = run(
        [command("onmt_release_model"), "--model", checkpoints[name], "--output", output, "--format", "ctranslate2"],
        expect_ok=False,
    )
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1].startswith(f"onmt_release_model: error: {reason}")
    assert "Traceback" not in result.stderr
    assert not (output / "model.bin").exists()


def test_t5_needs_ctranslate2_with_a_table_per_layer(checkpoints, exported, monkeypatch):
    """Exported with CTranslate2 4.8.1, or run by it, the T5 model would compute
    `first_table_in_every_layer` (above): both are refused."""
    import ctranslate2

    assert export.read_metadata(exported["t5"])["minimum_ctranslate2"] == "4.8.5"
    monkeypatch.setattr(ctranslate2, "__version__", "4.8.1")
    with pytest.raises(export.NotExportableError, match="before 4.8.5 it adds the first layer's bias table"):
        export.check_exportable(export.model_options(torch.load(checkpoints["t5"])["opt"]))
    with pytest.raises(export.CTranslate2TooOldError, match="this is CTranslate2 4.8.1"):
        export.open_translator(exported["t5"])


def test_converter_api_exports_separate_tables(workdir, checkpoints, exported, sources):
    """CTranslate2's Python converter, in a process where onmt is imported."""
    output = workdir / "api_shaw_separate"
    OpenNMTPyConverter(str(checkpoints["shaw_separate"])).convert(str(output), force=True)
    assert ct2_translate(output, sources, 1)[2] == ct2_translate(exported["shaw_separate"], sources, 1)[2]


def test_exported_layer_norm_epsilon_is_onmt(exported):
    """CTranslate2 reads a missing epsilon as 1e-5; OpenNMT-py's layer norms use 1e-6."""
    for name in VARIANTS:
        config = json.loads((exported[name] / "config.json").read_text(encoding="utf-8"))
        assert config["layer_norm_epsilon"] == pytest.approx(1e-6), name


def test_flash_attention_refused_for_relative_positions(exported):
    """Refused for Shaw and T5, which CTranslate2's flash attention drops; not for
    rotary positions, which it applies."""
    assert "flash_attention" in export.read_metadata(exported["shaw_separate"])
    assert "flash_attention" in export.read_metadata(exported["t5"])
    assert "flash_attention" not in export.read_metadata(exported["rotary"])
    assert export.read_metadata(exported[f"shape_offset_{SHAPE_K}"]) == {
        "src_position_encoding": "shape",
        "tgt_position_encoding": "shape",
        "shape_inference_offset": SHAPE_K,
    }
    with pytest.raises(export.FlashAttentionRefusedError, match="drops relative positions"):
        export.open_translator(exported["shaw_shared"], flash_attention=True)


def test_flash_attention_tripwire_stops_a_decoder_that_reads_it(workdir, checkpoints, sources, monkeypatch):
    """The flash-attention decoder (CUDA only, not testable here) reads the position
    table that a relative decoder ignores. An APE decoder reads it too: given the
    one-row tripwire table, it must stop with an error instead of translating."""
    from ctranslate2.converters import opennmt_py

    build_spec = opennmt_py._get_model_spec_seq2seq

    def with_tripwire(*args, **kwargs):
        spec = build_spec(*args, **kwargs)
        export.flash_attention_tripwire(spec.decoder, 64)
        return spec

    monkeypatch.setattr(opennmt_py, "_get_model_spec_seq2seq", with_tripwire)
    output = workdir / "ape_with_tripwire"
    OpenNMTPyConverter(str(checkpoints["ape"])).convert(str(output), force=True)
    with pytest.raises(RuntimeError, match="No position encodings are defined for positions >= 1"):
        ct2_translate(output, sources, 1)


def test_benchmark_script_prints_speeds(checkpoints, sources):
    result = run([
        sys.executable, REPO / "tools" / "benchmark_ctranslate2.py", "--model", checkpoints["ape"],
        checkpoints["shaw_separate"], "--src", sources, "--sentences", "30", "--repeats", "1",
    ])  # fmt: skip
    rows = [line for line in result.stdout.splitlines() if line.startswith("| ape_step") or line.startswith("| shaw")]
    assert len(rows) == 2
    for row in rows:
        onmt_speed, ct2_speed, _, identical = row.split("|")[3:7]
        assert float(onmt_speed) > 0 and float(ct2_speed) > 0
        assert identical.strip() == "30/30"
