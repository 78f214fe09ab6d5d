"""A corpus's upstream copy for `onmt-posenc prepare`: downloaded or unpacked into a work
folder, its files found there (whole, gzipped, or in numbered parts) and read as text. A copy
that is missing, cut short or damaged is a PrepareError naming the file (and the line)."""
import gzip
import shutil
import sys
import tarfile
import urllib.request
from pathlib import Path

from onmt_posenc.core.errors import UserError


class PrepareError(UserError, RuntimeError):
    """A corpus that cannot be prepared: a file missing, damaged or of the wrong kind (also
    WMT16's, prepare_wmt16)."""


def find_file(root, name):
    """The file `name` (or `name`.gz) anywhere below `root`; else its numbered parts
    `name`.000, `name`.001... (a list, in order; a gap is a PrepareError); else None."""
    for candidate in (name, name + ".gz"):
        found = sorted(Path(root).rglob(candidate))
        if found:
            return found[0]
    parts = sorted(Path(root).rglob(f"{name}.[0-9][0-9][0-9]"), key=lambda path: path.name)
    for number, part in enumerate(parts):
        if int(part.suffix[1:]) != number:
            raise PrepareError(f"{part.parent / f'{name}.{number:03d}'} is missing: {name} is given in "
                               f"parts {', '.join(p.suffix[1:] for p in parts)}")
    return parts or None


def read_text(path, shown=None):
    """The lines of a text file, gzipped or not, split on '\\n' only (as core.text.read_lines);
    a file that is empty or not UTF-8 is a PrepareError naming it as `shown` (and the line)."""
    shown = shown or path
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (EOFError, gzip.BadGzipFile) as error:  # a download cut short, or not gzip at all
        raise PrepareError(f"{shown} is not a complete gzip file ({error})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise PrepareError(f"{shown}:{line}: not UTF-8 text (byte {data[error.start]:#04x}: {error.reason})") from None
    if not text.strip():
        raise PrepareError(f"{shown} is empty")
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def unpack(source, work):
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


def download(urls, work):
    """The files at `urls` downloaded into `work`, an archive among them unpacked there."""
    for url in urls:
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
