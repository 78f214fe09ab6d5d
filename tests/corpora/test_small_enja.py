"""`onmt-posenc prepare small-enja` on the committed excerpt of small_parallel_enja
(tests/data/small_parallel_enja): the runner's layout with raw Japanese references, from the
whole training files or their numbered parts, and bad copies named in one line."""
import shutil

import pytest
from conftest import TEST_DATA, command, run

from onmt_posenc.core.scoring import corpus_bleu
from onmt_posenc.core.text import read_lines, write_lines
from onmt_posenc.data.prepare_corpus import spaces_removed

SMALL_ENJA = TEST_DATA / "small_parallel_enja"
LAYOUT = [f"{side}-{part}.txt" for part in ("train", "val", "test") for side in ("src", "tgt")]


def prepare(source, out, *extra, expect_ok=True):
    return run([command("onmt-posenc"), "prepare", "small-enja", out, "--from", source, "--vocab-size", "2000",
                *extra], expect_ok=expect_ok)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    out = tmp_path_factory.mktemp("small-enja") / "prepared"
    return out, prepare(SMALL_ENJA, out).stderr


def test_writes_the_runner_layout_with_raw_japanese_references(prepared):
    out, said = prepared
    assert "small-enja written to" in said and "(2000 training pairs)" in said
    for name in LAYOUT + ["ref-val.txt", "ref-test.txt", "sentencepiece.model"]:
        assert (out / name).is_file(), name
    assert (out / "languages.txt").read_text() == "en ja\n"
    # the references are the Japanese without KyTea's spaces
    kytea = read_lines(SMALL_ENJA / "test.ja")
    raw = read_lines(out / "ref-test.txt")
    assert kytea[0] == "彼 ら は つい に それ が 真実 だ と 認め た 。"
    assert raw[0] == "彼らはついにそれが真実だと認めた。"
    assert raw == [line.replace(" ", "") for line in kytea]
    # what the model reads: SentencePiece pieces with joiner marks, detokenized back to the raw text
    tokenized = read_lines(out / "tgt-test.txt")
    assert any("￭" in line for line in tokenized)
    assert corpus_bleu(tokenized, raw, language="ja").score == pytest.approx(100)
    english = read_lines(out / "src-train.txt")
    assert len(english) == 2000 and not any("￭ ￭" in line for line in english)


def test_spaces_between_ascii_words_are_kept():
    assert spaces_removed("私 は New York に 住 む 。") == "私はNew Yorkに住む。"
    assert spaces_removed("ＣＤ を 2 枚 買 っ た") == "ＣＤを2枚買った"


def test_training_files_in_numbered_parts_give_the_same_folder(prepared, tmp_path):
    whole, _ = prepared
    copy = tmp_path / "parts"
    shutil.copytree(SMALL_ENJA, copy)
    for lang in ("en", "ja"):
        lines = read_lines(copy / f"train.{lang}")
        (copy / f"train.{lang}").unlink()
        for number in range(4):
            write_lines(copy / f"train.{lang}.{number:03d}", lines[number * 500:(number + 1) * 500])
    out = tmp_path / "prepared"
    prepare(copy, out)
    for name in LAYOUT + ["ref-val.txt", "ref-test.txt"]:
        assert (out / name).read_bytes() == (whole / name).read_bytes(), name


@pytest.mark.parametrize("case", ["missing split", "line counts", "empty line", "empty line in a part",
                                  "gap in parts"])
def test_bad_copies_named_in_one_line(tmp_path, case):
    copy = tmp_path / "copy"
    shutil.copytree(SMALL_ENJA, copy)
    if case == "missing split":
        (copy / "dev.ja").unlink()
        expected = f"{copy}: missing dev.ja"
    elif case == "line counts":
        write_lines(copy / "test.en", read_lines(copy / "test.en")[:-1])
        expected = f"{copy / 'test.en'} has 299 lines but {copy / 'test.ja'} has 300"
    elif case == "empty line":
        lines = read_lines(copy / "dev.en")
        write_lines(copy / "dev.en", lines[:6] + [""] + lines[7:])
        expected = f"{copy / 'dev.en'}:7: an empty line (this corpus has none: is the copy damaged?)"
    elif case == "empty line in a part":  # named by the part and its own line, not the line of all parts
        lines = read_lines(copy / "train.en")
        (copy / "train.en").unlink()
        write_lines(copy / "train.en.000", lines[:1000])
        write_lines(copy / "train.en.001", lines[1000:1001] + [""] + lines[1002:])
        expected = f"{copy / 'train.en.001'}:2: an empty line (this corpus has none: is the copy damaged?)"
    else:
        for lang in ("en", "ja"):
            lines = read_lines(copy / f"train.{lang}")
            (copy / f"train.{lang}").unlink()
            write_lines(copy / f"train.{lang}.000", lines[:1000])
            write_lines(copy / f"train.{lang}.002", lines[1000:])
        expected = f"{copy / 'train.en.001'} is missing: train.en is given in parts 000, 002"
    out = tmp_path / "out"
    result = prepare(copy, out, expect_ok=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == f"onmt-posenc prepare: error: {expected}"
    assert not out.exists()
