"""The swapped evaluation's scoring on given translations: X1 found by the separators, or by
alignment where a translation has none or the wrong number (no model: what the translations
hold decides every score)."""
import pytest
from conftest import MULTI30K

from onmt_posenc.analysis import swapped
from onmt_posenc.core.alignment import segment, units
from onmt_posenc.core.joining import join_lines
from onmt_posenc.core.scoring import corpus_bleu
from onmt_posenc.core.text import read_lines


def test_a_translation_without_separators_is_scored_by_alignment():
    """`swapped`'s scoring for a model without separators (test_analysis.py runs the command),
    on translations whose X1 is known: the references with their separators removed (X1 intact
    in both orders: drop 0), then with X1's last word lost once it stands at the end (the drop
    that loss makes, found without a separator)."""
    refs = join_lines(read_lines(MULTI30K / "val.de")[:60], 2, "<sep>")
    plain = [line.replace(" <sep> ", " ") for line in refs]
    swapped_plain = [swapped.swap_first_to_end(line).replace(" <sep> ", " ") for line in refs]
    scores = swapped.first_sentence_scores(plain, swapped_plain, refs)
    assert not scores["applicable"] and scores["wrong_separators"] == 1 and "drop" not in scores
    assert scores["aligned"] == pytest.approx({"original": 100, "swapped": 100, "drop": 0})
    first_refs = [line.split(" <sep> ")[0] for line in refs]
    shortened = [" ".join(r.split()[:-1]) for r in first_refs]
    lost = [" ".join(line.split()[:-1]) for line in swapped_plain]
    expected = corpus_bleu(shortened, first_refs).score
    assert expected < 95
    scores = swapped.first_sentence_scores(plain, lost, refs)
    assert scores["aligned"]["swapped"] == pytest.approx(expected)
    assert scores["aligned"]["drop"] == pytest.approx(100 - expected)


def test_alignment_of_correct_separators_is_their_split():
    """A hypothesis whose separators are right aligns to exactly its separator split: the
    references themselves, and with a word of every sentence replaced."""
    refs = join_lines(read_lines(MULTI30K / "val.de")[:40], 4, "<sep>")
    changed = [" <sep> ".join(" ".join(["Xyz", *sentence.split()[1:]]) for sentence in line.split(" <sep> "))
               for line in refs]
    for hyps in (refs, changed):
        for hyp, ref in zip(hyps, refs):
            by_separators = [" ".join(units(sentence)) for sentence in hyp.split(" <sep> ")]
            assert segment(hyp.replace(" <sep> ", " "), ref.split(" <sep> ")) == by_separators


def test_japanese_alignment_cuts_unsegmented_text_at_sentences():
    """Japanese has no spaces between words: the alignment works on ja-mecab's tokens (a
    whitespace split would give one 'word' per line, nothing to cut)."""
    refs = ["犬が公園を走っている。<sep>猫は窓のそばで寝ている。".replace("<sep>", " <sep> ")]
    hyp = "犬が公園で走る。猫が窓の近くで寝ている。"
    assert len(hyp.split()) == 1
    assert "".join(segment(hyp, refs[0].split(" <sep> "), "ja-mecab")[0].split()) == "犬が公園で走る。"
    # the references look Japanese: X1 found with ja-mecab without being told the language
    first = swapped.aligned_first_sentences([hyp.replace("。", "。 <sep> ", 1)], refs, last=False)
    assert "".join(first[0].split()) == "犬が公園で走る。"
    last = swapped.aligned_first_sentences(["猫が窓の近くで寝ている。犬が公園で走る。"], refs, last=True)
    assert "".join(last[0].split()) == "犬が公園で走る。"
