"""The Japanese chunker (`onmt-posenc chunk-ja`) on real sentences of small_parallel_enja."""
import subprocess
import sys

import pytest
import unidic_lite
from conftest import TEST_DATA, command, head, run

from onmt_posenc.data.chunk_japanese import JapaneseChunker

DEV_JA = TEST_DATA / "small_parallel_enja" / "dev.ja"
TRAIN_JA = TEST_DATA / "small_parallel_enja" / "train.ja"


@pytest.fixture(scope="module")
def chunker():
    return JapaneseChunker()


@pytest.fixture(scope="module")
def dev_lines():
    return DEV_JA.read_text(encoding="utf-8").splitlines()


def chunked(tokens, ids):
    """'誰 が | 一番 に | ...' for reading."""
    phrases = [[] for _ in range(ids[-1] + 1)]
    for token, phrase in zip(tokens, ids):
        phrases[phrase].append(token)
    return " | ".join(" ".join(phrase) for phrase in phrases)


def test_uses_the_unidic_lite_package_dictionary(chunker):
    assert chunker.tagger.dictionary_info().filename.startswith(unidic_lite.DICDIR)


def test_bunsetsu_like_phrases_of_real_sentences(chunker):
    lines = TRAIN_JA.read_text(encoding="utf-8").splitlines()[:3]
    got = [chunked(line.split(), chunker.token_phrases(line.split())) for line in lines]
    assert got == [
        "誰 が | 一番 に | 着 く か | 私 に は | 分か り ま せ ん 。",
        "多く の | 動物 が | 人間 に | よ っ て | 滅ぼ さ れ た 。",
        "私 は | テニス 部員 で す 。",
    ]


def test_every_dev_sentence_gets_well_formed_phrase_ids(chunker, dev_lines):
    n_tokens = n_phrases = 0
    for line in dev_lines:
        tokens = line.split()
        ids = chunker.token_phrases(tokens)
        assert len(ids) == len(tokens) and ids[0] == 0
        assert all(b - a in (0, 1) for a, b in zip(ids, ids[1:])), line
        n_tokens += len(ids)
        n_phrases += ids[-1] + 1
        # particles and sentence-final punctuation close a phrase, they never open one
        for token, previous, phrase in zip(tokens[1:], ids, ids[1:]):
            if token in ("を", "が", "は", "に", "の", "。", "、"):
                assert phrase == previous, f"{token!r} opens a phrase in {chunked(tokens, ids)}"
    assert 2.0 < n_tokens / n_phrases < 4.0  # bunsetsu-sized, neither words nor sentences


def test_subword_tokens_follow_their_word(chunker, dev_lines):
    """The same text segmented into subwords (BPE '@@', SentencePiece '▁') gets the phrases of its words."""
    for line in dev_lines[:100]:
        words = line.split()
        word_ids = chunker.token_phrases(words)
        bpe, spm, bpe_word, spm_word = [], [], [], []
        for index, word in enumerate(words):
            pieces = list(word)
            bpe += [piece + "@@" for piece in pieces[:-1]] + [pieces[-1]]
            bpe_word += [index] * len(pieces)
            spm_pieces = ["▁"] + pieces if index % 2 else ["▁" + pieces[0]] + pieces[1:]
            spm += spm_pieces
            spm_word += [index] * len(spm_pieces)
        for tokens, word_of in ((bpe, bpe_word), (spm, spm_word)):
            ids = chunker.token_phrases(tokens)
            assert ids == [word_ids[w] for w in word_of], " ".join(tokens)


def test_command_writes_one_line_per_target_line(tmp_path):
    target = head(DEV_JA, tmp_path / "dev.ja", 300)
    output = tmp_path / "dev.ja.phrases"
    result = run([command("onmt-posenc"), "chunk-ja", target, output])
    targets = target.read_text(encoding="utf-8").splitlines()
    phrases = output.read_text(encoding="utf-8").splitlines()
    assert len(phrases) == len(targets) == 300
    assert all(len(p.split()) == len(t.split()) for p, t in zip(phrases, targets))
    n_tokens = sum(len(t.split()) for t in targets)
    n_phrases = sum(int(p.split()[-1]) + 1 for p in phrases)
    assert f"{output}: 300 lines, {n_tokens} tokens, {n_phrases} phrases" in result.stderr


def test_an_empty_line_is_one_phrase_of_its_one_empty_token(tmp_path):
    """OpenNMT-py reads an empty target line as one empty token: its phrase line is "0", which
    the tgt_phrases transform takes, not an empty line that stops training."""
    from onmt_posenc.core.text import opennmt_tokens
    from onmt_posenc.data.chunk_japanese import chunk_file
    from onmt_posenc.data.transforms.phrase_boundaries import PhraseFile

    target = tmp_path / "t.ja"
    target.write_text("はい 。\n\n", encoding="utf-8")
    chunk_file(target, tmp_path / "t.phrases")
    assert (tmp_path / "t.phrases").read_text(encoding="utf-8").splitlines()[1] == "0"
    assert PhraseFile(str(tmp_path / "t.phrases"), str(target)).ids(1, opennmt_tokens(""), 1) == [0]


def test_works_beside_sacrebleu_ja_mecab_tokenizer():
    """sacreBLEU's ja-mecab tokenizer (IPA dictionary) in the same process must not change
    (or crash: MeCab.Tagger() without arguments does after it) the chunker's dictionary."""
    probe = (
        "from sacrebleu.tokenizers.tokenizer_ja_mecab import TokenizerJaMecab\n"
        "print(TokenizerJaMecab()('私はテニス部員です。'))\n"
        "from onmt_posenc.data.chunk_japanese import JapaneseChunker\n"
        "c = JapaneseChunker()\n"
        "print(c.tagger.dictionary_info().filename)\n"
        "print(c.token_phrases('私 は テニス 部員 で す 。'.split()))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "私 は テニス 部員 です 。"
    assert lines[1].startswith(unidic_lite.DICDIR)
    assert lines[2] == "[0, 0, 1, 1, 1, 1, 1]"


def test_a_command_whose_dependency_is_missing_says_which_in_one_line(monkeypatch, capsys):
    """Installed without its dependencies (pip --no-deps), chunk-ja cannot import MeCab:
    one line naming the module and how to install it, not an ImportError traceback."""
    import sys

    from onmt_posenc import cli

    monkeypatch.delitem(sys.modules, "onmt_posenc.data.chunk_japanese", raising=False)
    monkeypatch.setitem(sys.modules, "MeCab", None)  # what an absent package does to `import MeCab`
    with pytest.raises(SystemExit) as stopped:
        cli.main(["chunk-ja", "--help"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err == (
        "onmt-posenc chunk-ja: error: needs the Python module 'MeCab', which is not installed; this package's "
        "dependencies are missing (installed with --no-deps?): install onmt-posenc again without --no-deps (in a "
        "clone: `pip install .`, or `make setup` with the tests' packages)\n")
