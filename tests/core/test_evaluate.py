"""`onmt-posenc evaluate` against direct sacreBLEU calls, on real Multi30k German."""
import re

import pyonmttok
import pytest
from conftest import MULTI30K, command, run

from onmt_posenc.core.joining import join_lines
from onmt_posenc.core.text import read_lines, write_lines
from onmt_posenc.data.prepare_wmt16 import tokenizer


YEARS = (2014, 2015, 2016)


def system_output(line, number):
    """A deterministic imperfect 'translation' of a reference: one word dropped, two swapped."""
    words = line.split()
    del words[number % len(words)]
    if len(words) > 3:
        words[1], words[2] = words[2], words[1]
    return " ".join(words)


def sacrebleu_cli(ref, hyp):
    return float(run([command("sacrebleu"), ref, "-i", hyp, "-m", "bleu", "-b", "-w", "2"]).stdout)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Per year: raw reference, raw output, and the output as the prepared data's BPE tokens."""
    workdir = tmp_path_factory.mktemp("evaluate")
    codes = workdir / "bpe.codes"
    learner = pyonmttok.BPELearner(tokenizer=tokenizer(), symbols=500)
    learner.ingest_file(str(MULTI30K / "train.de"))
    learner.learn(str(codes))
    bpe = tokenizer(codes)
    references = read_lines(MULTI30K / "test_2016_flickr.de")
    for i, year in enumerate(YEARS):
        refs = references[i * 57: (i + 1) * 57]
        outputs = [system_output(line, n) for n, line in enumerate(refs)]
        write_lines(workdir / f"ref.{year}", refs)
        write_lines(workdir / f"out.{year}", outputs)
        write_lines(workdir / f"hyp.{year}", [" ".join(bpe.tokenize(line)[0]) for line in outputs])
    assert any("￭" in line for line in read_lines(workdir / "hyp.2014"))  # BPE pieces to undo
    return workdir


def test_table_per_year_matches_sacrebleu(files):
    result = run([command("onmt-posenc"), "evaluate", "--hyp", f"{files}/hyp.{{year}}",
                  "--ref", f"{files}/ref.{{year}}", "--years", "2014-2016"])
    rows = dict(re.findall(r"^\| (.+?) \| ([\d.]+) \|$", result.stdout, re.M))
    direct = {year: sacrebleu_cli(files / f"ref.{year}", files / f"out.{year}") for year in YEARS}
    assert 10 < min(direct.values()) and max(direct.values()) < 90  # imperfect output, a real test
    for year in YEARS:
        assert float(rows[str(year)]) == direct[year]
    assert float(rows["test average (2014-2016)"]) == pytest.approx(sum(direct.values()) / 3, abs=0.01)
    assert "case:mixed|eff:no|tok:13a|smooth:exp" in result.stdout


def test_interpolate_scores_joined_translations_without_their_separators(files):
    """The separators are no words: BLEU of joined lines is sacreBLEU's on the lines without them
    (with them, 13a's three tokens `< sep >` would match nearly always and inflate the score)."""
    joined, plain = {}, {}
    for name in ("hyp", "out", "ref"):
        joined[name] = files / f"{name}.2014.interp"
        write_lines(joined[name], join_lines(read_lines(files / f"{name}.2014"), 10, "<sep>"))
        plain[name] = files / f"{name}.2014.plain"
        write_lines(plain[name], [line.replace(" <sep> ", " ") for line in read_lines(joined[name])])
    # one translation loses a separator: it still scores, and is counted
    hyps = read_lines(joined["hyp"])
    hyps[1] = hyps[1].replace(" <sep>", "", 1)
    write_lines(joined["hyp"], hyps)
    result = run([command("onmt-posenc"), "evaluate", "--hyp", joined["hyp"], "--ref", joined["ref"]])
    score = float(re.search(r"BLEU = ([\d.]+) ", result.stdout).group(1))
    assert score == round(sacrebleu_cli(plain["ref"], plain["out"]), 2)
    assert score < sacrebleu_cli(joined["ref"], joined["out"])  # what counting `<sep>` would give
    assert "1 of 6 lines had a wrong number of separators" in result.stdout


def test_line_count_mismatch_is_an_error(files):
    short = files / "short"
    write_lines(short, read_lines(files / "hyp.2015")[:-1])
    result = run([command("onmt-posenc"), "evaluate", "--hyp", short, "--ref", files / "ref.2015"],
                 expect_ok=False)
    assert result.returncode == 2
    assert f"{short} has 56 lines but {files}/ref.2015 has 57" in result.stderr


def test_japanese_is_scored_with_ja_mecab_and_chrf(tmp_path):
    """KFTT's Japanese has no spaces: 13a would count a sentence as a word or two. The
    references look Japanese, so evaluate takes ja-mecab without being told; chrF beside it;
    a target language that says otherwise is refused rather than scored with 13a."""
    from conftest import TEST_DATA

    refs = read_lines(TEST_DATA / "kftt" / "kyoto-test.ja")[:100]
    hyps = [line[: max(len(line) - 3, 1)] for line in refs]  # each loses its last characters
    ref, hyp = tmp_path / "ref.ja", tmp_path / "hyp.ja"
    write_lines(ref, refs)
    write_lines(hyp, hyps)
    printed = run([command("onmt-posenc"), "evaluate", "--hyp", hyp, "--ref", ref]).stdout
    score = float(re.search(r"BLEU = ([0-9.]+)", printed).group(1))
    expected = float(run([command("sacrebleu"), ref, "-i", hyp, "-m", "bleu", "-b", "-w", "2", "-tok",
                          "ja-mecab"]).stdout)
    assert score == expected and "tok:ja-mecab" in printed
    chrf = float(re.search(r"chrF = ([0-9.]+)", printed).group(1))
    assert chrf == float(run([command("sacrebleu"), ref, "-i", hyp, "-m", "chrf", "-b", "-w", "2"]).stdout)
    assert re.search(r"brevity penalty [0-9.]+, n-gram precisions [0-9.]+/[0-9.]+/[0-9.]+/[0-9.]+", printed)
    same = run([command("onmt-posenc"), "evaluate", "--hyp", hyp, "--ref", ref, "--target-language", "ja"]).stdout
    assert same == printed
    refused = run([command("onmt-posenc"), "evaluate", "--hyp", hyp, "--ref", ref, "--target-language", "de"],
                  expect_ok=False)
    assert refused.returncode == 2
    assert "the references look Japanese (kana in most lines) but the target language is 'de'" in refused.stderr
