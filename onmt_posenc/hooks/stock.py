"""Running the stock OpenNMT-py commands (onmt_build_vocab, onmt_train,
onmt_average_models, onmt_translate) as subprocesses, each with its own log.

They are run exactly as a user would run them, so the extension reaches them
through its start-up hook, not through anything done here.
"""
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from onmt_posenc.core.errors import UserError


class StockCommandError(UserError, RuntimeError):
    """A stock command failed on input that passed the checks: its log says why (exit status 1)."""

    def __init__(self, name, returncode, log_path):
        last = last_error_line(log_path)
        super().__init__(f"{name} exited with status {returncode}" + (f": {last}" if last else "")
                         + f"; see {log_path}")
        self.log_path = log_path


def last_error_line(log_path):
    """The line of a failed command's log that says why: the last one naming an error,
    else the last line; without OpenNMT-py's logging prefix."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            lines = [line.strip() for line in f if line.strip() and not line.startswith("$ ")]
    except OSError:
        return None
    errors = [line for line in lines if re.search(r"(Error|Exception)\b|error:", line)]
    line = (errors or lines or [None])[-1]
    return re.sub(r"^\[[\d\- :,]+ \w+\] ", "", line) if line else None


def command_path(name):
    """The console script `name` beside this Python (the same environment), else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found beside {sys.executable} nor on PATH; is OpenNMT-py installed?")
    return found


def run_logged(name, args, log_path, on_line=None, append=False, keep_open=()):
    """Run `name args...`, its stdout and stderr going to `log_path` (after what it
    holds, with `append`); `on_line` sees each line; `keep_open`: file descriptors the command
    inherits (a lock it holds too, until it ends, should this process die first).

    Raises StockCommandError naming the log when the command fails, and KeyboardInterrupt
    when it was stopped by Ctrl-C or SIGTERM (a scheduler stops the whole job: the command
    may see the signal before this process does, and is then stopped, not failed). If this
    process is interrupted, the child is stopped too.
    """
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    argv = [command_path(name), *map(str, args)]
    # Line-buffered, so that `tail -f` on the log follows the command.
    with open(log_path, "a" if append else "w", encoding="utf-8", buffering=1) as log:
        log.write("$ " + shlex.join(argv) + "\n")  # a path with spaces stays one word (curves reads it)
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   errors="replace", pass_fds=keep_open)
        try:
            for line in process.stdout:
                log.write(line)
                if on_line is not None:
                    on_line(line)
            returncode = process.wait()
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    if returncode in (-signal.SIGINT, -signal.SIGTERM):
        raise KeyboardInterrupt
    if returncode != 0:
        raise StockCommandError(name, returncode, log_path)


def translate(model, src, output, log_path, config=None, keep_open=()):
    """onmt_translate `model` on the file `src` into `output` (options from `config`, a YAML)."""
    args = ["-model", model, "-src", src, "-output", output]
    if config is not None:
        args = ["-config", config, *args]
    run_logged("onmt_translate", args, log_path, keep_open=keep_open)
    return output
