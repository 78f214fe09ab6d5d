"""Japanese phrase chunker for perSPE: `onmt-posenc chunk-ja TARGET PHRASES`.

The method of Oka et al. (2022, section 4): MeCab morphological analysis, a
regular expression over the part-of-speech sequence, chunked with nltk's
RegexpParser. MeCab runs with the UniDic dictionary of the `unidic-lite` PyPI
package (nothing is downloaded at run time).

Input: the target side as the model reads it, one sentence per line, tokens
separated by spaces: words of an already segmented corpus (small_parallel_enja)
or subwords. Subword markers (SentencePiece "▁", OpenNMT Tokenizer "￭", BPE's
trailing "@@") are not text: they are dropped, the tokens of a line are joined
without spaces, and MeCab analyses that string. So the chunks do not depend on
the given segmentation, and each token joins the phrase of its first character
(a token that is only a marker joins the phrase of the next token).

Output: one line per input line, one phrase index per token, counting from 0 in
token order ("0 0 1 1 1 2"): the `path_tgt_phrases` file of the `tgt_phrases`
transform (onmt_posenc.data.transforms.phrase_boundaries).

The paper does not print its expression. Ours builds bunsetsu-like phrases: an
optional prefix or opening bracket, a content word (or a run of nouns), then
the function words that follow it. Part-of-speech tags (UniDic's first two
levels) are first mapped to short names:

    NOUN 名詞   PRON 代名詞   ADJN 形状詞   VERB 動詞   ADJ 形容詞
    DEP  動詞/形容詞 that can only follow another word (非自立可能: いる, する, ない)
    ADV 副詞   ADNOM 連体詞   CONJ 接続詞   INTJ 感動詞   PREF 接頭辞   SUFF 接尾辞
    AUX 助動詞   CPART 接続助詞 (て, が...)   NPART 準体助詞 (の, ん)   PART other 助詞
    OPEN 括弧開   CLOSE 括弧閉   PUNCT other 補助記号   SYM anything else (記号, 空白...)

and GRAMMAR below is applied in order (a later rule chunks only what earlier
rules left). After a content word come auxiliaries, dependent words and
suffixes, particles (an auxiliary may follow particles: "何時 まで です か"),
and punctuation; a dependent verb continues the phrase only right after a
conjunctive or nominalizing particle ("食べ て いる" is one phrase, "先生 に |
なる" two). A morpheme that no rule takes (a function word no rule could
attach) joins the phrase before it, or opens the line's first phrase.
"""
import bisect
import os
import sys

from onmt_posenc.core.text import check_not_an_input, read_lines, write_lines

# The phrase files' version: raise it with every change that changes a phrase file. The runner
# keys a made phrase file on it beside its target's hash, so a file of another version is made
# again (2: an empty line gets "0", eb9b114). Read without MeCab, which only making a file imports.
CHUNKER_VERSION = 2

_TAIL = r"(<AUX|DEP|SUFF>|<PART|CPART|NPART>+<AUX>|<CPART|NPART><DEP>)*<PART|CPART|NPART>*<CLOSE|PUNCT>*"
GRAMMAR = rf"""
PHRASE:
    {{<PREF|OPEN>*<NOUN|PRON|ADJN|SYM><NOUN|PRON|ADJN|SYM|SUFF>*{_TAIL}}}
    {{<PREF|OPEN>*<VERB|ADJ|DEP>{_TAIL}}}
    {{<PREF|OPEN>*<ADV|ADNOM|CONJ|INTJ><PART|CPART|NPART>*<CLOSE|PUNCT>*}}
"""

_POS = {
    "名詞": "NOUN",
    "代名詞": "PRON",
    "形状詞": "ADJN",
    "動詞": "VERB",
    "形容詞": "ADJ",
    "副詞": "ADV",
    "連体詞": "ADNOM",
    "接続詞": "CONJ",
    "感動詞": "INTJ",
    "接頭辞": "PREF",
    "接尾辞": "SUFF",
    "助動詞": "AUX",
    "助詞": "PART",
    "補助記号": "PUNCT",
}
_POS_DETAIL = {
    ("動詞", "非自立可能"): "DEP",
    ("形容詞", "非自立可能"): "DEP",
    ("助詞", "接続助詞"): "CPART",
    ("助詞", "準体助詞"): "NPART",
    ("補助記号", "括弧開"): "OPEN",
    ("補助記号", "括弧閉"): "CLOSE",
}

SUBWORD_MARKERS = ("▁", "￭")
BPE_CONTINUATION = "@@"


def tag(features):
    """Short tag of a morpheme from MeCab's UniDic feature string."""
    pos = features.split(",", 2)
    detail = (pos[0], pos[1] if len(pos) > 1 else "*")
    return _POS_DETAIL.get(detail) or _POS.get(pos[0], "SYM")


def surface(token):
    """A token's text without subword markers."""
    if token.endswith(BPE_CONTINUATION):
        token = token[: -len(BPE_CONTINUATION)]
    for marker in SUBWORD_MARKERS:
        token = token.replace(marker, "")
    return token


def dependencies():
    """MeCab, nltk and the dictionary: imported to chunk, or to show chunk-ja's arguments (so that
    the command line names a missing one), never to read CHUNKER_VERSION."""
    import MeCab
    import nltk
    import unidic_lite

    return MeCab, nltk, unidic_lite


class JapaneseChunker:
    def __init__(self):
        MeCab, nltk, unidic_lite = dependencies()
        # Explicit dictionary and rc file: no dependence on a system mecabrc.
        dicdir = unidic_lite.DICDIR
        self.tagger = MeCab.Tagger(f'-r "{os.path.join(dicdir, "mecabrc")}" -d "{dicdir}"')
        self.parser = nltk.RegexpParser(GRAMMAR)
        self.ends, self.chunk_type = (MeCab.MECAB_BOS_NODE, MeCab.MECAB_EOS_NODE), nltk.Tree

    def morphemes(self, text):
        """[(start, end, tag)] character spans of MeCab's morphemes of `text`."""
        spans, cursor = [], 0
        node = self.tagger.parseToNode(text)
        while node is not None:
            if node.stat not in self.ends:
                start = text.find(node.surface, cursor)  # MeCab skips white space
                if start < 0:
                    raise ValueError(f"MeCab returned {node.surface!r}, which is not in {text!r}")
                cursor = start + len(node.surface)
                spans.append((start, cursor, tag(node.feature)))
            node = node.next
        return spans

    def phrases(self, text):
        """[(start, end)] character spans of the phrases of `text`, in order."""
        morphemes = self.morphemes(text)
        if not morphemes:
            return []
        tree = self.parser.parse([(i, t) for i, (_, _, t) in enumerate(morphemes)])
        spans = []
        for chunk in tree:
            if isinstance(chunk, self.chunk_type):
                first, last = chunk.leaves()[0][0], chunk.leaves()[-1][0]
                spans.append((morphemes[first][0], morphemes[last][1]))
            elif spans:  # a left-over morpheme joins the phrase before it
                spans[-1] = (spans[-1][0], morphemes[chunk[0]][1])
            else:
                spans.append(morphemes[chunk[0]][:2])
        return spans

    def token_phrases(self, tokens):
        """One phrase index per token, from 0, in token order."""
        surfaces = [surface(token) for token in tokens]
        text = "".join(surfaces)
        # A character belongs to the last phrase starting at or before it (so
        # characters MeCab skipped as white space join the phrase before them).
        starts = [start for start, _ in self.phrases(text)]
        ids, offset = [], 0
        for piece in surfaces:
            # A marker-only token joins the phrase of the next character.
            first = min(offset, len(text) - 1)
            ids.append(max(bisect.bisect_right(starts, first) - 1, 0))
            offset += len(piece)
        # Phrases whose characters start no token vanish: renumber 0, 1, 2...
        renumbered, previous = [], None
        for phrase in ids:
            renumbered.append(0 if previous is None else renumbered[-1] + (phrase != previous))
            previous = phrase
        return renumbered


def add_arguments(parser):
    dependencies()
    parser.add_argument("target", help="target text as the model reads it (words or subwords, space-separated)")
    parser.add_argument("output", help="where to write the phrase indices (the path_tgt_phrases file)")


def chunk_file(target, output):
    """The phrase indices of every line of `target` into `output`; returns
    (lines, tokens, phrases)."""
    # Read first: a line that is not UTF-8 is named before any output is written.
    lines = read_lines(target)
    chunker = JapaneseChunker()
    # an empty line is one empty token to OpenNMT-py's reader (core.text.opennmt_tokens): one phrase
    phrases = [chunker.token_phrases(tokens) if tokens else [0] for tokens in map(str.split, lines)]
    write_lines(output, [" ".join(map(str, ids)) for ids in phrases])
    return len(phrases), sum(len(ids) for ids in phrases), sum(ids[-1] + 1 for ids in phrases if ids)


def main(args):
    check_not_an_input(args.output, [args.target])  # the indices would replace the text
    n_lines, n_tokens, n_phrases = chunk_file(args.target, args.output)
    per_phrase = n_tokens / n_phrases if n_phrases else 0.0
    print(
        f"{args.output}: {n_lines} lines, {n_tokens} tokens, {n_phrases} phrases "
        f"({per_phrase:.2f} tokens per phrase)",
        file=sys.stderr,
    )
