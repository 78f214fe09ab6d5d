"""The README and docs/ stay true: the README's quick start runs as written, and every
command line, repository path and link shown in README.md and docs/*.md is checked.

What is checked, and what is not:
- the quick start is run, end to end, on committed data (test_readme_quick_start_...);
- `onmt-posenc` command lines are parsed by the command's own argument parser (nothing
  runs); lines shown with `...`, or with no arguments, only need the command to exist;
- stock `onmt_*` command lines: each flag is an option of that command (its --help);
- `python tools/X.py` lines: the script exists and each flag is in its --help;
- `make X`: the target is in the Makefile; `bash FILE`: the file exists;
- repository paths in code (recipes/, tools/, tests/, onmt_posenc/, docs/, .ci/) exist;
- links resolve to files, and `#anchors` to headings of the file linked;
- `from X import Y` in Python blocks imports.
"""
import contextlib
import importlib
import io
import itertools
import re
import shlex
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest
from conftest import MULTI30K, REPO, TOY_ENDE, command, head, run

README = REPO / "README.md"
DOCS = REPO / "docs"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
STOCK = ("onmt_build_vocab", "onmt_train", "onmt_translate", "onmt_average_models", "onmt_release_model")
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
PATH = re.compile(r"(?<![\w./-])((?:recipes|tools|tests|onmt_posenc|docs|\.ci)/[\w./{},-]*)")


def trusted_checkpoint(path):
    """A checkpoint the test just trained, loaded weights-only with OpenNMT-py's one global allowed."""
    import argparse

    import torch

    with torch.serialization.safe_globals([argparse.Namespace]):
        return torch.load(path, map_location="cpu", weights_only=True)


def rel(path):
    return Path(path).relative_to(REPO)


def split_markdown(path):
    """(code blocks [(language, text)], prose lines) of a Markdown file."""
    blocks, prose, block = [], [], None
    for line in path.read_text(encoding="utf-8").splitlines():
        fence = FENCE.match(line)
        if block is None and fence:
            block = (fence.group(2), len(fence.group(1)), [])
        elif block is not None and fence and not fence.group(2):
            blocks.append((block[0], "\n".join(text[block[1]:] for text in block[2])))
            block = None
        elif block is not None:
            block[2].append(line)
        else:
            prose.append(line)
    assert block is None, f"{rel(path)}: a code block is not closed"
    return blocks, prose


def inline_code(prose):
    return [span for line in prose for span in re.findall(r"`([^`]+)`", line)]


def shell_lines(text):
    """The command lines of a shell block: continuations joined, heredoc bodies skipped."""
    lines, pending, heredoc = [], "", None
    for line in text.splitlines():
        if heredoc is not None:
            if line.strip() == heredoc:
                heredoc = None
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        line, pending = pending + line, ""
        found = re.search(r"<<-?\s*'?\"?(\w+)", line)
        if found:
            heredoc = found.group(1)
        lines.append(line)
    return lines


def commands_of(line):
    """The simple commands of a shell line, as token lists (env assignments dropped)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:  # an unbalanced quote in prose: not a command line
        return []
    commands = []
    for is_separator, group in itertools.groupby(tokens, lambda t: t in (";", "&&", "||", "|", "(", ")", "<<",
                                                                         "<", ">", ">>")):
        if not is_separator:
            group = list(group)
            while group and group[0] in ("do", "then", "else", "done", "fi"):
                group = group[1:]
            while group and re.fullmatch(r"[A-Za-z_]\w*=\S*", group[0]):
                group = group[1:]
            if group:
                commands.append(group)
    return commands


def shown_commands():
    """(page, command tokens) of every command line in shell blocks and inline code."""
    found = []
    for page in PAGES:
        blocks, prose = split_markdown(page)
        for language, text in blocks:
            if language in ("sh", "bash", "shell"):
                for line in shell_lines(text):
                    found += [(page, c) for c in commands_of(line)]
        for span in inline_code(prose):
            found += [(page, c) for c in commands_of(span)]
    return [(page, c) for page, c in found if c[0] in STOCK + ("onmt-posenc", "make", "python", "bash")]


def test_pages_are_found_and_hold_commands():
    """Guards the checks below against finding nothing."""
    names = {p.name for p in PAGES}
    assert {"README.md", "methods.md", "experiments.md", "data.md", "analyses.md", "export.md",
            "benchmarks.md", "internals.md"} <= names
    kinds = {c[0] for _, c in shown_commands()}
    assert {"onmt-posenc", "onmt_train", "onmt_build_vocab", "onmt_translate", "make", "python"} <= kinds


# --- the README ------------------------------------------------------------------------------

def test_readme_is_short_with_contents_linking_every_docs_page():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 150
    assert "## Contents" in text
    contents = text.split("## Contents", 1)[1].split("\n## ", 1)[0]
    for page in PAGES[1:]:
        assert f"(docs/{page.name})" in contents, f"docs/{page.name} is not in the README's contents"


def sh_block(path, heading):
    """The one sh block of the section `heading` of a Markdown page."""
    section = path.read_text(encoding="utf-8").split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    shell = re.findall(r"^```sh\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)
    assert len(shell) == 1, f"{path.name}'s section {heading} should hold one sh block"
    return shell[0]


def quick_start_block():
    return sh_block(README, "Quick start")


def run_block(block, folder):
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HOME": str(folder)}
    result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block], cwd=folder, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return result


def test_readme_quick_start_and_the_raw_text_block_run_as_written_on_committed_data(tmp_path):
    """The README's quick start block, byte for byte, with bash in a folder holding the
    user's files: 2,000 toy-ende training pairs and 10 test sentences from tests/data. It
    shows progress and ends in translations that are not empty (what the README says).
    Then docs/methods.md's raw-text block in the same folder, its files now raw Multi30k:
    the vocabulary holds the tokenizer's pieces (joiner marks), and the translations come
    back as plain text. (One test: the raw-text block goes on from the quick start.)"""
    head(TOY_ENDE / "src-train.txt", tmp_path / "train.src", 2000)
    head(TOY_ENDE / "tgt-train.txt", tmp_path / "train.tgt", 2000)
    head(TOY_ENDE / "src-test.txt", tmp_path / "test.src", 10)
    result = run_block(quick_start_block(), tmp_path)
    assert len(re.findall(r"Step \d+/ *400;", result.stderr)) == 10  # a progress line every 40 updates
    hyp = tmp_path / "test.hyp"
    lines = hyp.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 10 and all(line.strip() for line in lines)
    checkpoint = trusted_checkpoint(tmp_path / "run" / "model_step_400.pt")
    assert checkpoint["opt"].shape_max_shift == 40  # the model trained is SHAPE
    assert checkpoint["opt"].src_position_encoding == checkpoint["opt"].tgt_position_encoding == "shape"
    # building the vocabulary again: one line that says how
    again = subprocess.run([str(Path(sys.executable).parent / "onmt_build_vocab"), "-config", "shape.yaml",
                            "-n_sample", "-1"], cwd=tmp_path, capture_output=True, text=True)
    assert again.returncode != 0 and "Traceback" not in again.stderr
    assert again.stderr.strip().splitlines()[-1] == ("onmt_build_vocab: error: run/vocab.src exists already: to write "
                                                     "it again, add -overwrite (or `overwrite: true` in the config)")

    shutil.copy(MULTI30K / "train.en", tmp_path / "train.src")
    shutil.copy(MULTI30K / "train.de", tmp_path / "train.tgt")
    head(MULTI30K / "test_2016_flickr.en", tmp_path / "test.src", 10)
    run_block(sh_block(DOCS / "methods.md", "Raw text"), tmp_path)
    vocab = (tmp_path / "run" / "vocab.src").read_text(encoding="utf-8").split()
    assert "￭." in vocab and "it." not in vocab
    lines = hyp.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 10 and any(line.strip() for line in lines) and not any("￭" in line for line in lines)


# --- command lines ---------------------------------------------------------------------------

def onmt_posenc_parser():
    """`onmt-posenc`'s parser with every command's own arguments (as cli.main builds it per command)."""
    import argparse

    from onmt_posenc import cli

    parser = argparse.ArgumentParser(prog="onmt-posenc")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, (module, _) in cli.COMMANDS.items():
        importlib.import_module(module).add_arguments(commands.add_parser(name))
    return parser


def subcommand_names(parser, tokens):
    """How far `tokens` name existing (sub)commands; raises AssertionError on an unknown one."""
    import argparse

    for token in tokens:
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not actions or token.startswith("-"):
            return
        assert token in actions[0].choices, f"no such command: {token!r} (known: {sorted(actions[0].choices)})"
        parser = actions[0].choices[token]


def test_onmt_posenc_command_lines_parse_with_their_own_parser():
    parser = onmt_posenc_parser()
    checked, failures = 0, []
    for page, tokens in shown_commands():
        if tokens[0] != "onmt-posenc" or len(tokens) < 2 or tokens[1].isupper():
            continue  # `onmt-posenc COMMAND`: a placeholder
        args = tokens[1:]
        try:
            if "..." in args or len(args) == 1:  # shown in part: the command named must exist
                subcommand_names(parser, args[: args.index("...")] if "..." in args else args)
            else:
                errors = io.StringIO()
                try:
                    with contextlib.redirect_stderr(errors):
                        parser.parse_args(args)
                except SystemExit as stop:
                    assert stop.code == 0, errors.getvalue().strip().splitlines()[-1]
        except AssertionError as error:
            failures.append(f"{rel(page)}: {' '.join(tokens)}: {error}")
        checked += 1
    assert not failures, "\n".join(failures)
    assert checked >= 20


@lru_cache(maxsize=None)
def help_text(*argv):
    result = run([*argv, "--help"], cwd=REPO, expect_ok=False, timeout=300)
    assert result.returncode == 0, f"{' '.join(argv)} --help exited {result.returncode}: {result.stderr[-2000:]}"
    return result.stdout


def flags(tokens):
    return [t for t in tokens if t.startswith("-") and not re.fullmatch(r"-\d+", t) and t != "-"]


def has_flag(help_output, flag):
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_output) is not None


def test_stock_command_flags_are_options_of_that_command():
    failures, checked = [], 0
    for page, tokens in shown_commands():
        if tokens[0] not in STOCK:
            continue
        output = help_text(command(tokens[0]))
        failures += [f"{rel(page)}: {' '.join(tokens)}: {tokens[0]} has no option {flag}"
                     for flag in flags(tokens) if not has_flag(output, flag)]
        checked += 1
    assert not failures, "\n".join(failures)
    assert checked >= 10


def test_tool_scripts_exist_and_take_the_flags_shown():
    failures = []
    for page, tokens in shown_commands():
        if tokens[0] != "python":
            continue
        script = REPO / tokens[1]
        if not script.is_file():
            failures.append(f"{rel(page)}: {' '.join(tokens)}: no file {tokens[1]}")
            continue
        output = help_text(sys.executable, str(script))
        failures += [f"{rel(page)}: {' '.join(tokens)}: {tokens[1]} has no option {flag}"
                     for flag in flags(tokens[2:]) if not has_flag(output, flag)]
    assert not failures, "\n".join(failures)


def test_make_targets_and_bash_scripts_exist():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([\w.-]+):", makefile, re.MULTILINE))
    failures = []
    for page, tokens in shown_commands():
        if tokens[0] == "make":
            named = [t for t in tokens[1:] if "=" not in t and t != "..." and not t.startswith("-")]
            failures += [f"{rel(page)}: {' '.join(tokens)}: no target {t}" for t in named if t not in targets]
        elif tokens[0] == "bash" and not (REPO / tokens[1]).is_file():
            failures.append(f"{rel(page)}: {' '.join(tokens)}: no file {tokens[1]}")
    assert not failures, "\n".join(failures)


# --- paths, links, imports -------------------------------------------------------------------

def expand_braces(path):
    """`recipes/{ape,shape}_x.yaml` -> both paths (comma lists only; ranges are left alone)."""
    found = re.search(r"\{([^{}]*,[^{}]*)\}", path)
    if not found:
        return [path]
    return [p for choice in found.group(1).split(",")
            for p in expand_braces(path[:found.start()] + choice + path[found.end():])]


def test_repository_paths_named_in_code_exist():
    failures, checked = [], 0
    for page in PAGES:
        blocks, prose = split_markdown(page)
        texts = [text for language, text in blocks if language != "yaml"] + inline_code(prose)
        for text in texts:
            for match in PATH.findall(text):
                for path in expand_braces(match.rstrip(".,")):
                    if re.search(r"\{\d+\.\.", path) or "*" in path:
                        continue
                    checked += 1
                    if not (REPO / path).exists():
                        failures.append(f"{rel(page)}: {path} does not exist")
    # the internals table names files under onmt_posenc/ without the prefix
    _, prose = split_markdown(REPO / "docs" / "internals.md")
    for line in prose:
        if line.startswith("| `"):
            for name in re.findall(r"`([\w/]+\.py)`", line.split("|")[1]):
                checked += 1
                if not (REPO / "onmt_posenc" / name).is_file():
                    failures.append(f"docs/internals.md: onmt_posenc/{name} does not exist")
    assert not failures, "\n".join(failures)
    assert checked >= 30


def slug(heading):
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(path):
    _, prose = split_markdown(path)
    return {slug(line.lstrip("#")) for line in prose if re.match(r"#{1,6} ", line)}


# The results pages too (rendered from their templates: tests/experiments/test_pages.py)
LINKING_PAGES = PAGES + sorted((REPO / "recipes" / "experiments" / "results").glob("**/README.md"))


def test_links_resolve_to_files_and_headings():
    failures, checked = [], 0
    for page in LINKING_PAGES:
        _, prose = split_markdown(page)
        for target in re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", "\n".join(prose)):
            if re.match(r"\w+:", target):
                continue
            file_part, _, anchor = target.partition("#")
            path = (page.parent / file_part).resolve() if file_part else page
            checked += 1
            if not path.exists():
                failures.append(f"{rel(page)}: link {target}: no such file")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                failures.append(f"{rel(page)}: link {target}: no heading #{anchor} in {rel(path)}")
    assert not failures, "\n".join(failures)
    assert checked >= 40


def test_python_blocks_import_what_exists():
    checked = 0
    for page in PAGES:
        blocks, _ = split_markdown(page)
        for language, text in blocks:
            if language != "python":
                continue
            for module, names in re.findall(r"^from ([\w.]+) import ([\w, ]+)$", text, re.MULTILINE):
                imported = importlib.import_module(module)
                for name in names.split(","):
                    checked += 1
                    assert hasattr(imported, name.strip()), f"{rel(page)}: {module} has no {name.strip()}"
    assert checked >= 1


def test_the_papers_recipe_on_your_corpus_runs_as_written(tmp_path):
    """docs/methods.md's block, byte for byte, from a copy of the repository's recipes, with
    ~/corpus holding 2,000 toy-ende pairs: the recipe's keys stay, the overrides win."""
    shutil.copytree(REPO / "recipes", tmp_path / "recipes")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for part, lines in (("train", 2000), ("val", 100), ("test", 10)):
        for side, name in (("src", "src"), ("tgt", "tgt")):
            head(TOY_ENDE / f"{side}-{part}.txt", corpus / f"{'valid' if part == 'val' else part}.{name}", lines)
    run_block(sh_block(DOCS / "methods.md", "The paper's recipe on your corpus"), tmp_path)
    assert len((corpus / "test.hyp").read_text(encoding="utf-8").splitlines()) == 10
    opt = trusted_checkpoint(corpus / "run" / "model_step_100.pt")["opt"]
    assert (opt.shape_max_shift, opt.label_smoothing, opt.adam_beta2, opt.decay_method) == (500, 0.1, 0.98, "noam")
    assert (opt.enc_layers, opt.hidden_size, opt.world_size, opt.model_dtype) == (2, 64, 1, "fp32")
