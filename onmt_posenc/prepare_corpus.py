"""Small public corpora in the layout `onmt-posenc run --data` and experiment `folder:` read.

    onmt-posenc prepare multi30k data/multi30k                  # downloads (needs internet)
    onmt-posenc prepare multi30k data/multi30k --from DIR       # a local copy: folder or .tar.gz
    onmt-posenc prepare toy-ende data/toy-ende [--from DIR]

The output folder holds OpenNMT-py's quickstart layout:

    src-train.txt tgt-train.txt src-val.txt tgt-val.txt src-test.txt tgt-test.txt

and, for corpora that come as raw text (Multi30k), `ref-val.txt` and
`ref-test.txt`, the raw references that BLEU is computed against. Raw text is
tokenized with pyonmttok (joiner marks, so translations detokenize exactly) and
a joint BPE learned on the training data of both languages (`bpe.codes`).
toy-ende comes tokenized (Moses) and is copied as it is.

`--from` takes a folder or a .tar.gz/.tgz archive holding the corpus's files
(named as upstream names them, in any sub-folder, optionally gzipped), so the
same command works without internet.
"""
import gzip
import shutil
import sys
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from onmt_posenc.arguments import positive_int
from onmt_posenc.interpolate import write_lines
from onmt_posenc.tokenization import learn_joint_bpe

LAYOUT_PARTS = ("train", "val", "test")


@dataclass(frozen=True)
class Corpus:
    files: dict  # (part, side) -> upstream file name; side is "src" or "tgt"
    urls: tuple  # where `prepare` downloads from: single files, or one archive
    tokenize: bool  # raw text: tokenize, learn BPE, keep raw references
    license: str


MULTI30K_RAW = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
CORPORA = {
    "multi30k": Corpus(
        files={("train", "src"): "train.en", ("train", "tgt"): "train.de", ("val", "src"): "val.en",
               ("val", "tgt"): "val.de", ("test", "src"): "test_2016_flickr.en", ("test", "tgt"): "test_2016_flickr.de"},
        urls=tuple(f"{MULTI30K_RAW}/{name}.gz" for name in
                   ("train.en", "train.de", "val.en", "val.de", "test_2016_flickr.en", "test_2016_flickr.de")),
        tokenize=True,
        license="Multi30k (Elliott et al. 2016): research and education use; Flickr30k captions",
    ),
    "toy-ende": Corpus(
        files={(part, side): f"{side}-{part}.txt" for part in LAYOUT_PARTS for side in ("src", "tgt")},
        urls=("https://s3.amazonaws.com/opennmt-trainingdata/toy-ende.tar.gz",),
        tokenize=False,
        license="OpenNMT-py's toy En-De sample of WMT (MIT; WMT text for research use)",
    ),
}
BPE_MERGES = 8000


class PrepareError(RuntimeError):
    pass


def _find(root, name):
    """The file `name` (or `name`.gz) anywhere below `root`."""
    for candidate in (name, name + ".gz"):
        found = sorted(Path(root).rglob(candidate))
        if found:
            return found[0]
    return None


def _read_text(path):
    """The lines of a text file, gzipped or not, split on '\\n' only (as interpolate.read_lines);
    a file that is empty or not UTF-8 is a PrepareError naming it (and the line)."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (EOFError, gzip.BadGzipFile) as error:  # a download cut short, or not gzip at all
        raise PrepareError(f"{path} is not a complete gzip file ({error})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise PrepareError(f"{path}:{line}: not UTF-8 text (byte {data[error.start]:#04x}: {error.reason})") from None
    if not text.strip():
        raise PrepareError(f"{path} is empty")
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def _unpack(source, work):
    """A folder holding the corpus's files: `source` itself, or `source` unpacked into `work`."""
    source = Path(source)
    if source.is_dir():
        return source
    if not source.is_file():
        raise PrepareError(f"--from {source}: no such folder or file")
    try:
        with tarfile.open(source) as archive:
            archive.extractall(work, filter="data")
    except (tarfile.TarError, EOFError, OSError):
        raise PrepareError(f"--from {source}: not a folder nor a readable .tar.gz archive") from None
    return Path(work)


def _download(corpus, work):
    for url in corpus.urls:
        target = Path(work) / url.rsplit("/", 1)[1]
        print(f"downloading {url}", file=sys.stderr, flush=True)
        try:
            with urllib.request.urlopen(url, timeout=60) as response, open(target, "wb") as out:
                shutil.copyfileobj(response, out)
        except OSError as error:
            raise PrepareError(f"cannot download {url}: {error}; without internet, pass a local copy "
                               "with --from FOLDER_OR_ARCHIVE") from None
        if tarfile.is_tarfile(target):
            with tarfile.open(target) as archive:
                archive.extractall(work, filter="data")
    return Path(work)


def prepare(name, out_dir, source=None, merges=BPE_MERGES):
    corpus = CORPORA[name]
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise PrepareError(f"{out_dir} exists and is not a folder")
    with tempfile.TemporaryDirectory() as work:
        root = _unpack(source, work) if source else _download(corpus, work)
        paths = {key: _find(root, file) for key, file in corpus.files.items()}
        missing = [corpus.files[key] for key, path in paths.items() if path is None]
        if missing:
            raise PrepareError(f"{source or 'the download'}: missing {', '.join(missing)}")
        lines = {key: _read_text(path) for key, path in paths.items()}
        for part in LAYOUT_PARTS:
            if len(lines[part, "src"]) != len(lines[part, "tgt"]):
                raise PrepareError(f"{paths[part, 'src']} has {len(lines[part, 'src'])} lines but "
                                   f"{paths[part, 'tgt']} has {len(lines[part, 'tgt'])}")
        out_dir.mkdir(parents=True, exist_ok=True)
        if corpus.tokenize:
            for side in ("src", "tgt"):
                write_lines(Path(work) / f"train.{side}.raw", lines["train", side])
            bpe = learn_joint_bpe([Path(work) / f"train.{side}.raw" for side in ("src", "tgt")], merges,
                                  out_dir / "bpe.codes")
            for part in ("val", "test"):
                write_lines(out_dir / f"ref-{part}.txt", lines[part, "tgt"])
            tokenized = {key: [" ".join(bpe.tokenize(line)[0]) for line in text] for key, text in lines.items()}
        else:
            tokenized = lines
        for (part, side), text in tokenized.items():
            write_lines(out_dir / f"{side}-{part}.txt", text)
    (out_dir / "SOURCE.txt").write_text(f"{name}: {corpus.license}\nfrom: {source or ', '.join(corpus.urls)}\n",
                                        encoding="utf-8")
    print(f"{name} written to {out_dir} "
          f"({len(tokenized['train', 'src'])} training pairs); use it with --data {out_dir} or `folder:`",
          file=sys.stderr)


def add_arguments(parser):
    parser.add_argument("corpus", choices=sorted(CORPORA), help="which corpus")
    parser.add_argument("out_dir", help="folder to write (OpenNMT-py's layout)")
    parser.add_argument("--from", dest="source", metavar="FOLDER_OR_ARCHIVE",
                        help="a local copy instead of the download: a folder or a .tar.gz")
    parser.add_argument("--merges", type=positive_int, default=BPE_MERGES,
                        help="joint BPE merges for raw-text corpora (default: %(default)s)")


def main(args):
    try:
        prepare(args.corpus, args.out_dir, args.source, args.merges)
    except PrepareError as error:
        print(f"onmt-posenc prepare: error: {error}", file=sys.stderr)
        return 2
    return 0
