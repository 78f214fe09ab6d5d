"""Text files as OpenNMT-py reads them: lines split on '\n' only, UTF-8, named by file
and line when they are not."""
import codecs
import functools
import os

from onmt_posenc.core.errors import UserError


class TextFileError(UserError, ValueError):
    """A text file that cannot be read as lines of UTF-8 (named with its line), or written."""


def read_lines(path):
    """The lines of a text file, split on '\\n' only, as OpenNMT-py reads corpora."""
    try:
        with open(path, encoding="utf-8", newline="\n") as f:
            return [line[:-1] if line.endswith("\n") else line for line in f]
    except UnicodeDecodeError:
        # The decoder names neither the file nor the line: find them (one more read).
        _, line, reason = scan_text(path)
        raise TextFileError(f"{path}:{line}: not UTF-8 text ({reason})") from None


def opennmt_tokens(line):
    """A corpus line as OpenNMT-py's reader splits it: on any whitespace with the
    extension active (`onmt_posenc.hooks.data_pipeline.split_tokens_on_any_whitespace`), and
    a line without tokens as one empty token, as OpenNMT-py reads an empty line."""
    return line.split() or [""]


def write_lines(path, lines):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(line + "\n" for line in lines)


def check_not_an_input(output, inputs):
    """Writing over an input would lose it before it is read whole."""
    for path in inputs:
        if os.path.exists(output) and os.path.exists(path) and os.path.samefile(output, path):
            raise TextFileError(f"the output {output} is the input {path}; name another output file")


# Bytes read at a time: whole lines are decoded together, so a character is never cut.
BLOCK = 1 << 20


def scan_text(path):
    """(lines, first non-UTF-8 line or None, why) of a text file.

    Cost: one read of the whole file in 1 MiB blocks, counting newlines and decoding
    each block in C (about a second per GB), in each command that checks corpora;
    cached per process for an unchanged file (onmt_train checks before and inside
    its training process)."""
    stat = os.stat(path)
    return _scan_text(os.path.abspath(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=None)
def _scan_text(path, size, mtime):
    lines, rest = 0, b""
    with open(path, "rb") as f:
        while True:
            block = f.read(BLOCK)
            data = rest + block
            # all complete lines, or everything at the end of the file
            cut = data.rfind(b"\n") + 1 if block else len(data)
            chunk, rest = data[:cut], data[cut:]
            try:
                codecs.decode(chunk, "utf-8")
            except UnicodeDecodeError as error:
                line = lines + chunk.count(b"\n", 0, error.start) + 1
                return lines, line, f"byte {chunk[error.start]:#04x}: {error.reason}"
            lines += chunk.count(b"\n")
            if not block:
                # the last line without a newline is a line too, as `for line in f` reads it
                return lines + (1 if chunk and not chunk.endswith(b"\n") else 0), None, None
