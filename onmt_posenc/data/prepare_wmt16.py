"""WMT16 En-De as in the SHAPE paper (the data of Ott et al. 2018, "Scaling NMT").

Two steps, so that everything after the download runs (and is tested) offline:

    onmt-posenc prepare-wmt16 download data/wmt16_raw          # needs internet
    onmt-posenc prepare-wmt16 build data/wmt16_raw data/wmt16_en_de

`download` writes the raw layout that `build` reads: train.{en,de} (Europarl v7,
Common Crawl and News Commentary v11, in that order, the corpora of Google's
wmt16_en_de.sh, whose output Ott et al. used) and newstest{2010..2016}.{en,de}
(sacreBLEU's test sets wmt10..wmt16, the sets behind the paper's BLEU
signature; wmt14 is the official 2,737-sentence newstest2014).

`build` follows wmt16_en_de.sh with pyonmttok in place of the Moses tokenizer
and subword-nmt: it tokenizes (conservative mode, with joiner marks so that
translations detokenize exactly), drops training pairs as clean-corpus-n.perl
does with 1 80 (empty, longer than 80 tokens, or length ratio above 9), learns a
joint BPE (32k merges) on both sides of the training data and applies it.
It writes, in the output directory:

    VANILLA       train.bpe.{en,de}              training pairs
                  valid.bpe.{en,de}              dev: newstest2010-2013
                  newstest{Y}.bpe.{en,de}        each year, 2010-2016, to translate
                  newstest{Y}.de                 raw references, to score
    EXTRAPOLATE   the VANILLA files; recipes/extrapolate.yaml filters the training pairs
    INTERPOLATE   train: the VANILLA files, joined by the concat_pairs transform
                  valid.interp.bpe.{en,de}       dev, 10 sentences per line (per year)
                  newstest{Y}.interp.bpe.en      to translate
                  newstest{Y}.interp.de          raw references joined the same way, to score
                  bpe.codes                      the joint BPE model
"""
import os
import shutil
import tarfile
import tempfile
import urllib.request
from pathlib import Path

from onmt_posenc.core.arguments import positive_int
from onmt_posenc.core.scoring import DEV_YEARS, YEARS
from onmt_posenc.core.joining import DEFAULT_N, DEFAULT_SEP, join_lines
from onmt_posenc.core.text import read_lines, write_lines
from onmt_posenc.core.text import scan_text
from onmt_posenc.core.tokenization import learn_joint_bpe, tokenizer
from onmt_posenc.data.upstream import PrepareError

LANGS = ("en", "de")
BPE_MERGES = 32000
# clean-corpus-n.perl 1 80 (and its default ratio 9), as in Google's wmt16_en_de.sh
MIN_TOKENS, MAX_TOKENS, MAX_RATIO = 1, 80, 9

TRAIN_CORPORA = (
    ("http://www.statmt.org/europarl/v7/de-en.tgz", "europarl-v7.de-en"),
    ("http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz", "commoncrawl.de-en"),
    ("http://data.statmt.org/wmt16/translation-task/training-parallel-nc-v11.tgz", "news-commentary-v11.de-en"),
)


# ---------------------------------------------------------------- download (needs internet)


def fetch(url, folder):
    """Download url into folder once; returns the local path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / url.rsplit("/", 1)[1]
    if not path.exists():
        print(f"downloading {url}", flush=True)
        partial = path.with_name(path.name + ".part")
        urllib.request.urlretrieve(url, partial)
        partial.rename(path)
    return path


def write_training_text(archives, raw_dir):
    """Concatenate each archive's `{stem}.en` / `{stem}.de` members into raw_dir/train.{en,de}."""
    for lang in LANGS:
        with open(raw_dir / f"train.{lang}", "wb") as out:
            for archive, stem in archives:
                with tarfile.open(archive) as tar:
                    members = [m for m in tar.getmembers() if m.name.endswith(f"{stem}.{lang}")]
                    if len(members) != 1:
                        raise PrepareError(f"{archive}: expected one member *{stem}.{lang}, found {len(members)}")
                    source, last = tar.extractfile(members[0]), b"\n"
                    while chunk := source.read(1 << 20):
                        out.write(chunk)
                        last = chunk[-1:]
                # A file without a final newline would glue its last line to the next corpus's first.
                if last != b"\n":
                    out.write(b"\n")


def write_test_sets(raw_dir):
    from sacrebleu.utils import get_reference_files, get_source_file

    for year in YEARS:
        test_set = f"wmt{year % 100}"
        shutil.copyfile(get_source_file(test_set, "en-de"), raw_dir / f"newstest{year}.en")
        shutil.copyfile(get_reference_files(test_set, "en-de")[0], raw_dir / f"newstest{year}.de")


def download(raw_dir):
    raw_dir = Path(raw_dir)
    archives = [(fetch(url, raw_dir / "archives"), stem) for url, stem in TRAIN_CORPORA]
    write_training_text(archives, raw_dir)
    write_test_sets(raw_dir)
    print(f"raw WMT16 En-De in {raw_dir}; next: onmt-posenc prepare-wmt16 build {raw_dir} OUT_DIR")


# ---------------------------------------------------------------- build (offline)


def count_lines(path):
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def check_raw(raw_dir):
    """Every raw file exists, is UTF-8 and not empty (the tokenizers would fail on the
    training files, or drop the bytes of a test file without a word), and each pair of
    files has the same number of lines."""
    if not raw_dir.is_dir():
        raise PrepareError(f"{raw_dir} is not a folder (run `onmt-posenc prepare-wmt16 download {raw_dir}` first)")
    pairs = [("train", raw_dir / "train.en", raw_dir / "train.de")]
    pairs += [(f"newstest{y}", raw_dir / f"newstest{y}.en", raw_dir / f"newstest{y}.de") for y in YEARS]
    missing = [str(path) for _, en, de in pairs for path in (en, de) if not path.is_file()]
    if missing:
        raise PrepareError("missing raw files (run `onmt-posenc prepare-wmt16 download` first):\n  "
                           + "\n  ".join(missing))
    for _, en, de in pairs:
        counts = []
        for path in (en, de):
            lines, bad_line, reason = scan_text(path)
            if bad_line is not None:
                raise PrepareError(f"{path}:{bad_line}: not UTF-8 text ({reason})")
            if lines == 0:
                raise PrepareError(f"{path} is empty")
            counts.append(lines)
        if counts[0] != counts[1]:
            raise PrepareError(f"{en} has {counts[0]} lines but {de} has {counts[1]}")


def keep_pair(n_en, n_de):
    return (MIN_TOKENS <= n_en <= MAX_TOKENS and MIN_TOKENS <= n_de <= MAX_TOKENS
            and n_en <= MAX_RATIO * n_de and n_de <= MAX_RATIO * n_en)


def clean_training_pairs(raw_dir, work_dir, threads):
    """Raw training pairs kept by the clean-corpus-n rule, measured in (pre-BPE) tokens."""
    plain = tokenizer()
    for lang in LANGS:
        raw, tokenized = raw_dir / f"train.{lang}", work_dir / f"train.tok.{lang}"
        plain.tokenize_file(str(raw), str(tokenized), num_threads=threads)
        if count_lines(tokenized) != count_lines(raw):
            raise PrepareError(f"tokenizing {raw} changed its number of lines")
    kept = total = 0
    with open(raw_dir / "train.en", encoding="utf-8", newline="\n") as raw_en, \
            open(raw_dir / "train.de", encoding="utf-8", newline="\n") as raw_de, \
            open(work_dir / "train.tok.en", encoding="utf-8", newline="\n") as tok_en, \
            open(work_dir / "train.tok.de", encoding="utf-8", newline="\n") as tok_de, \
            open(work_dir / "train.clean.en", "w", encoding="utf-8", newline="\n") as out_en, \
            open(work_dir / "train.clean.de", "w", encoding="utf-8", newline="\n") as out_de:
        for total, (en, de, t_en, t_de) in enumerate(zip(raw_en, raw_de, tok_en, tok_de), 1):
            if keep_pair(len(t_en.split()), len(t_de.split())):
                out_en.write(en.rstrip("\n") + "\n")
                out_de.write(de.rstrip("\n") + "\n")
                kept += 1
    print(f"cleaning kept {kept} of {total} training pairs", flush=True)


def build(raw_dir, out_dir, merges=BPE_MERGES, threads=None):
    raw_dir, out_dir = Path(raw_dir), Path(out_dir)
    threads = threads or os.cpu_count() or 1
    check_raw(raw_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    with tempfile.TemporaryDirectory(dir=out_dir) as work:
        work = Path(work)
        clean_training_pairs(raw_dir, work, threads)
        print(f"learning joint BPE ({merges} merges)", flush=True)
        bpe = learn_joint_bpe([work / f"train.clean.{lang}" for lang in LANGS], merges, out_dir / "bpe.codes")
        for lang in LANGS:
            bpe.tokenize_file(str(work / f"train.clean.{lang}"), str(out_dir / f"train.bpe.{lang}"),
                              num_threads=threads)

    for year in YEARS:
        for lang in LANGS:
            bpe.tokenize_file(str(raw_dir / f"newstest{year}.{lang}"), str(out_dir / f"newstest{year}.bpe.{lang}"),
                              num_threads=threads)
        shutil.copyfile(raw_dir / f"newstest{year}.de", out_dir / f"newstest{year}.de")
        # INTERPOLATE: the paper joins dev and test sets too; per year, so no line joins two years.
        write_lines(out_dir / f"newstest{year}.interp.bpe.en",
                    join_lines(read_lines(out_dir / f"newstest{year}.bpe.en"), DEFAULT_N, DEFAULT_SEP))
        write_lines(out_dir / f"newstest{year}.interp.de",
                    join_lines(read_lines(out_dir / f"newstest{year}.de"), DEFAULT_N, DEFAULT_SEP))

    for lang in LANGS:
        per_year = [read_lines(out_dir / f"newstest{year}.bpe.{lang}") for year in DEV_YEARS]
        write_lines(out_dir / f"valid.bpe.{lang}", [line for lines in per_year for line in lines])
        write_lines(out_dir / f"valid.interp.bpe.{lang}",
                    [line for lines in per_year for line in join_lines(lines, DEFAULT_N, DEFAULT_SEP)])
    print(f"WMT16 En-De (VANILLA, EXTRAPOLATE, INTERPOLATE) written to {out_dir}")


def add_arguments(parser):
    steps = parser.add_subparsers(dest="step", metavar="STEP", required=True)
    get = steps.add_parser("download", help="download the raw corpora and newstest2010-2016 (internet)")
    get.add_argument("raw_dir")
    make = steps.add_parser("build", help="tokenize, clean, learn and apply joint BPE, write all data settings")
    make.add_argument("raw_dir")
    make.add_argument("out_dir")
    make.add_argument("--merges", type=positive_int, default=BPE_MERGES, help="BPE merge operations (default: %(default)s)")
    make.add_argument("--threads", type=positive_int, default=None, help="tokenization threads (default: all cores)")


def main(args):
    if args.step == "download":
        download(args.raw_dir)
    else:
        build(args.raw_dir, args.out_dir, args.merges, args.threads)
    return 0
