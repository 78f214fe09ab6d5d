"""KFTT En->Ja end to end on the committed excerpt (tests/data/kftt): `prepare kftt` from a
tarball in the official layout, joining within documents (the `interpolate` command, the
concat_pairs transform, the runner), and an experiment with phrase-level perSPE, relative
attention in one side and the decaying mask, scored with ja-mecab."""
import json
import tarfile

import pytest
from conftest import REPO, TEST_DATA, command, run, write_yaml

from onmt_posenc.core.scoring import corpus_bleu
from onmt_posenc.core.joining import group_bounds, join_lines, split_segments
from onmt_posenc.core.text import read_lines, write_lines

KFTT = TEST_DATA / "kftt"
PARTS = ("train", "dev", "test")


def official_tarball(folder, tmp_path, name="kftt-data-1.0.tar.gz"):
    """The files of `folder` packed as the official release: kftt-data-1.0/data/orig/..."""
    archive = tmp_path / name
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(folder.iterdir()):
            tar.add(path, arcname=f"kftt-data-1.0/data/orig/{path.name}")
    return archive


def documents(path):
    """The runs of equal ids of a docid file: [(id, first line, end)]."""
    ids = read_lines(path)
    runs = []
    for i, value in enumerate(ids):
        if runs and runs[-1][0] == value:
            runs[-1][2] = i + 1
        else:
            runs.append([value, i, i + 1])
    return [tuple(r) for r in runs]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kftt")
    out = tmp / "kftt"
    result = run([command("onmt-posenc"), "prepare", "kftt", out, "--from", official_tarball(KFTT, tmp),
                  "--vocab-size", "3000"])
    return out, result.stderr


def test_prepare_kftt_writes_the_runner_layout_with_document_ids(prepared):
    out, said = prepared
    assert "kftt written to" in said and "(2000 training pairs with document ids)" in said
    for part in ("train", "val", "test"):
        for side in ("src", "tgt", "docid"):
            assert (out / f"{side}-{part}.txt").is_file()
    assert (out / "languages.txt").read_text() == "en ja\n"
    assert (out / "sentencepiece.model").is_file()
    # document ids kept line for line; raw Japanese references kept for BLEU
    assert read_lines(out / "docid-val.txt") == read_lines(KFTT / "kyoto-dev.docid")
    assert read_lines(out / "ref-test.txt") == read_lines(KFTT / "kyoto-test.ja")
    # Japanese split into SentencePiece subwords with joiner marks, detokenized back to the text
    tokenized = read_lines(out / "tgt-test.txt")
    assert all(len(line.split()) > 3 for line in tokenized[:20]) and any("￭" in line for line in tokenized)
    bleu = corpus_bleu(tokenized, read_lines(out / "ref-test.txt"))
    assert "tok:ja-mecab" in bleu.signature and bleu.score > 99


def test_full_width_spaces_become_spaces_not_lost_pieces(prepared):
    """KFTT's Japanese has full-width spaces (U+3000; 67 in the excerpt). SentencePiece with
    identity normalization keeps one inside a piece ("￭\u3000"), which OpenNMT-py's
    whitespace split cut into a lone joiner: the character was lost. The subwords see a
    space there; the references stay raw."""
    out, _ = prepared
    assert sum(line.count("\u3000") for line in read_lines(KFTT / "kyoto-train.ja")) == 67
    tokens = [token for line in read_lines(out / "tgt-train.txt") for token in line.split(" ")]
    assert not any(token == "￭" or "\u3000" in token for token in tokens)
    assert read_lines(out / "ref-test.txt") == read_lines(KFTT / "kyoto-test.ja")


def test_prepare_kftt_first_pairs_in_spread_order_keep_whole_documents(tmp_path):
    out = tmp_path / "spread"
    run([command("onmt-posenc"), "prepare", "kftt", out, "--from", official_tarball(KFTT, tmp_path),
         "--vocab-size", "3000", "--order", "spread", "--first", "600"])
    assert len(read_lines(out / "src-train.txt")) == 600
    original = documents(KFTT / "kyoto-train.docid")
    kept = documents(out / "docid-train.txt")
    # whole articles (the last one may be cut by --first), in another order than the corpus's
    assert [doc for doc, _, _ in kept] != [doc for doc, _, _ in original][:len(kept)]
    lengths = {doc: end - start for doc, start, end in original}
    assert all(end - start == lengths[doc] for doc, start, end in kept[:-1])
    # spread: the first 600 pairs reach into the last third of the corpus's articles
    position = {doc: i for i, (doc, _, _) in enumerate(original)}
    assert max(position[doc] for doc, _, _ in kept) >= 2 * len(original) // 3
    # each pair keeps its partner and its id
    by_line = dict(zip(read_lines(KFTT / "kyoto-train.en"), read_lines(KFTT / "kyoto-train.docid")))
    assert read_lines(out / "docid-train.txt")[:5] == [by_line[line] for line in read_lines(
        KFTT / "kyoto-train.en") if by_line[line] == kept[0][0]][:5]


@pytest.mark.parametrize("case", ["empty line", "missing split", "not utf-8", "merges"])
def test_prepare_kftt_bad_copies_in_one_line(tmp_path, case):
    copy = tmp_path / "copy"
    copy.mkdir()
    for part in PARTS:
        for ext in ("en", "ja", "docid"):
            (copy / f"kyoto-{part}.{ext}").write_bytes((KFTT / f"kyoto-{part}.{ext}").read_bytes())
    extra = ["--vocab-size", "3000"]
    if case == "empty line":  # the official train has two: their pairs are dropped, and said
        lines = read_lines(copy / "kyoto-train.en")
        lines[6] = ""
        write_lines(copy / "kyoto-train.en", lines)
    elif case == "missing split":
        (copy / "kyoto-dev.ja").unlink()
    elif case == "not utf-8":
        (copy / "kyoto-test.ja").write_bytes(b"\xe4\xba\xac\n\xff\n" + b"x\n" * 298)
    else:
        extra = ["--merges", "100"]
    archive = official_tarball(copy, tmp_path)
    out = tmp_path / "out"
    result = run([command("onmt-posenc"), "prepare", "kftt", out, "--from", archive, *extra],
                 expect_ok=case == "empty line")
    last = result.stderr.strip().splitlines()
    if case == "empty line":
        assert f"{archive}:kftt-data-1.0/data/orig/kyoto-train.en: 1 empty line(s) (7): the pair(s) dropped" in last
        assert len(read_lines(out / "src-train.txt")) == len(read_lines(out / "docid-train.txt")) == 1999
        return
    assert result.returncode == 2 and "Traceback" not in result.stderr and not out.exists()
    expected = {"missing split": f"{archive}: missing kyoto-dev.ja",
                "not utf-8": f"{archive}:kftt-data-1.0/data/orig/kyoto-test.ja:2: not UTF-8 text",
                "merges": "--merges applies to a corpus split by bpe; kftt is split by sentencepiece"}[case]
    assert expected in last[-1]


# --- INTERPOLATE within documents ------------------------------------------------------

def test_groups_never_cross_a_document():
    ids = ["a"] * 7 + ["b"] * 2 + ["c"] * 10
    assert group_bounds(len(ids), 3, ids) == [(0, 3), (3, 6), (6, 7), (7, 9), (9, 12), (12, 15), (15, 18), (18, 19)]
    assert group_bounds(len(ids), 3) == [(i, min(i + 3, 19)) for i in range(0, 19, 3)]


def test_interpolate_join_with_document_ids(tmp_path):
    out = tmp_path / "joined.en"
    run([command("onmt-posenc"), "interpolate", "join", "-n", "10", KFTT / "kyoto-dev.en", out,
         "--docids", KFTT / "kyoto-dev.docid"])
    joined = read_lines(out)
    sentences = read_lines(KFTT / "kyoto-dev.en")
    bounds = group_bounds(len(sentences), 10, read_lines(KFTT / "kyoto-dev.docid"))
    assert len(joined) == len(bounds) > len(sentences) // 10  # shorter groups at the ends of documents
    for line, (start, end) in zip(joined, bounds):
        assert [" ".join(s) for s in split_segments(line.split(), "<sep>")] == [
            " ".join(s.split()) for s in sentences[start:end]]
    docids = read_lines(KFTT / "kyoto-dev.docid")
    assert all(len(set(docids[start:end])) == 1 for start, end in bounds)
    short = tmp_path / "short.docid"
    write_lines(short, docids[:-1])
    result = run([command("onmt-posenc"), "interpolate", "join", KFTT / "kyoto-dev.en", tmp_path / "x", "--docids",
                  short], expect_ok=False)
    assert result.returncode == 2
    assert f"{short} has 299 document ids but {KFTT / 'kyoto-dev.en'} has 300 lines" in result.stderr


def test_concat_pairs_joins_within_documents_in_training(tmp_path):
    """onmt_build_vocab -dump_samples: the training corpus as concat_pairs made it, with path_docids."""
    src, tgt, ids = KFTT / "kyoto-train.en", KFTT / "kyoto-train.ja", KFTT / "kyoto-train.docid"
    config = write_yaml(tmp_path / "c.yaml", {
        "data": {"kftt": {"path_src": str(src), "path_tgt": str(tgt), "path_docids": str(ids),
                          "transforms": ["concat_pairs"]}},
        "concat_n": 10, "save_data": str(tmp_path / "s"), "src_vocab": str(tmp_path / "v.src"),
        "tgt_vocab": str(tmp_path / "v.tgt"), "num_workers": 0, "overwrite": True})
    run([command("onmt_build_vocab"), "-config", config, "-n_sample", "-1", "-dump_samples", "-num_threads", "2"])
    dumped = sorted(read_lines(tmp_path / "sample" / "kftt.sample.src"))
    expected = sorted(join_lines(read_lines(src), 10, "<sep>", read_lines(ids)))
    assert [line.split() for line in dumped] == [line.split() for line in expected]
    assert len(dumped) > 200  # more groups than 2,000 / 10: documents end groups early


# --- an En->Ja experiment ----------------------------------------------------------------

EXPERIMENT = {
    "recipe": str(REPO / "recipes" / "base.yaml"),
    "settings": {"world_size": 1, "gpu_ranks": [], "model_dtype": "fp32", "num_workers": 0, "enc_layers": 1,
                 "dec_layers": 1, "heads": 2, "hidden_size": 32, "word_vec_size": 32, "transformer_ff": 64,
                 "train_steps": 12, "warmup_steps": 4, "batch_size": 2048, "accum_count": [1], "bucket_size": 2048,
                 "valid_batch_size": 2048, "save_checkpoint_steps": 6, "valid_steps": 6, "keep_checkpoint": 2,
                 "report_every": 6, "share_vocab": True, "src_vocab_size": 4000},
    "methods": {
        "perspe": {"perspe_range": 1},
        "rpe-enc": {"position_encoding": False, "max_relative_positions": 8, "relative_values": "none",
                    "relative_positions_side": "encoder"},
        "decay-dec": {"tgt_position_encoding": "none", "relative_attention": "decay",
                      "relative_positions_side": "decoder"},
    },
    "grid": [{"data": ["vanilla"], "method": ["perspe", "rpe-enc"]},
             {"data": ["interpolate"], "method": ["decay-dec"]}],
    "evaluation": {"sets": ["valid", "test"], "average_last": 2,
                   "translate": {"beam_size": 2, "batch_size": 64, "max_length": 12}},
    "analyses": {"swapped": {"set": "concat", "train_examples": 20}, "position_ablation": {"sentences": 20}},
    "tensorboard": True,
}


def test_an_en_ja_experiment_with_phrase_perspe_one_side_rpe_and_the_decaying_mask(prepared, tmp_path):
    folder, _ = prepared
    experiment = write_yaml(tmp_path / "enja.yaml", {
        **EXPERIMENT, "data": {"vanilla": {"folder": str(folder)},
                               "interpolate": {"folder": str(folder), "interpolate": 4}}})
    output = tmp_path / "runs"
    run([command("onmt-posenc"), "run", experiment, "--output", output], timeout=1800)
    results = {path.parent.parent.name: json.loads(path.read_text())
               for path in output.glob("*/*/seed1/result.json")}
    assert sorted(results) == ["decay-dec", "perspe", "rpe-enc"]
    for result in results.values():
        assert "tok:ja-mecab" in result["bleu_signature"]
        assert set(result["chrf"]) >= {"valid", "test"}
        assert set(result["bleu_details"]["test"]) == {"chrf", "brevity_penalty", "precisions"}
    # phrase-level perSPE: the runner made the phrase file from the training target, one index per token
    corpus = results["perspe"]["config"]["data"]["train"]
    assert corpus["transforms"][-1] == "tgt_phrases"
    phrases, target = read_lines(corpus["path_tgt_phrases"]), read_lines(corpus["path_tgt"])
    assert [len(p.split()) for p in phrases] == [len(t.split()) for t in target]
    # INTERPOLATE within documents: training, validation and every evaluation set
    joined = results["decay-dec"]["config"]["data"]
    assert joined["train"]["path_docids"].endswith("docid-train.txt") and "path_docids" in joined["valid"]
    test_src = read_lines(output / "data" / "interpolate" / "eval" / "test.src")
    assert test_src == join_lines(read_lines(folder / "src-test.txt"), 4, "<sep>", read_lines(folder / "docid-test.txt"))
    swapped = json.loads((output / "interpolate" / "decay-dec" / "seed1" / "analyses" / "swapped.json").read_text())
    assert "aligned" in swapped["concat"] and "aligned" in swapped["train"]
    report = (output / "report.md").read_text(encoding="utf-8")
    assert "tok:ja-mecab" in report and "chrF" in report
    # each run's TensorBoard curves in its own folder
    for label in results:
        assert list((output.glob(f"*/{label}/seed1/tensorboard/*/events.out.tfevents.*")))
