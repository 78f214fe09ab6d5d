"""The tests' forked commands (tests/prestarted.py) end as the same commands started fresh:
the same exit status, output and error output, in their own folder and environment."""
import os
import re
import subprocess
import sys

import prestarted
import pytest
from conftest import command, write_yaml


def fresh_and_forked(args, cwd, env=None, timeout=120):
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    assert prestarted.forkable(args)
    fresh = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return fresh, prestarted.forked(args, cwd, env, timeout)


def same_ending(fresh, forked):
    """The same exit status and output, OpenNMT-py's log times aside."""
    def ending(result):
        return result.returncode, *(re.sub(r"^\[[\d\- :,]+ ", "[", text, flags=re.M) for text in (result.stdout, result.stderr))

    assert ending(forked) == ending(fresh)


@pytest.mark.parametrize("args", [
    ["onmt-posenc", "--help"],  # exit 0, on stdout
    ["onmt_train", "-no_such_option"],  # argparse's exit 2, on stderr
    ["onmt-posenc", "report", "missing.yaml"],  # the package's one-line error
    ["onmt_translate", "-model", "missing.pt", "-src", "missing.txt"],  # an error in OpenNMT-py itself
])  # fmt: skip
def test_a_forked_command_ends_as_a_fresh_one(tmp_path, args):
    fresh, forked = fresh_and_forked([command(args[0]), *args[1:]], tmp_path)
    same_ending(fresh, forked)


def test_the_folder_and_the_environment_are_the_commands(tmp_path):
    """A relative config is read from the command's folder; ONMT_POSENC=off, read by the .pth hook
    as the interpreter starts, takes a server of its own (stock OpenNMT-py takes the typo)."""
    write_yaml(tmp_path / "typo.yaml", {"shape_max_shif": 3, "save_data": "run/sample", "src_vocab": "run/v",
                                        "data": {"c": {"path_src": "a", "path_tgt": "b"}}})
    args = [command("onmt_build_vocab"), "-config", "typo.yaml", "-n_sample", "-1"]
    for env in ({}, {"ONMT_POSENC": "off"}):
        fresh, forked = fresh_and_forked(args, tmp_path, env)
        same_ending(fresh, forked)
        assert (f"unknown option 'shape_max_shif' (set in {tmp_path / 'typo.yaml'}:1)" in forked.stderr) == (not env)


def test_a_python_script_forked_runs_as_python_runs_it(tmp_path):
    """`python /full/path/script.py ARGS...`, as the tests run tools/*.py: the script is __main__
    with its own argv, file and folder first on the path, and ends with its own status; `python -c`
    and a script named by a relative path start fresh."""
    script = tmp_path / "tools" / "probe.py"
    script.parent.mkdir()
    script.write_text("import os, sys\n"
                      "print(__name__, __file__, sys.argv, sys.orig_argv, sys.path[0], os.getcwd())\n"
                      "print('to stderr', file=sys.stderr)\n"
                      "if __name__ == '__main__':\n"
                      "    sys.exit(int(sys.argv[1]))\n", encoding="utf-8")
    for status in ("0", "3"):
        fresh, forked = fresh_and_forked([sys.executable, script, status, "--flag"], tmp_path)
        same_ending(fresh, forked)
        assert forked.returncode == int(status) and forked.stdout.startswith(f"__main__ {script} ")
    assert not prestarted.forkable([sys.executable, "-c", "print(1)"])
    assert not prestarted.forkable([sys.executable, "tools/probe.py"])


def test_a_forked_command_past_its_time_is_killed(tmp_path):
    with pytest.raises(subprocess.TimeoutExpired):
        prestarted.forked([command("onmt_train"), "-h"], tmp_path, dict(os.environ), timeout=0.001)
