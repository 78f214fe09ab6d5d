"""One runner at a time on a run: a runner holds an exclusive `flock` on the run folder's
runner.lock while it works on the run, and writes into it who holds it ("pid N on HOST").
The operating system releases the lock when the process ends, killed or not, so a runner that
died leaves no stale lock: the next one finishes or resumes its run. A second runner on the
same folder (another terminal, a job requeued while the first still runs) skips the runs
another one holds, and the report names them. A data setting's files are made under the same
kind of lock, by one runner while the others wait."""
import contextlib
import fcntl
import os
import socket
import time
from pathlib import Path

LOCK = "runner.lock"
# A report looking whether a run is held takes the lock shared for an instant: a runner that
# finds it taken tries again this often, this far apart, before it takes the run for held.
TRIES, PAUSE = 5, 0.1


def holder_text():
    return f"pid {os.getpid()} on {socket.gethostname()}"


class RunLock:
    """The lock of one run folder, taken with `acquire` and given back with `release`."""

    def __init__(self, directory):
        self.path = Path(directory) / LOCK
        self.file = None

    def acquire(self):
        """Take the lock; None when taken, else who holds it ("pid N on HOST")."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        file = open(self.path, "a+", encoding="utf-8")
        for attempt in range(TRIES):
            try:
                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                time.sleep(PAUSE)
                continue
            file.seek(0)
            file.truncate()
            file.write(holder_text() + "\n")
            file.flush()
            self.file = file
            return None
        file.close()
        return _written_holder(self.path)

    def fileno(self):
        return self.file.fileno()

    def release(self):
        if self.file is not None:
            self.file.close()  # closing the descriptor gives the lock back
            self.file = None


def held_by(directory):
    """Who holds the lock of a run folder now ("pid N on HOST"), or None: looked at by taking it
    shared for an instant, which fails while a runner holds it."""
    path = Path(directory) / LOCK
    try:
        file = open(path, encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):  # never run, or no folder where it goes
        return None
    with file:
        try:
            fcntl.flock(file, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _written_holder(path)
        fcntl.flock(file, fcntl.LOCK_UN)
    return None


@contextlib.contextmanager
def waiting_for(directory):
    """Hold a folder's lock for the block, waiting while another runner holds it (a data
    setting's files, made once for every runner)."""
    path = Path(directory) / LOCK
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        yield


def _written_holder(path):
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        text = ""
    return text or "a runner that has not said who it is yet"
