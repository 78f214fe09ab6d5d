"""`onmt-posenc prepare`: Multi30k and toy-ende from a local copy (folder or archive), offline."""
import gzip
import tarfile

import pytest
from conftest import MULTI30K, TOY_ENDE, command, run

from onmt_posenc.core.scoring import corpus_bleu
from onmt_posenc.core.text import read_lines

LAYOUT = [f"{side}-{part}.txt" for part in ("train", "val", "test") for side in ("src", "tgt")]


def test_multi30k_from_a_folder_is_tokenized_with_bpe_and_keeps_raw_references(tmp_path):
    out = tmp_path / "m30k"
    result = run([command("onmt-posenc"), "prepare", "multi30k", out, "--from", MULTI30K, "--merges", "2000"])
    assert "3000 training pairs" in result.stderr
    for name in LAYOUT + ["ref-val.txt", "ref-test.txt", "bpe.codes"]:
        assert (out / name).is_file(), name
    raw = read_lines(MULTI30K / "test_2016_flickr.de")
    assert read_lines(out / "ref-test.txt") == raw
    tokenized = read_lines(out / "tgt-test.txt")
    assert len(tokenized) == len(raw) and any("￭" in line for line in tokenized)  # joiners: BPE pieces
    # The tokenized references detokenize back to the raw text: BLEU 100 against it.
    assert corpus_bleu(tokenized, raw).score == pytest.approx(100)
    # Runs of spaces and no-break spaces of the raw text are gone from what the model reads.
    train = read_lines(out / "src-train.txt") + read_lines(out / "tgt-train.txt")
    assert not any("  " in line or "\xa0" in line for line in train)


def test_from_a_gzipped_archive_and_toy_ende_copied_as_it_is(tmp_path):
    archive = tmp_path / "multi30k.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name in ("train", "val", "test_2016_flickr"):
            for lang in ("en", "de"):
                packed = tmp_path / f"{name}.{lang}.gz"
                packed.write_bytes(gzip.compress((MULTI30K / f"{name}.{lang}").read_bytes()))
                tar.add(packed, arcname=f"data/task1/raw/{packed.name}")
    out = tmp_path / "from-archive"
    run([command("onmt-posenc"), "prepare", "multi30k", out, "--from", archive, "--merges", "2000"])
    folder = tmp_path / "from-folder"
    run([command("onmt-posenc"), "prepare", "multi30k", folder, "--from", MULTI30K, "--merges", "2000"])
    for name in LAYOUT:
        assert (out / name).read_text(encoding="utf-8") == (folder / name).read_text(encoding="utf-8")

    toy = tmp_path / "toy"
    run([command("onmt-posenc"), "prepare", "toy-ende", toy, "--from", TOY_ENDE])
    for name in LAYOUT:
        assert (toy / name).read_bytes() == (TOY_ENDE / name).read_bytes()
    assert not (toy / "ref-test.txt").exists()  # already tokenized text: BLEU against the target files


def test_files_of_an_earlier_preparation_that_would_be_read_are_refused(tmp_path):
    """References, document ids and languages.txt are read wherever a data folder has them:
    toy-ende (none of those) into Multi30k's folder would be scored against Multi30k's
    references. Preparing the same corpus again into its folder is fine."""
    out = tmp_path / "data"
    run([command("onmt-posenc"), "prepare", "multi30k", out, "--from", MULTI30K, "--merges", "2000"])
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    result = run([command("onmt-posenc"), "prepare", "toy-ende", out, "--from", TOY_ENDE], expect_ok=False)
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == (
        f"onmt-posenc prepare: error: {out} holds ref-val.txt, ref-test.txt, languages.txt from an earlier "
        "preparation, which this corpus does not write and an experiment would read with it; prepare into a new "
        "folder, or remove them first")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    run([command("onmt-posenc"), "prepare", "multi30k", out, "--from", MULTI30K, "--merges", "1000"])


def test_an_incomplete_copy_is_named(tmp_path):
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "train.en").write_text("a\n")
    result = run([command("onmt-posenc"), "prepare", "multi30k", tmp_path / "out", "--from", partial], expect_ok=False)
    assert result.returncode == 2
    assert "missing train.de, val.en, val.de, test_2016_flickr.en, test_2016_flickr.de" in result.stderr


@pytest.mark.parametrize("case", ["not utf-8", "empty", "bad archive", "truncated gzip", "out is a file",
                                  "merges 0"])
def test_bad_copies_and_options_are_named_before_anything_is_written(tmp_path, case):
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("train", "val", "test_2016_flickr"):
        for lang in ("en", "de"):
            (copy / f"{name}.{lang}").write_bytes((MULTI30K / f"{name}.{lang}").read_bytes())
    source, out, extra = copy, tmp_path / "out", []
    if case == "not utf-8":
        (copy / "val.de").write_bytes(b"ein Hund\nein Ma\xdfstab\n")
        (copy / "val.en").write_bytes(b"a dog\na ruler\n")
        expected = f"{copy / 'val.de'}:2: not UTF-8 text (byte 0xdf: invalid continuation byte)"
    elif case == "empty":
        (copy / "val.en").write_text("")
        expected = f"{copy / 'val.en'} is empty"
    elif case == "bad archive":
        source = tmp_path / "multi30k.tar.gz"
        source.write_bytes(b"\x1f\x8b not really gzip")
        expected = f"--from {source}: not a folder nor a readable .tar.gz archive"
    elif case == "truncated gzip":  # a download cut short
        (copy / "train.en").unlink()
        (copy / "train.en.gz").write_bytes(gzip.compress((MULTI30K / "train.en").read_bytes())[:500])
        expected = f"{copy / 'train.en.gz'} is not a complete gzip file (Compressed file ended before"
    elif case == "out is a file":
        out.write_text("")
        expected = f"{out} exists and is not a folder"
    else:
        extra = ["--merges", "0"]
        expected = "argument --merges: must be >= 1, got 0"
    result = run([command("onmt-posenc"), "prepare", "multi30k", out, "--from", source, *extra], expect_ok=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert expected in result.stderr.strip().splitlines()[-1]
    assert case == "out is a file" or not out.exists()
