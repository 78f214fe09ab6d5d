"""CTranslate2 export (`onmt_release_model --format ctranslate2`) of APE, SHAPE,
per-side encodings and Shaw RPE, checked against `onmt_translate` on 300 real
sentences, greedy and beam 4.

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
import os
import subprocess
import sys

import onmt  # noqa: F401  (activates the extension in this process too)
import pytest
import torch
from conftest import REPO, TEST_DATA, command, head, run, write_yaml
from ctranslate2.converters import OpenNMTPyConverter
from onmt.bin.translate import _get_parser, translate
from onmt.modules.embeddings import PositionalEncoding

from onmt_posenc import export

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
    "shaw_shared": {"max_relative_positions": 16},
    "shaw_separate": {"max_relative_positions": 16, "relative_values": "separate"},
}
# Only their export is tried (it must be refused), so one step is enough.
REFUSED = {
    "music": {"max_relative_positions": 16, "relative_attention": "music"},
    "shaw_with_ape": {"max_relative_positions": 16, "src_position_encoding": "sinusoidal"},
}
# What is exported and compared: the SHAPE model once as trained (the released
# code's inference offset K) and once with the paper's offset 0.
VARIANTS = ["ape", "shape_offset_0", f"shape_offset_{SHAPE_K}", "per_side", "shaw_shared", "shaw_separate"]


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
            "batch_size": 2048,
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


def run_two_at_a_time(jobs):
    """Run (command, log file) jobs as a user would, two at once (CI has two
    cores); fail on the first error, showing its log."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    pending, running = list(jobs), []
    try:
        while pending or running:
            while pending and len(running) < 2:
                args, log = pending.pop(0)
                with open(log, "w") as out:
                    process = subprocess.Popen([str(a) for a in args], env=env, stdout=out, stderr=subprocess.STDOUT)
                running.append((args, log, process))
            args, log, process = running[0]
            if process.wait(timeout=600) != 0:
                pytest.fail(f"{args[0]} exited {process.returncode}\n{log.read_text()[-5000:]}")
            running.pop(0)
    finally:  # a failure or a timeout leaves no job behind
        for _, _, process in running:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("ct2")


@pytest.fixture(scope="module")
def checkpoints(workdir):
    """Every trained checkpoint by name; the SHAPE model under both offsets."""
    vocab = config(workdir, "vocab", 1, {"save_data": str(workdir / "samples"), "overwrite": True})
    run([command("onmt_build_vocab"), "-config", vocab, "-n_sample", "-1"])
    jobs = {name: (150, extra) for name, extra in TRAINED.items()}
    jobs.update({name: (1, extra) for name, extra in REFUSED.items()})
    run_two_at_a_time(
        ([command("onmt_train"), "-config", config(workdir, name, steps, extra)], workdir / f"{name}.train.log")
        for name, (steps, extra) in jobs.items()
    )
    paths = {name: workdir / f"{name}_step_{steps}.pt" for name, (steps, _) in jobs.items()}
    # The inference offset is used only in evaluation mode, so this checkpoint is
    # the one training with shape_inference_offset 0 would have saved.
    paths[f"shape_offset_{SHAPE_K}"] = paths.pop("shape")
    checkpoint = torch.load(paths[f"shape_offset_{SHAPE_K}"])
    checkpoint["opt"].shape_inference_offset = 0
    paths["shape_offset_0"] = workdir / "shape_offset_0.pt"
    torch.save(checkpoint, paths["shape_offset_0"])
    return paths


@pytest.fixture(scope="module")
def exported(workdir, checkpoints):
    """Each variant released with the stock command, as a user would."""
    dirs = {name: workdir / f"ct2_{name}" for name in VARIANTS}
    run_two_at_a_time(
        (
            [command("onmt_release_model"), "--model", checkpoints[name], "--output", dirs[name],
             "--format", "ctranslate2"],
            workdir / f"{name}.release.log",
        )
        for name in VARIANTS
    )  # fmt: skip
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
        ("shaw_shared", "src", None),
    ],
)
def test_exported_position_term_is_onmt_sinusoid_from_the_offset(checkpoints, name, side, first_row):
    """What the export writes for a side against OpenNMT-py's own sinusoid table
    (5000 rows, K more for SHAPE): the rows from the inference offset on, with
    OpenNMT-py's scale sqrt(d) = 8; or, for a side without absolute positions
    (None), a table of zeros as long as OpenNMT-py's and no scale (1), as
    OpenNMT-py embeds a side without a position module."""
    checkpoint = torch.load(checkpoints[name])
    term = export.position_term(export.model_options(checkpoint["opt"]), checkpoint["model"], side)
    if first_row is None:
        expected = torch.zeros(5000, 64)
    else:
        rows = 5000 + (SHAPE_K if name.startswith("shape") else 0)
        expected = PositionalEncoding(64, "SinusoidalInterleaved", max_len=rows).pe[first_row:, 0]
    assert torch.equal(term.table, expected)
    assert term.scale == (1.0 if first_row is None else 8.0)


@pytest.mark.parametrize(
    "name, reason",
    [
        ("music", "relative_attention music: its relative logits use a distance embedding per layer and head"),
        ("shaw_with_ape", "src_position_encoding sinusoidal with max_relative_positions > 0"),
    ],
)
def test_release_refuses_what_ctranslate2_cannot_run(workdir, checkpoints, name, reason):
    output = workdir / f"ct2_{name}"
    result = run(
        [command("onmt_release_model"), "--model", checkpoints[name], "--output", output, "--format", "ctranslate2"],
        expect_ok=False,
    )
    assert result.returncode != 0
    assert reason in result.stderr
    assert not (output / "model.bin").exists()


def test_rotary_encoder_decoder_refused(checkpoints):
    """CTranslate2's converter builds encoder-decoder models without rotary or ALiBi
    positions; the stock converter would fail on a missing table, ours says why."""
    opt = torch.load(checkpoints["ape"])["opt"]
    opt.position_encoding, opt.max_relative_positions = False, -1
    with pytest.raises(export.NotExportableError, match="rotary or ALiBi"):
        export.check_exportable(export.model_options(opt))


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
    assert "flash_attention" in export.read_metadata(exported["shaw_separate"])
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
        export._flash_attention_tripwire(spec.decoder, 64)
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
