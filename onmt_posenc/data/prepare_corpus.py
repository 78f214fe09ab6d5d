"""Public corpora in the layout `onmt-posenc run --data` and experiment `folder:` read.

    onmt-posenc prepare multi30k data/multi30k                  # downloads (needs internet)
    onmt-posenc prepare multi30k data/multi30k --from DIR       # a local copy: folder or .tar.gz
    onmt-posenc prepare toy-ende data/toy-ende [--from DIR]
    onmt-posenc prepare kftt data/kftt [--from kftt-data-1.0.tar.gz] [--order spread] [--first N] [--vocab-size 8000]
    onmt-posenc prepare small-enja data/small-enja [--from small_parallel_enja] [--vocab-size 8000]

The output folder holds OpenNMT-py's quickstart layout:

    src-train.txt tgt-train.txt src-val.txt tgt-val.txt src-test.txt tgt-test.txt

and, for corpora that come as raw text (Multi30k, KFTT), `ref-val.txt` and
`ref-test.txt`, the raw references that BLEU is computed against, and
`languages.txt` ("en ja"), which tells the runner how to score the target
(Japanese with sacreBLEU's ja-mecab tokenizer). Raw text is split into subwords
with pyonmttok's joiner marks, so translations detokenize back to plain text:
Multi30k with a joint BPE learned on the training data of both languages
(`bpe.codes`); KFTT, whose Japanese has no spaces, with a joint SentencePiece
model (`sentencepiece.model`; the perSPE paper's segmentation, a 16k vocabulary
by default). small-enja (small_parallel_enja: 50,000 short Tanaka-corpus pairs,
lower-cased tokenized English, Japanese split into KyTea words) also with a joint
SentencePiece model, of 8,000 pieces by default; its Japanese has the KyTea spaces
removed first, so that the model learns, and BLEU scores, the raw Japanese.
toy-ende comes tokenized (Moses) and is copied as it is. Where the
corpus has document ids (`kyoto-*.docid` beside KFTT's files), they are kept,
one per line of each part: `docid-train.txt`, `docid-val.txt`, `docid-test.txt`.
A pair with an empty side is dropped (KFTT's train has two), and said.

`--from` takes a folder or a .tar.gz/.tgz archive holding the corpus's files
(named as upstream names them, in any sub-folder, optionally gzipped; a file
given in numbered parts, `train.en.000`, `train.en.001`..., is read as their
concatenation), so the same command works without internet. `--first N` keeps the first N training
pairs, and the subwords are learned on them. KFTT's training pairs come in
article order, and its articles grouped by category (all of Buddhism, then all
of buildings...): its first N pairs cover the first categories only, while dev
and test cover all 15. `--order spread` (with document ids) reorders whole
articles so that every prefix of the training file spreads evenly over the
corpus (articles sorted by the fractional part of i times the golden ratio, a
low-discrepancy order), and `--first N`, or an experiment's `train_pairs: N`,
then takes N pairs from every part of it.
"""
import math
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from onmt_posenc.core.arguments import positive_int
from onmt_posenc.core.text import write_lines
from onmt_posenc.core.tokenization import learn_joint_bpe, learn_joint_sentencepiece
from onmt_posenc.data.upstream import PrepareError, download, find_file, read_text, unpack

LAYOUT_PARTS = ("train", "val", "test")
# "SRC TGT" languages of a prepared folder: the target chooses the BLEU tokenizer (scoring.bleu_tokenizer)
LANGUAGES_FILE = "languages.txt"
# White space but " ": SentencePiece (identity normalization) keeps it inside a piece, which
# OpenNMT-py's whitespace split cuts off and loses (a full-width space in KFTT, a no-break space);
# the subwords see a space there (BPE's tokenizer splits there already)
OTHER_SPACES = re.compile(r"[^\S ]")
# The files a data folder's reader uses where they are there (experiments.data_folder)
READ_WHERE_THERE = [*(f"{kind}-{part}.txt" for kind in ("ref", "docid") for part in LAYOUT_PARTS), LANGUAGES_FILE]


@dataclass(frozen=True)
class Corpus:
    files: dict  # (part, side) -> upstream file name; side is "src" or "tgt"
    urls: tuple  # where `prepare` downloads from: single files, or one archive
    subwords: str  # raw text split by "bpe" or "sentencepiece"; None: tokenized already, copied
    license: str
    languages: tuple = None  # (source, target), written to languages.txt
    docids: dict = field(default_factory=dict)  # part -> upstream document-id file, one id per line
    vocab_size: int = None  # the SentencePiece vocabulary's default size
    # The upstream target is split into words by spaces (Japanese by KyTea): they are removed
    # (spaces_removed), so that subwords are learned on, and BLEU scores, the raw text.
    target_split_into_words: bool = False
    # Upstream has pairs with an empty side (KFTT's train has two): dropped and said. Where it
    # has none, an empty line is a damaged copy: refused, naming the file and line.
    drops_empty_pairs: bool = True


MULTI30K_RAW = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
SMALL_ENJA_RAW = "https://raw.githubusercontent.com/odashi/small_parallel_enja/master"
# KFTT's and small_parallel_enja's names of the layout's parts
DEV_TEST_PARTS = {"train": "train", "val": "dev", "test": "test"}
# The perSPE paper's shared SentencePiece vocabulary (Oka et al. 2022, section 5)
SENTENCEPIECE_VOCAB = 16000
CORPORA = {
    "multi30k": Corpus(
        files={("train", "src"): "train.en", ("train", "tgt"): "train.de", ("val", "src"): "val.en",
               ("val", "tgt"): "val.de", ("test", "src"): "test_2016_flickr.en", ("test", "tgt"): "test_2016_flickr.de"},
        urls=tuple(f"{MULTI30K_RAW}/{name}.gz" for name in
                   ("train.en", "train.de", "val.en", "val.de", "test_2016_flickr.en", "test_2016_flickr.de")),
        subwords="bpe",
        license="Multi30k (Elliott et al. 2016): research and education use; Flickr30k captions",
        languages=("en", "de"),
    ),
    "toy-ende": Corpus(
        files={(part, side): f"{side}-{part}.txt" for part in LAYOUT_PARTS for side in ("src", "tgt")},
        urls=("https://s3.amazonaws.com/opennmt-trainingdata/toy-ende.tar.gz",),
        subwords=None,
        license="OpenNMT-py's toy En-De sample of WMT (MIT; WMT text for research use)",
    ),
    # The Kyoto Free Translation Task (Neubig 2011), En->Ja: Wikipedia articles on Kyoto,
    # dev for validation, test for test (its tune set is for tuning SMT weights)
    "kftt": Corpus(
        files={(part, side): f"kyoto-{name}.{lang}" for part, name in DEV_TEST_PARTS.items()
               for side, lang in (("src", "en"), ("tgt", "ja"))},
        urls=("http://www.phontron.com/kftt/download/kftt-data-1.0.tar.gz",),
        subwords="sentencepiece",
        license="KFTT (Neubig 2011) from NICT's Japanese-English Bilingual Corpus of Wikipedia's Kyoto "
                "Articles: CC BY-SA 3.0",
        languages=("en", "ja"),
        docids={part: f"kyoto-{name}.docid" for part, name in DEV_TEST_PARTS.items()},
        vocab_size=SENTENCEPIECE_VOCAB,
    ),
    # small_parallel_enja (Neubig's students' test set of the Tanaka corpus, 4 to 16 words a
    # sentence): 50,000 / 500 / 500 pairs; train also comes as train.{en,ja}.000 to .004
    "small-enja": Corpus(
        files={(part, side): f"{name}.{lang}" for part, name in DEV_TEST_PARTS.items()
               for side, lang in (("src", "en"), ("tgt", "ja"))},
        urls=tuple(f"{SMALL_ENJA_RAW}/{name}.{lang}" for name in DEV_TEST_PARTS.values() for lang in ("en", "ja")),
        subwords="sentencepiece",
        license="small_parallel_enja (github.com/odashi/small_parallel_enja): the Tanaka Corpus, public domain",
        languages=("en", "ja"),
        # 8,000 pieces: a model of 2+2 layers translates after 2,000 updates (docs/data.md)
        vocab_size=8000,
        target_split_into_words=True,
        drops_empty_pairs=False,
    ),
}
BPE_MERGES = 8000


def spaces_removed(line):
    """A line of words split by spaces (KyTea's Japanese) as raw text: the spaces go, but
    for those between two ASCII letters or digits ("New York", "CD 2")."""
    return re.sub(r"(?<![A-Za-z0-9]) +| +(?![A-Za-z0-9])", "", line)


def _refuse_earlier_files(out_dir, writes):
    """A data folder's reader (experiments.data_folder) uses references, document ids and
    languages.txt wherever they are there: those of an earlier preparation into the same
    folder that this one does not write would be read with the new corpus."""
    left = [name for name in READ_WHERE_THERE if name not in writes and (Path(out_dir) / name).is_file()]
    if left:
        raise PrepareError(f"{out_dir} holds {', '.join(left)} from an earlier preparation, which this corpus does "
                           "not write and an experiment would read with it; prepare into a new folder, or remove "
                           "them first")


def _refuse_empty_lines(lines, place, part):
    """`place(key, index)`: the file and line of a line (a file in parts: the part's)."""
    for key in [key for key in lines if key[0] == part]:
        empty = next((i for i, line in enumerate(lines[key]) if not line.strip()), None)
        if empty is not None:
            name, line = place(key, empty)
            raise PrepareError(f"{name}:{line}: an empty line (this corpus has none: is the copy damaged?)")


def _drop_empty_pairs(lines, place, part):
    """The lines of `part` (each side and its document ids) without the pairs that have an
    empty side: nothing to learn from or to score. Each drop is said, naming file and lines
    (a file in parts: each line as the part's)."""
    sides = [key for key in lines if key[0] == part]
    empty = sorted({i for key in sides for i, line in enumerate(lines[key]) if not line.strip()})
    if not empty:
        return
    for key in sides:
        by_file = {}
        for name, line in (place(key, i) for i in empty if not lines[key][i].strip()):
            by_file.setdefault(name, []).append(line)
        for name, at in by_file.items():
            numbers = ", ".join(map(str, at[:5])) + (f" and {len(at) - 5} more" if len(at) > 5 else "")
            print(f"{name}: {len(at)} empty line(s) ({numbers}): the pair(s) dropped", file=sys.stderr)
    dropped = set(empty)
    for key in sides:
        lines[key] = [line for i, line in enumerate(lines[key]) if i not in dropped]


def _check_same_lengths(lines, shown, part):
    sides = [key for key in lines if key[0] == part]
    first = sides[0]
    for key in sides[1:]:
        if len(lines[key]) != len(lines[first]):
            raise PrepareError(f"{shown[first]} has {len(lines[first])} lines but {shown[key]} has {len(lines[key])}")


def spread_order(documents):
    """The line numbers of a part in `spread` order: whole documents (runs of equal ids in
    `documents`, one per line), the i-th of them placed by frac(i * golden ratio), so that
    the documents of any prefix are spread evenly over the original order."""
    starts = [i for i, doc in enumerate(documents) if i == 0 or doc != documents[i - 1]] + [len(documents)]
    golden = (math.sqrt(5) - 1) / 2
    order = sorted(range(len(starts) - 1), key=lambda i: (i * golden) % 1)
    return [line for i in order for line in range(starts[i], starts[i + 1])]


def _subword_tokenizer(corpus, lines, out_dir, work, merges, vocab_size):
    """The joint subword tokenizer of a raw-text corpus, learned on its training pairs."""
    files = []
    for side in ("src", "tgt"):
        files.append(Path(work) / f"train.{side}.raw")
        write_lines(files[-1], lines["train", side])
    if corpus.subwords == "bpe":
        return learn_joint_bpe(files, merges, out_dir / "bpe.codes")
    print(f"learning a joint SentencePiece model of {vocab_size} pieces", file=sys.stderr, flush=True)
    try:
        return learn_joint_sentencepiece(files, vocab_size, out_dir / "sentencepiece.model")
    except RuntimeError as error:  # SentencePiece's own check, e.g. more pieces than the text holds
        reason = str(error).rsplit("] ", 1)[-1]
        raise PrepareError(f"SentencePiece cannot learn --vocab-size {vocab_size} from "
                           f"{len(lines['train', 'src'])} training pairs: {reason}") from None


def prepare(name, out_dir, source=None, merges=None, vocab_size=None, first=None, order="corpus"):
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise PrepareError(f"{out_dir} exists and is not a folder")
    created = not out_dir.exists()
    try:
        _prepare(name, out_dir, source, merges, vocab_size, first, order)
    except PrepareError:
        if created and out_dir.is_dir():  # a folder this command made holds no corpus: gone again
            shutil.rmtree(out_dir)
        raise


def _prepare(name, out_dir, source, merges, vocab_size, first, order):
    corpus = CORPORA[name]
    for option, value, needs in (("--merges", merges, "bpe"), ("--vocab-size", vocab_size, "sentencepiece")):
        if value is not None and corpus.subwords != needs:
            raise PrepareError(f"{option} applies to a corpus split by {needs}; {name} is "
                               f"{'split by ' + corpus.subwords if corpus.subwords else 'copied as it comes'}")
    with tempfile.TemporaryDirectory() as work:
        root = unpack(source, work) if source else download(corpus.urls, work)
        wanted = {**corpus.files, **{(part, "docid"): file for part, file in corpus.docids.items()}}
        paths = {key: find_file(root, file) for key, file in wanted.items()}
        missing = [corpus.files[key] for key in corpus.files if paths[key] is None]
        if missing:
            raise PrepareError(f"{source or 'the download'}: missing {', '.join(missing)}")
        # document ids are kept where the copy has them (the official KFTT release has none)
        paths = {key: path for key, path in paths.items() if path is not None}
        _refuse_earlier_files(out_dir, {f"{side}-{part}.txt" for part, side in paths}
                              | ({f"ref-{part}.txt" for part in ("val", "test")} if corpus.subwords else set())
                              | ({LANGUAGES_FILE} if corpus.languages else set()))
        # a file in numbered parts: read part by part, named by the first (the part with a bad
        # line says so itself)
        parts = {key: path if isinstance(path, list) else [path] for key, path in paths.items()}
        # unpacked or downloaded: named inside the archive, not the temporary folder
        named = {path: f"{source or corpus.urls[0]}:{path.relative_to(work)}" if root == Path(work) else str(path)
                 for files in parts.values() for path in files}
        shown = {key: named[files[0]] + (f" (and {len(files) - 1} more parts)" if len(files) > 1 else "")
                 for key, files in parts.items()}
        texts = {key: [read_text(path, named[path]) for path in files] for key, files in parts.items()}
        lines = {key: [line for text in part_texts for line in text] for key, part_texts in texts.items()}

        def place(key, index):
            """(file, line) of line `index` (0-based) of `key`'s parts read as one."""
            for path, text in zip(parts[key], texts[key]):
                if index < len(text):
                    return named[path], index + 1
                index -= len(text)
        if corpus.target_split_into_words:
            for part in LAYOUT_PARTS:
                lines[part, "tgt"] = [spaces_removed(line) for line in lines[part, "tgt"]]
        for part in LAYOUT_PARTS:
            _check_same_lengths(lines, shown, part)
            if not corpus.drops_empty_pairs:
                _refuse_empty_lines(lines, place, part)
            elif corpus.subwords:
                _drop_empty_pairs(lines, place, part)
        if order == "spread":
            if ("train", "docid") not in lines:
                raise PrepareError(f"--order spread reorders whole documents, but {source or 'the download'} has no "
                                   f"{corpus.docids.get('train', 'document ids')} for the training part")
            lines_in_order = spread_order(lines["train", "docid"])
            for key in [key for key in lines if key[0] == "train"]:
                lines[key] = [lines[key][i] for i in lines_in_order]
        if first is not None:
            for key in [key for key in lines if key[0] == "train"]:
                lines[key] = lines[key][:first]
        out_dir.mkdir(parents=True, exist_ok=True)
        if corpus.subwords:
            for part in ("val", "test"):  # raw, as the translations are scored
                write_lines(out_dir / f"ref-{part}.txt", lines[part, "tgt"])
            text_of = {key: [OTHER_SPACES.sub(" ", line) for line in text] if key[1] != "docid" else text
                       for key, text in lines.items()}
            subwords = _subword_tokenizer(corpus, text_of, out_dir, work, merges or BPE_MERGES,
                                          vocab_size or corpus.vocab_size)
            print("splitting the text into subwords", file=sys.stderr, flush=True)
            written = {key: [" ".join(subwords.tokenize(line)[0]) for line in text] if key[1] != "docid" else text
                       for key, text in text_of.items()}
        else:
            written = lines
        for (part, side), text in written.items():
            write_lines(out_dir / f"{side}-{part}.txt", text)
    if corpus.languages:
        (out_dir / LANGUAGES_FILE).write_text(" ".join(corpus.languages) + "\n", encoding="utf-8")
    kept = (f"the first {first} in {order} order: " if first is not None else
            "in spread order: " if order == "spread" else "")
    (out_dir / "SOURCE.txt").write_text(f"{name}: {corpus.license}\nfrom: {source or ', '.join(corpus.urls)}\n"
                                        f"training pairs: {kept}{len(written['train', 'src'])}\n", encoding="utf-8")
    documents = " with document ids" if ("train", "docid") in written else ""
    print(f"{name} written to {out_dir} ({len(written['train', 'src'])} training pairs{documents}); "
          f"use it with --data {out_dir} or `folder:`", file=sys.stderr)


def add_arguments(parser):
    parser.add_argument("corpus", choices=sorted(CORPORA), help="which corpus")
    parser.add_argument("out_dir", help="folder to write (OpenNMT-py's layout)")
    parser.add_argument("--from", dest="source", metavar="FOLDER_OR_ARCHIVE",
                        help="a local copy instead of the download: a folder or a .tar.gz")
    parser.add_argument("--first", type=positive_int, metavar="N",
                        help="keep the first N training pairs only (the subwords are learned on them)")
    parser.add_argument("--order", choices=("corpus", "spread"), default="corpus",
                        help="order of the training pairs: the corpus's ('corpus', the default), or whole documents "
                             "spread so that every prefix covers the whole corpus ('spread'; needs document ids)")
    parser.add_argument("--merges", type=positive_int,
                        help=f"joint BPE merges, for the corpora split by BPE (multi30k; default {BPE_MERGES})")
    parser.add_argument("--vocab-size", type=positive_int,
                        help="joint SentencePiece vocabulary, for the corpora split by SentencePiece (kftt: default "
                             f"{SENTENCEPIECE_VOCAB}, the perSPE paper's; small-enja: default "
                             f"{CORPORA['small-enja'].vocab_size})")


def main(args):
    prepare(args.corpus, args.out_dir, args.source, args.merges, args.vocab_size, args.first, args.order)
    return 0
