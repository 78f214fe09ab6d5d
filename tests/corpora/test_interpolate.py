"""`onmt-posenc interpolate join|split` on real toy-ende lines."""
from conftest import TOY_ENDE, command, head, run

from onmt_posenc.core.joining import fit_to_slots, split_segments
from onmt_posenc.core.text import read_lines

SEP = "<sep>"


def interpolate(*args, expect_ok=True):
    return run([command("onmt-posenc"), "interpolate", *args], expect_ok=expect_ok)


def test_join_then_split_gives_back_every_line(tmp_path):
    """23 lines with an empty one: groups of 10, 10 and 3; the split restores the file."""
    original = head(TOY_ENDE / "src-train.txt", tmp_path / "src.txt", 23)
    assert read_lines(original)[4] == ""
    joined = tmp_path / "joined.txt"
    interpolate("join", "-n", "10", original, joined)
    lines = read_lines(joined)
    assert [len(split_segments(line.split(), SEP)) for line in lines] == [10, 10, 3]
    assert f"{SEP} {SEP}" in lines[0]  # the empty line 5 is an empty segment
    restored = tmp_path / "restored.txt"
    result = interpolate("split", "--source", joined, joined, restored)
    assert result.stderr == ""
    assert read_lines(restored) == [" ".join(line.split()) for line in read_lines(original)]


def test_split_keeps_sentences_in_place_when_separators_are_wrong(tmp_path):
    sentences = head(TOY_ENDE / "tgt-test.txt", tmp_path / "ref.txt", 40)
    source = tmp_path / "source.txt"
    interpolate("join", sentences, source)  # 4 groups of 10 (the default)
    hyps = read_lines(source)
    hyps[1] = hyps[1].replace(f" {SEP} ", " ", 2)  # 7 separators instead of 9
    hyps[2] = hyps[2].replace(" , ", f" , {SEP} ", 1)  # one separator too many
    assert hyps[2].split().count(SEP) == 10
    bad = tmp_path / "hyp.txt"
    bad.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    out = tmp_path / "split.txt"
    result = interpolate("split", "--source", source, bad, out)
    assert f"{bad}:2: 7 separators where the source has 9" in result.stderr
    assert f"{bad}:3: 10 separators where the source has 9" in result.stderr
    assert "2 line(s) had a wrong number of separators" in result.stderr
    got, want = read_lines(out), read_lines(sentences)
    assert len(got) == 40
    # lines of the well-formed groups are untouched, and nothing after the bad ones moved
    assert got[:10] == want[:10] and got[30:] == want[30:]
    # short group: its words all kept, in order, padded with empty sentences at the end
    assert " ".join(got[10:20]).split() == " ".join(want[10:20]).split()
    assert got[18:20] == ["", ""]
    # long group: the surplus segment is merged into its last sentence
    assert " ".join(got[20:30]).split() == " ".join(want[20:30]).split()


def test_fit_to_slots():
    assert fit_to_slots([["a"], ["b"]], 3) == [["a"], ["b"], []]
    assert fit_to_slots([["a"], ["b"], ["c"]], 2) == [["a"], ["b", "c"]]
    assert fit_to_slots([["a"], ["b"]], 2) == [["a"], ["b"]]


def test_join_refuses_a_line_holding_the_separator(tmp_path):
    lines = read_lines(head(TOY_ENDE / "src-test.txt", tmp_path / "src.txt", 12))
    lines[7] += f" {SEP}"
    bad = tmp_path / "bad.txt"
    bad.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    result = interpolate("join", bad, tmp_path / "out.txt", expect_ok=False)
    assert result.returncode == 2
    assert f"{bad}:8: the line already contains the separator '{SEP}'" in result.stderr


def test_split_refuses_translations_of_another_source(tmp_path):
    source = tmp_path / "source.txt"
    interpolate("join", head(TOY_ENDE / "src-test.txt", tmp_path / "src.txt", 30), source)
    hyp = head(source, tmp_path / "hyp.txt", 2)
    result = interpolate("split", "--source", source, hyp, tmp_path / "out.txt", expect_ok=False)
    assert result.returncode == 2
    assert f"{hyp} has 2 lines but {source} has 3" in result.stderr
