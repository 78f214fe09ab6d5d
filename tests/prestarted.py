"""The tests' commands forked from a Python that has imported torch already.

Most of a small command's time is the interpreter importing torch (about 2 s of 2.5 for
`onmt_train -h` on 2 cores), and the tests run some hundreds of them. So each pytest process
keeps server processes, started like a command (this file run by the venv's Python, in the
command's environment), that have done nothing but import torch. For each command a server
forks a child, which takes the command's arguments, environment, folder and output
files and runs the console script's own file as `python SCRIPT ARGS...` would run it, then
ends as the interpreter ends (threads joined, atexit handlers, exit status). The command is
still its own process with the real script, the real OpenNMT-py and the .pth hook; what it
does not do again is import torch.

Only console scripts of this venv are forked, each from the server started in its own values
of every variable read as an interpreter starts, torch is imported or the .pth hook runs
(PYTHON*, TORCH*, OMP*, TRITON*, ONMT_POSENC, ...): one server per such environment, so that
this is all the difference. Others (bash, python -c) start fresh, and so does every command
with ONMT_POSENC_TESTS_FRESH_PROCESSES=1 (the same tests pass either way).
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# Variables an interpreter, torch or the .pth hook (ONMT_POSENC) reads as it starts: a command whose values differ
# from the server's is not forked.
READ_AT_START = ("ONMT_POSENC", "PYTHON", "TORCH", "OMP_", "MKL_", "KMP_", "GOMP_", "TRITON", "CUDA", "LD_", "MALLOC_", "LC_", "LANG")
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
        return server.run(args, cwd, env, timeout)
    finally:
        server.busy.release()


def forkable(args):
    """A console script of this venv (its first line runs this Python)."""
    script = Path(args[0])
    return (script.parent == Path(sys.executable).parent and script.is_file()
            and script.read_bytes().startswith(f"#!{sys.executable}\n".encode()))


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

    def run(self, args, cwd, env, timeout):
        """subprocess.run(args, capture_output=True, text=True, ...)'s result, from a forked child."""
        with tempfile.TemporaryDirectory() as folder:
            out, err = Path(folder) / "stdout", Path(folder) / "stderr"
            out.touch()
            err.touch()
            request = {"argv": [str(a) for a in args], "cwd": str(cwd or os.getcwd()), "env": env,
                       "stdout": str(out), "stderr": str(err)}
            self.process.stdin.write(json.dumps(request) + "\n")
            pid = int(self.process.stdout.readline())
            status = []
            reader = threading.Thread(target=lambda: status.append(self.process.stdout.readline()))
            reader.start()
            reader.join(timeout)
            if reader.is_alive():  # as subprocess.run: kill the command, then raise
                os.kill(pid, signal.SIGKILL)
                reader.join()
                raise subprocess.TimeoutExpired(args, timeout, out.read_text(), err.read_text())
            return subprocess.CompletedProcess(args, int(status[0]), out.read_text(), err.read_text())

    def close(self):
        self.process.stdin.close()
        self.process.wait()


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
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            requests.close()
            replies.close()
            run_script(request)
        replies.write(f"{pid}\n")
        _, status = os.waitpid(pid, 0)
        replies.write(f"{os.waitstatus_to_exitcode(status)}\n")


def run_script(request):
    """In the child: become the command, run its script, end as the interpreter would."""
    import atexit
    import runpy

    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        output = os.open(path, os.O_WRONLY | os.O_TRUNC)
        os.dup2(output, fd)
        os.close(output)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    script = request["argv"][0]
    sys.argv = list(request["argv"])
    sys.path[0] = os.path.dirname(script)
    try:
        runpy.run_path(script, run_name="__main__")
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
        code = 1
    threading._shutdown()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code & 0xFF)


if __name__ == "__main__":
    serve()
