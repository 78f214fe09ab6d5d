"""perSPE: the position module against OpenNMT-py's sinusoids, its options, the
phrase-boundary data path, and En->Ja through the stock commands on small_parallel_enja."""
import json
import math

import onmt  # noqa: F401  (activates the extension)
import pytest
import torch
import yaml
from conftest import REPO, TEST_DATA, TINY_MODEL, command, head, run, write_yaml
from onmt.bin.train import _get_parser
from onmt.modules.embeddings import PositionalEncoding, SequenceTooLongError

from onmt_posenc.model import options
from onmt_posenc.model.positions.perturbed import PerturbedSinusoidalEncoding, PhraseBoundariesMissingError
from onmt_posenc.data.transforms.phrase_boundaries import PhraseFile, PhraseFileError, attach_phrase_groups

ENJA = TEST_DATA / "small_parallel_enja"
DIM = 16
# Two sentences: start token, phrases (0 0 1 1 1 2) + 1, end token; then a shorter one, padded.
GROUPS = torch.tensor([[0, 1, 1, 2, 2, 2, 3, 4], [0, 1, 2, 2, 3, 0, 0, 0]])


def recovered_positions(module, emb):
    """The table row each output position was read from: out = emb * sqrt(d) + PE(row)."""
    out = module(emb)
    pe = (out - emb * math.sqrt(DIM)).reshape(-1, DIM)
    rows = torch.cdist(pe, module.pe[:, 0]).argmin(dim=1)
    torch.testing.assert_close(module.pe[rows, 0], pe, rtol=0, atol=1e-5)  # an exact row, not a blend
    return rows.reshape(emb.shape[:2])


def perturbations(module, groups, passes):
    """Per-position perturbation of `passes` forward passes: (passes, batch, len)."""
    batch, length = groups.shape
    drawn = []
    for _ in range(passes):
        with module.phrases(groups):
            drawn.append(recovered_positions(module, torch.randn(batch, length, DIM)) - torch.arange(length))
    return torch.stack(drawn)


def test_table_is_onmt_table_and_eval_is_plain_sinusoid():
    """Validation and translation: exactly OpenNMT-py's PositionalEncoding, with or without phrases."""
    stock = PositionalEncoding(DIM, "SinusoidalInterleaved")
    module = PerturbedSinusoidalEncoding(DIM, "SinusoidalInterleaved", max_perturbation=2).eval()
    assert module.pe.shape[0] == stock.pe.shape[0] + 2
    torch.testing.assert_close(module.pe[: stock.pe.shape[0]], stock.pe, rtol=0, atol=0)
    emb = torch.randn(2, 8, DIM)
    torch.testing.assert_close(module(emb), stock(emb), rtol=0, atol=0)
    with module.phrases(GROUPS):
        torch.testing.assert_close(module(emb), stock(emb), rtol=0, atol=0)
    # incremental decoding: plain sinusoid at `step`, even in training mode
    module.train()
    torch.testing.assert_close(module(emb[:, :1], step=5), stock(emb[:, :1], step=5), rtol=0, atol=0)


def test_phrase_perturbation_range_sharing_and_start_token():
    torch.manual_seed(0)
    module = PerturbedSinusoidalEncoding(DIM, "SinusoidalInterleaved", max_perturbation=1).train()
    per = perturbations(module, GROUPS, passes=300)
    assert per.min() == -1 and per.max() == 1
    assert (per[:, :, 0] == 0).all(), "the start token's perturbation is always 0"
    assert (per[:, 1, 5:] == 0).all(), "padding (group 0) is not perturbed"
    for row in range(2):
        for group in GROUPS[row].unique().tolist():
            members = per[:, row, GROUPS[row] == group]
            assert (members == members[:, :1]).all(), f"tokens of phrase {group} must share one perturbation"
    # Each phrase draws all of -1, 0, +1 about equally often, independently of its neighbours,
    # of the other sentence, and of the previous forward pass.
    first = per[:, 0, 1]
    counts = torch.bincount(first + 1, minlength=3)
    assert counts.min() > 60, counts
    assert (first != per[:, 0, 3]).any() and (first != per[:, 1, 1]).any()
    assert (first[1:] != first[:-1]).any()


def test_token_unit_draws_per_token():
    torch.manual_seed(1)
    module = PerturbedSinusoidalEncoding(DIM, "SinusoidalInterleaved", max_perturbation=2, unit="token").train()
    per = perturbations(module, torch.zeros(3, 6, dtype=torch.long), passes=200)  # groups unused for tokens
    assert (per[:, :, 0] == 0).all()
    assert (per[:, :, 2:] >= -2).all() and (per[:, :, 2:] <= 2).all()
    assert set(per[:, :, 3].unique().tolist()) == {-2, -1, 0, 1, 2}
    assert (per[:, :, 2] != per[:, :, 3]).float().mean() > 0.5  # neighbours draw independently


def test_positions_below_zero_are_clamped():
    """pos + per < 0 only within the first R positions; those read row 0, never the table's end."""
    torch.manual_seed(2)
    module = PerturbedSinusoidalEncoding(DIM, "SinusoidalInterleaved", max_perturbation=3, unit="token").train()
    rows = torch.stack([recovered_positions(module, torch.randn(4, 5, DIM)) for _ in range(100)])
    assert rows.max() <= 4 + 3
    assert set(rows[:, :, 1].unique().tolist()) == {0, 1, 2, 3, 4}  # 1 + {-3..3}, clamped at 0
    assert set(rows[:, :, 4].unique().tolist()) == set(range(1, 8))  # no clamping needed


def test_phrase_unit_without_boundaries_is_an_error_in_training_only():
    module = PerturbedSinusoidalEncoding(DIM, "SinusoidalInterleaved", max_perturbation=1)
    module.train()
    with pytest.raises(PhraseBoundariesMissingError, match="path_tgt_phrases"):
        module(torch.randn(2, 4, DIM))
    with pytest.raises(ValueError, match="phrase groups of shape"), module.phrases(GROUPS):
        module(torch.randn(2, 4, DIM))
    module.eval()
    module(torch.randn(2, 4, DIM))


def test_sequence_too_long():
    module = PerturbedSinusoidalEncoding(DIM, "SinusoidalInterleaved", max_perturbation=1, unit="token", max_len=10)
    module.train()
    module(torch.randn(1, 10, DIM))  # 10 + R rows exist
    with pytest.raises(SequenceTooLongError):
        module(torch.randn(1, 11, DIM))


def parse_model_options(*args):
    from onmt import opts
    from onmt.utils.parse import ArgumentParser

    parser = ArgumentParser()
    opts.model_opts(parser)
    return options.resolve_position_options(parser.parse_args(["-position_encoding", *args]))


def test_option_resolution():
    opt = parse_model_options("-perspe_range", "1")
    assert (opt.src_position_encoding, opt.tgt_position_encoding, opt.perspe_unit) == ("sinusoidal", "perspe", "phrase")
    # SHAPE on the encoder, perSPE on the decoder (the paper's combination of the two methods)
    opt = parse_model_options("-perspe_range", "1", "-shape_max_shift", "40")
    assert (opt.src_position_encoding, opt.tgt_position_encoding) == ("shape", "perspe")
    # the encoder ablation of the paper's Table 4: token-level perturbation on both sides
    opt = parse_model_options("-perspe_range", "2", "-perspe_unit", "token", "-src_position_encoding", "perspe")
    assert (opt.src_position_encoding, opt.tgt_position_encoding) == ("perspe", "perspe")


@pytest.mark.parametrize(
    "args, message",
    [
        (["-perspe_range", "0"], "perspe_range must be >= 1, got 0"),
        (["-tgt_position_encoding", "perspe"], "needs perspe_range"),
        (["-perspe_range", "1", "-tgt_position_encoding", "sinusoidal"], "perspe_range is set but neither"),
        (["-perspe_unit", "token"], "perspe_unit is set but neither"),
        (["-perspe_range", "1", "-src_position_encoding", "perspe"], "needs perspe_unit: token"),
    ],
)
def test_inconsistent_perspe_options_refused(args, message):
    with pytest.raises(ValueError, match=message):
        parse_model_options(*args)


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_phrase_file_checks(tmp_path):
    target = write_lines(tmp_path / "t.ja", ["私 は 学生 です 。", "はい 。"])
    first, second = ["私", "は", "学生", "です", "。"], ["はい", "。"]
    phrases = PhraseFile(str(write_lines(tmp_path / "ok", ["0 0 1 1 1", "0 0"])), str(target))
    assert phrases.ids(0, first, 5) == [0, 0, 1, 1, 1] and phrases.ids(1, second, 2) == [0, 0]
    with pytest.raises(PhraseFileError, match=r"ok:2: 2 phrase indices for a target of 3 tokens"):
        phrases.ids(1, second, 3)
    with pytest.raises(PhraseFileError, match=r"t.ja:2 is not the line the corpus reader gave as line 2"):
        phrases.ids(1, first, 5)
    with pytest.raises(PhraseFileError, match=r"has 1 lines but the target .*t.ja has 2"):
        PhraseFile(str(write_lines(tmp_path / "short", ["0 0 1 1 1"])), str(target))
    for bad, message in (("0 0 x 1 1", "must be integers"), ("0 0 2 2 2", "token 3 has 2 after 0"),
                         ("1 1 2 2 2", "token 1 has 1")):
        with pytest.raises(PhraseFileError, match=message):
            PhraseFile(str(write_lines(tmp_path / "bad", [bad, "0 0"])), str(target)).ids(0, first, 5)


def numeric_example(cid, line, n_tokens, phrases=None):
    example = {"cid": cid, "cid_line_number": line, "tgt": {"tgt_ids": list(range(n_tokens + 2))}}
    if phrases is not None:
        example["tgt_phrases"] = phrases
    return example, line


def test_phrase_groups_ride_in_the_target_tensor():
    minibatch = [numeric_example("c", 0, 4, [0, 0, 1, 1]), numeric_example("c", 1, 2, [0, 1])]
    target = torch.arange(12).reshape(2, 6, 1)
    batch = attach_phrase_groups({"tgt": target}, minibatch)
    assert torch.equal(batch["tgt"][:, :, 0], target[:, :, 0])
    assert batch["tgt"][:, :, 1].tolist() == [[0, 1, 1, 2, 2, 3], [0, 1, 2, 3, 0, 0]]
    left = attach_phrase_groups({"tgt": target}, minibatch, left_pad=True)
    assert left["tgt"][1, :, 1].tolist() == [0, 0, 0, 1, 2, 3]
    assert attach_phrase_groups({"tgt": target}, [numeric_example("c", 0, 4)])["tgt"] is target
    with pytest.raises(PhraseFileError, match="corpus 'other' has no target phrases"):
        attach_phrase_groups({"tgt": target}, [minibatch[0], numeric_example("other", 0, 4)])
    with pytest.raises(PhraseFileError, match="corpus 'c' line 1: 4 phrase indices but 5 target tokens"):
        attach_phrase_groups({"tgt": target}, [numeric_example("c", 0, 5, [0, 0, 1, 1])])


def test_each_example_gets_its_own_file_line_with_several_readers(tmp_path):
    """With data workers or GPUs, OpenNMT-py's reader `offset` of `stride` reads blocks of lines;
    every example must still get the phrases of its own line of the file."""
    from argparse import Namespace

    from onmt.inputters.text_corpus import ParallelCorpus, ParallelCorpusIterator
    from onmt.transforms import TransformPipe

    from onmt_posenc.data.chunk_japanese import JapaneseChunker
    from onmt_posenc.data.transforms.phrase_boundaries import TargetPhrasesTransform

    targets = list(dict.fromkeys((ENJA / "dev.ja").read_text(encoding="utf-8").splitlines()))[:13]
    chunker = JapaneseChunker()
    expected = {line: chunker.token_phrases(line.split()) for line in targets}
    tgt = write_lines(tmp_path / "t.ja", targets)
    phrases = write_lines(tmp_path / "t.ja.phrases", [" ".join(map(str, expected[t])) for t in targets])
    corpus = {"path_src": str(tgt), "path_tgt": str(tgt), "path_tgt_phrases": str(phrases),
              "transforms": ["tgt_phrases"]}
    transform = TargetPhrasesTransform(Namespace(data={"c": corpus}, seed=-1))
    transform.warm_up()
    for stride in (1, 2, 3):
        seen = []
        for offset in range(stride):
            reader = ParallelCorpusIterator(ParallelCorpus("c", str(tgt), str(tgt)), TransformPipe.build_from([]),
                                            stride=stride, offset=offset)
            for example, _, cid in reader:
                line = " ".join(example["tgt"])
                assert transform.apply(example, is_train=True, corpus_name=cid)["tgt_phrases"] == expected[line]
                seen.append(line)
        assert sorted(seen) == sorted(targets)


# ---- through the stock OpenNMT-py commands -------------------------------------------------


def enja_config(workdir, **overrides):
    """A 2-layer d=64 En->Ja transformer on 2,000 small_parallel_enja pairs, perSPE on the decoder."""
    config = {
        "data": {
            "corpus_1": {
                "path_src": str(workdir / "train.en"),
                "path_tgt": str(workdir / "train.ja"),
                "path_tgt_phrases": str(workdir / "train.ja.phrases"),
                "transforms": ["tgt_phrases"],
            },
            "valid": {"path_src": str(workdir / "dev.en"), "path_tgt": str(workdir / "dev.ja")},
        },
        "save_data": str(workdir / "samples"),
        "src_vocab": str(workdir / "vocab.joint"),
        "share_vocab": True,
        "overwrite": True,
        "save_model": str(workdir / "model"),
        **TINY_MODEL,
        "perspe_range": 1,
        "train_steps": 80,
        "valid_steps": 40,
        "save_checkpoint_steps": 80,
        "report_every": 20,
    }
    config.update(overrides)
    return config


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """Real En-Ja slices, their phrase boundaries (`onmt-posenc chunk-ja`) and vocabularies."""
    workdir = tmp_path_factory.mktemp("perspe")
    for side in ("en", "ja"):
        head(ENJA / f"train.{side}", workdir / f"train.{side}", 2000)
        head(ENJA / f"dev.{side}", workdir / f"dev.{side}", 100)
        head(ENJA / f"test.{side}", workdir / f"test.{side}", 60)
    run([command("onmt-posenc"), "chunk-ja", workdir / "train.ja", workdir / "train.ja.phrases"])
    config = write_yaml(workdir / "vocab.yaml", enja_config(workdir))
    run([command("onmt_build_vocab"), "-config", config, "-n_sample", "-1"])
    return workdir


def test_recipe_has_paper_settings():
    opt, _ = _get_parser().parse_known_args(["-config", str(REPO / "recipes" / "perspe.yaml")])
    assert (opt.perspe_range, opt.perspe_unit, opt.position_encoding) == (1, "phrase", True)
    corpus = yaml.safe_load(opt.data)["aspec"]  # OpenNMT-py keeps `data` as YAML text until validation
    assert corpus["transforms"] == ["tgt_phrases"]
    assert corpus["path_tgt_phrases"] == corpus["path_tgt"] + ".phrases"
    assert (opt.src_vocab_size, opt.share_vocab, opt.hidden_size, opt.enc_layers) == (16000, True, 512, 6)
    assert opt.batch_size * opt.accum_count[0] * opt.world_size == 8192
    baseline, _ = _get_parser().parse_known_args(["-config", str(REPO / "recipes" / "aspec_ape.yaml")])
    assert baseline.perspe_range is None and yaml.safe_load(baseline.data)["aspec"]["path_tgt"] == corpus["path_tgt"]


@pytest.fixture(scope="module")
def trained(workdir):
    """recipes/perspe.yaml scaled down (size, data, device), with SHAPE (K=20) on the encoder."""
    tiny = enja_config(workdir)
    overrides = {key: tiny[key] for key in ("data", "save_data", "src_vocab", "bucket_size", "num_workers",
                                            "batch_size", "layers", "heads", "hidden_size", "word_vec_size",
                                            "transformer_ff", "train_steps", "valid_steps", "report_every",
                                            "save_checkpoint_steps", "save_model")}
    overrides.update(include=str(REPO / "recipes" / "perspe.yaml"), overwrite=True, enc_layers=2, dec_layers=2,
                     world_size=1, gpu_ranks=[], model_dtype="fp32", warmup_steps=20, shape_max_shift=20,
                     log_file=str(workdir / "train.log"))
    run([command("onmt_train"), "-config", write_yaml(workdir / "perspe.yaml", overrides)])
    return workdir / "model_step_80.pt"


def test_end_to_end_enja_translate_and_score(workdir, trained):
    checkpoint = torch.load(trained)
    opt = checkpoint["opt"]
    assert (opt.src_position_encoding, opt.tgt_position_encoding, opt.perspe_unit) == ("shape", "perspe", "phrase")
    assert opt.share_embeddings and opt.label_smoothing == 0.1  # from the recipe
    hyp = workdir / "test.hyp"
    run([command("onmt_translate"), "-model", trained, "-src", workdir / "test.en", "-output", hyp,
         "-beam_size", "3", "-max_length", "40"])
    hypotheses = hyp.read_text(encoding="utf-8").splitlines()
    assert len(hypotheses) == 60 and any(hypotheses)
    # the reference is word-segmented; sacreBLEU re-tokenizes both sides with MeCab (IPA dictionary)
    score = run([command("sacrebleu"), workdir / "test.ja", "-i", hyp, "-m", "bleu", "-tok", "ja-mecab", "-w", "2"])
    result = json.loads(score.stdout)
    assert "tok:ja-mecab" in result["signature"]


def test_phrase_groups_reach_the_decoder_in_training(workdir):
    """The data pipeline of onmt_train (tgt_phrases transform, tensorify, Embeddings) brings each
    target's phrases from the boundary file to the decoder's perSPE module."""
    from onmt.constants import CorpusTask
    from onmt.inputters import build_vocab
    from onmt.inputters.dynamic_iterator import build_dynamic_dataset_iter
    from onmt.model_builder import build_base_model
    from onmt.opts import train_opts
    from onmt.transforms import get_specials, get_transforms_cls
    from onmt.utils.parse import ArgumentParser

    parser = ArgumentParser()
    train_opts(parser)
    opt = parser.parse_args(["-config", str(workdir / "vocab.yaml")])
    ArgumentParser.update_model_opts(opt)
    ArgumentParser.validate_model_opts(opt)
    ArgumentParser.validate_prepare_opts(opt)
    transforms = get_transforms_cls(opt._all_transform)
    vocabs = build_vocab(opt, get_specials(opt, transforms))
    batch, _ = next(iter(build_dynamic_dataset_iter(opt, transforms, vocabs, task=CorpusTask.TRAIN)))
    assert batch["tgt"].shape[2] == 2
    file_lines = (workdir / "train.ja.phrases").read_text(encoding="utf-8").splitlines()
    for row, line in enumerate(batch["cid_line_number"]):
        phrases = [int(p) for p in file_lines[line].split()]
        assert batch["tgt"][row, : len(phrases) + 2, 1].tolist() == [0] + [p + 1 for p in phrases] + [phrases[-1] + 2]

    model = build_base_model(opt, vocabs)
    torch.manual_seed(0)
    for parameter in model.parameters():  # build_base_model leaves embeddings uninitialized
        torch.nn.init.uniform_(parameter, -0.1, 0.1)
    pe = model.decoder.embeddings.make_embedding.pe
    assert isinstance(pe, PerturbedSinusoidalEncoding)
    seen = []
    stock_groups = pe.groups
    pe.groups = lambda *args: seen.append(stock_groups(*args)) or seen[-1]
    model.train()
    model(batch["src"], batch["tgt"], batch["srclen"])
    assert torch.equal(seen[0], batch["tgt"][:, :-1, 1])

    # In evaluation the decoder is OpenNMT-py's plain APE, with or without the phrase column.
    model.eval()
    with torch.no_grad():
        with_column, _ = model(batch["src"], batch["tgt"], batch["srclen"])
        without, _ = model(batch["src"], batch["tgt"][:, :, :1], batch["srclen"])
        model.decoder.embeddings.make_embedding.pe = PositionalEncoding(64, "SinusoidalInterleaved")
        stock, _ = model(batch["src"], batch["tgt"][:, :, :1], batch["srclen"])
        ape_with_column, _ = model(batch["src"], batch["tgt"], batch["srclen"])  # other schemes ignore it
    torch.testing.assert_close(with_column, stock, rtol=0, atol=0)
    torch.testing.assert_close(without, stock, rtol=0, atol=0)
    torch.testing.assert_close(ape_with_column, stock, rtol=0, atol=0)


def test_missing_or_misaligned_boundary_file_is_an_error(workdir):
    no_path = enja_config(workdir)
    del no_path["data"]["corpus_1"]["path_tgt_phrases"]
    result = run([command("onmt_build_vocab"), "-config", write_yaml(workdir / "no_path.yaml", no_path),
                  "-n_sample", "-1"], expect_ok=False)
    assert result.returncode != 0
    assert "corpus 'corpus_1' uses the tgt_phrases transform but sets no path_tgt_phrases" in result.stderr

    lines = (workdir / "train.ja.phrases").read_text(encoding="utf-8").splitlines()
    targets = (workdir / "train.ja").read_text(encoding="utf-8").splitlines()
    short = write_lines(workdir / "short.phrases", lines[:-1])
    # one line lost after line 4 (and made up at the end): the first line whose length differs fails
    shifted = lines[:4] + lines[5:] + lines[4:5]
    first_bad = next(i for i in range(4, 2000) if len(shifted[i].split()) != len(targets[i].split()))
    misaligned = write_lines(workdir / "misaligned.phrases", shifted)
    expected = {
        short: f"{short} has 1999 lines but the target {workdir / 'train.ja'} has 2000",
        misaligned: f"{misaligned}:{first_bad + 1}: {len(shifted[first_bad].split())} phrase indices for a target "
        f"of {len(targets[first_bad].split())} tokens",
    }
    for path, message in expected.items():
        config = enja_config(workdir)
        config["data"]["corpus_1"]["path_tgt_phrases"] = str(path)
        result = run([command("onmt_build_vocab"), "-config", write_yaml(workdir / "bad.yaml", config),
                      "-n_sample", "-1"], expect_ok=False)
        assert result.returncode != 0
        assert f"onmt_build_vocab: error: {message}" in result.stderr and "Traceback" not in result.stderr


def test_phrase_unit_without_the_transform_stops_training(workdir):
    config = enja_config(workdir, train_steps=2)
    del config["data"]["corpus_1"]["transforms"]
    result = run([command("onmt_train"), "-config", write_yaml(workdir / "no_transform.yaml", config)],
                 expect_ok=False)
    assert result.returncode != 0
    assert "perspe_unit 'phrase' needs target phrase boundaries in training" in result.stderr
    # token-level perSPE needs no boundaries
    config["perspe_unit"] = "token"
    config["save_model"] = str(workdir / "token")
    run([command("onmt_train"), "-config", write_yaml(workdir / "token.yaml", config)])
    assert (workdir / "token_step_2.pt").exists()
