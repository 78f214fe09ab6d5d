"""The tests' commands forked from a Python that has imported torch already.

Most of a small command's time is the interpreter importing torch (about 2 s of 2.5 for
`onmt_train -h` on 2 cores), and the tests run some hundreds of them. So each pytest process
keeps server processes, started like a command (this file run by the venv's Python, in the
command's environment), that have done nothing but import torch. For each command a server
forks a child, which takes the command's arguments, environment, folder and output
files and runs the console script's own file as `python SCRIPT ARGS...` would run it, then
ends as the interpreter ends (threads joined, atexit handlers, exit status). The command is
still its own process with the real script, the real OpenNMT-py and the .pth hook, with fresh
random states and its output read through pipes to their end; what it does not do again is
import torch. Two things show the difference: `ps` (/proc/PID/cmdline) names the server, not
the command, and Python's hash seed is the server's.

Only console scripts of this venv and this venv's Python given a script file by its full path
(`python /path/tools/X.py ARGS...`, run alike) are forked, each from the server started in its
own values of every variable read as an interpreter starts, torch is imported or the .pth hook
runs (PYTHON*, TORCH*, OMP*, TRITON*, ONMT_POSENC, ...): one server per such environment, so
that this is all the difference. Others (bash, python -c, python -m) start fresh, and so does
every command with ONMT_POSENC_TESTS_FRESH_PROCESSES=1 (the same tests pass either way).
"""
import contextlib
import json
import locale
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# Variables an interpreter, torch or the .pth hook (ONMT_POSENC) reads as it starts: a command whose values differ
# from the server's is not forked.
READ_AT_START = ("ONMT_POSENC", "PYTHON", "PYTORCH", "TORCH", "OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS_", "TRITON",
                 "CUDA", "LD_", "MALLOC_", "LC_", "LANG", "TZ")
FRESH = os.environ.get("ONMT_POSENC_TESTS_FRESH_PROCESSES") == "1"


def read_at_start(env):
    return tuple(sorted((key, value) for key, value in env.items() if key.startswith(READ_AT_START)))


_servers = {}  # read_at_start(env): its Servers, from the first command with that environment on
_choosing = threading.Lock()


def run(args, cwd, env, timeout):
    """subprocess.run(args, cwd=cwd, env=env, timeout=timeout, capture_output=True, text=True)'s
    result, `forked` where the command is `forkable`."""
    if FRESH or not forkable(args):
        return subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout)
    return forked(args, cwd, env, timeout)


def forked(args, cwd, env, timeout):
    """The same result, forked from a free server of the command's start-up environment (a second
    command at the same time gets a second server)."""
    with _choosing:
        servers = _servers.setdefault(read_at_start(env), [])
        servers[:] = [server for server in servers if server.process.poll() is None]
        server = next((server for server in servers if server.busy.acquire(blocking=False)), None)
        if server is None:
            server = Server(env)
            server.busy.acquire()
            servers.append(server)
    try:
        return server.run(args, script_argv(args), cwd, env, timeout)
    finally:
        server.busy.release()


def forkable(args):
    return script_argv(args) is not None


def script_argv(args):
    """The command as `python SCRIPT ARGS...` would run it, SCRIPT ARGS...: for a console script of
    this venv (its first line runs this Python), or this Python given a script file by its full
    path; None for any other command."""
    args = [str(a) for a in args]
    if args[0] == sys.executable:
        given = Path(args[1]) if len(args) > 1 else None
        return args[1:] if given is not None and given.is_absolute() and given.is_file() else None
    script = Path(args[0])
    if (script.parent == Path(sys.executable).parent and script.is_file()
            and script.read_bytes().startswith(f"#!{sys.executable}\n".encode())):
        return args
    return None


def close_all():
    for servers in _servers.values():
        for server in servers:
            server.close()
    _servers.clear()


class Server:
    """A Python that has imported torch, in the environment `env`, forking the commands."""

    def __init__(self, env):
        self.busy = threading.Lock()
        self.process = subprocess.Popen([sys.executable, __file__], env=env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, bufsize=1)

    def run(self, args, argv, cwd, env, timeout):
        """subprocess.run(args, capture_output=True, text=True, ...)'s result, from a child forked to
        run `argv` (`script_argv(args)`). Its output comes through named pipes, read to their end as
        subprocess reads its pipes: a process the command leaves behind holding them is waited
        for, as it would be."""
        with tempfile.TemporaryDirectory() as folder:
            pipes = [Path(folder) / "stdout", Path(folder) / "stderr"]
            for pipe in pipes:
                os.mkfifo(pipe)
            # opened before the request, so that the server's opening them to write does not wait
            readers = [os.open(pipe, os.O_RDONLY | os.O_NONBLOCK) for pipe in pipes]
            request = {"argv": argv, "cwd": str(cwd or os.getcwd()), "env": env,
                       "stdout": str(pipes[0]), "stderr": str(pipes[1])}
            self.process.stdin.write(json.dumps(request) + "\n")
            pid = int(self.reply("the command's process id"))
            # the child holds the pipes' write ends now (or has closed them): read to their end
            outputs, status = [[] for _ in readers], []
            threads = [threading.Thread(target=read_to_end, args=(fd, output), daemon=True)
                       for fd, output in zip(readers, outputs)]
            threads.append(threading.Thread(target=self.reply_into, args=(status, "the exit status"), daemon=True))
            try:
                for thread in threads:
                    thread.start()
                deadline = time.monotonic() + timeout
                for thread in threads:
                    thread.join(max(0.0, deadline - time.monotonic()))
                if any(thread.is_alive() for thread in threads):  # as subprocess.run: kill it, then raise
                    raise subprocess.TimeoutExpired(args, timeout, *map(text, outputs))
            except BaseException:  # a timeout, or the test stopped: the command does not outlive it
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                threads[-1].join(5)
                raise
            if isinstance(status[0], Exception):
                raise status[0]
            return subprocess.CompletedProcess(args, int(status[0]), *map(text, outputs))

    def reply_into(self, replies, what):
        """`reply` in a thread: the line, or the error that stood for it."""
        try:
            replies.append(self.reply(what))
        except RuntimeError as error:
            replies.append(error)

    def reply(self, what):
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the server forking the tests' commands ended (status {self.process.wait()}) "
                               f"before it sent {what}")
        return line

    def close(self):
        self.process.stdin.close()
        self.process.wait()


def read_to_end(fd, chunks):
    with os.fdopen(fd, "rb") as pipe:
        os.set_blocking(fd, True)
        chunks.extend(iter(lambda: pipe.read1(65536), b""))


def text(chunks):
    """Bytes as subprocess's text mode decodes them."""
    decoded = b"".join(chunks).decode(locale.getpreferredencoding(False))
    return decoded.replace("\r\n", "\n").replace("\r", "\n")


def serve():
    """The server: import torch, then fork a child per request line; reply its pid, then its
    exit status (negative: killed by that signal, as subprocess reports it)."""
    import torch  # noqa: F401  the point of the server

    requests, replies = os.fdopen(os.dup(0)), os.fdopen(os.dup(1), "w", buffering=1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    for line in requests:
        request = json.loads(line)
        outputs = [os.open(request[name], os.O_WRONLY) for name in ("stdout", "stderr")]
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            requests.close()
            replies.close()
            run_script(request, outputs)
        for fd in outputs:
            os.close(fd)
        replies.write(f"{pid}\n")
        _, status = os.waitpid(pid, 0)
        replies.write(f"{os.waitstatus_to_exitcode(status)}\n")


def run_script(request, outputs):
    """In the child: become the command, run its script as the __main__ module, end as the
    interpreter ends (threads joined, atexit handlers, the module's globals cleared, so that
    their finalizers run; KeyboardInterrupt kills it with SIGINT)."""
    import atexit
    import builtins
    import importlib.machinery
    import types

    for fd, output in zip((1, 2), outputs):
        os.dup2(output, fd)
        os.close(output)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    time.tzset()
    reseed()
    script = request["argv"][0]
    sys.argv = list(request["argv"])
    sys.orig_argv = [sys.executable, *sys.argv]
    sys.path[0] = os.path.dirname(script)
    if "multiprocessing.process" in sys.modules:  # the folder it started in, where spawn resolves paths
        sys.modules["multiprocessing.process"].ORIGINAL_DIR = os.getcwd()
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=script, __builtins__=builtins, __cached__=None,
                         __loader__=importlib.machinery.SourceFileLoader("__main__", script))
    sys.modules["__main__"] = main
    interrupted = False
    try:
        with open(script, "rb") as source:
            exec(compile(source.read(), script, "exec"), main.__dict__)
        code = 0
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            code = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException as error:  # noqa: BLE001  printed as the interpreter prints it: from the script on
        frames = error.__traceback__
        while frames is not None and frames.tb_frame.f_code.co_filename != script:
            frames = frames.tb_next
        sys.excepthook(type(error), error.with_traceback(frames), frames)
        code, interrupted = 1, isinstance(error, KeyboardInterrupt)
    threading._shutdown()
    atexit._run_exitfuncs()
    for name in list(main.__dict__):
        main.__dict__[name] = None
    sys.stdout.flush()
    sys.stderr.flush()
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code & 0xFF)


def reseed():
    """A fresh process's random states: torch's and numpy's global generators draw their seeds
    at start-up (Python's `random` is reseeded at fork already). Its hash seed stays the server's."""
    import torch

    torch.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()


if __name__ == "__main__":
    serve()
