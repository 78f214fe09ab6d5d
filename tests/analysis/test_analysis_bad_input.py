"""Bad options and files stop the analysis commands in one line that names the option or
the file (and line) at fault, with exit status 2, no traceback and no output, before any
model is loaded (onmt_posenc/analysis). No model is trained here: the model named is a
file that does not exist (`never-loaded.pt`), so a check made after loading would fail
on it instead, or a broken one where the model itself is the fault."""
import argparse
import os
import re

import pytest
import torch
from conftest import TOY_ENDE, command, head, run

from onmt_posenc.core.joining import join_lines
from onmt_posenc.core.text import read_lines, write_lines


@pytest.fixture
def files(tmp_path):
    src = head(TOY_ENDE / "src-test.txt", tmp_path / "test.src", 6)
    tgt = head(TOY_ENDE / "tgt-test.txt", tmp_path / "test.tgt", 6)
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes(b"".join(line.encode() + (" Straße".encode("latin-1") if i == 2 else b"") + b"\n"
                                for i, line in enumerate(read_lines(tgt))))  # line 3 not UTF-8
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    joined = {}
    for name, path in (("joined_src", src), ("joined_tgt", tgt)):
        joined[name] = tmp_path / f"joined.{path.suffix[1:]}"
        write_lines(joined[name], join_lines(read_lines(path), 2, "<sep>"))  # 3 lines of 2 sentences
    uneven = tmp_path / "uneven.tgt"  # line 2 holds its 2 sentences without the separator
    write_lines(uneven, [line.replace(" <sep> ", " ") if i == 1 else line
                         for i, line in enumerate(read_lines(joined["joined_tgt"]))])
    text_model = tmp_path / "text.pt"
    text_model.write_bytes(src.read_bytes())
    full, truncated = tmp_path / "full.pt", tmp_path / "truncated.pt"
    torch.save({"model": {"w": torch.zeros(1000)}, "opt": argparse.Namespace(), "vocab": {}}, full)
    truncated.write_bytes(full.read_bytes()[: full.stat().st_size // 2])  # as by a killed save
    # onmt_translate options files: a misspelt key, a wrong value, a list instead of a mapping
    options = {}
    for name, text in (("misspelt", "beam_sise: 4\n"), ("wrong_value", "beam_size: four\n"), ("not_mapping", "- 4\n")):
        options[name] = tmp_path / f"{name}.yaml"
        options[name].write_text(text, encoding="utf-8")
    return {key: str(path) for key, path in {
        **options,
        "src": src, "tgt": tgt, "short": head(tgt, tmp_path / "short.tgt", 3), "latin1": latin1, "empty": empty,
        **joined, "uneven": uneven, "model": tmp_path / "never-loaded.pt", "text_model": text_model,
        "truncated": truncated, "full": full, "missing": tmp_path / "nosuch" / "out.png",
        "missing_folder": tmp_path / "nosuch", "json": tmp_path / "out.json",
        "docx": tmp_path / "plot.docx", "noext": tmp_path / "plot", "workdir": tmp_path / "swapped",
        "train_tgt": tgt}.items()}


def posenc(name, args, files, **replaced):
    """`onmt-posenc NAME ARGS` with {key} in ARGS filled from `files`, some keys pointing elsewhere."""
    values = {**files, **{key: files[other] for key, other in replaced.items()}}
    # A timeout: --width -5 once looped forever.
    return run([command("onmt-posenc"), name, *[arg.format(**values) for arg in args]], expect_ok=False, timeout=120)


def error_line(result, files):
    """The error line of a command that failed with exit status 2 and no traceback, having written nothing."""
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert result.stdout == ""
    assert not os.path.exists(files["json"])
    return lines[-1]


LENGTH_BUCKETS = ["--src", "{src}", "--ref", "{tgt}", "--hyp", "A={tgt}"]
MODEL_COMMANDS = {
    "shift-invariance": ["--model", "{model}", "--src", "{src}"],
    "token-nll": ["--model-a", "{model}", "--model-b", "{model}", "--src", "{src}", "--tgt", "{tgt}",
                  "--train-tgt", "{train_tgt}"],
    "position-ablation": ["--model", "{model}", "--src", "{src}", "--tgt", "{tgt}"],
    "speed": ["--model", "A={model}", "--src", "{src}", "--tgt", "{tgt}"],
    "swapped": ["--model", "{model}", "--src", "{joined_src}", "--tgt", "{joined_tgt}", "--workdir", "{workdir}"],
}


@pytest.mark.parametrize("name, args, message", [
    ("length-buckets", [*LENGTH_BUCKETS, "--width", "0"], "argument --width: must be >= 1, got 0"),
    ("length-buckets", [*LENGTH_BUCKETS, "--width", "-5"], "argument --width: must be >= 1, got -5"),
    ("length-buckets", [*LENGTH_BUCKETS, "--max-train-length", "-1"],
     "argument --max-train-length: must be >= 1, got -1"),
    ("token-nll", ["--position-width", "0"], "argument --position-width: must be >= 1, got 0"),
    ("token-nll", ["--position-width", "-3"], "argument --position-width: must be >= 1, got -3"),
    ("token-nll", ["--frequency-bins", "0"], "argument --frequency-bins: must be >= 1, got 0"),
    ("token-nll", ["--max-sentences", "-1"], "argument --max-sentences: must be >= 1, got -1"),
    ("speed", ["--batches", "0"], "argument --batches: must be >= 1, got 0"),
    ("speed", ["--rounds", "0"], "argument --rounds: must be >= 1, got 0"),
    ("speed", ["--batch-tokens", "-5"], "argument --batch-tokens: must be >= 1, got -5"),
    ("shift-invariance", ["--max-sentences", "0"], "argument --max-sentences: must be >= 1, got 0"),
    ("shift-invariance", ["--offsets", "-10", "0"], "argument --offsets: must be >= 0, got -10"),
    ("shift-invariance", ["--offsets", "0"], "argument --offsets: needs two or more different offsets, got 0"),
    ("shift-invariance", ["--offsets", "5", "5"], "argument --offsets: needs two or more different offsets, got 5 5"),
    ("position-ablation", ["--max-sentences", "0"], "argument --max-sentences: must be >= 1, got 0"),
])
def test_a_number_out_of_range_is_argparses_error(files, name, args, message):
    base = [] if name == "length-buckets" else MODEL_COMMANDS[name]
    line = error_line(posenc(name, [*base, *args], files), files)
    assert line == f"onmt-posenc {name}: error: {message}"


# Each file check in each command that reads model inputs: (name, {key: other file}, message).
FILE_CASES = [
    (name, replaced, message)
    for name in MODEL_COMMANDS if name != "swapped"
    for replaced, message in [
        ({"src": "latin1"}, "{latin1}:3: not UTF-8 text (byte 0xdf: invalid continuation byte)"),
        ({"src": "empty", "tgt": "empty"}, "{empty} is empty"),
        ({"tgt": "short"}, "{src} has 6 lines but {short} has 3; they must match line by line"),
        ({"model": "text_model"}, "{text_model} is not a complete checkpoint (not a pickle of tensors)"),
        ({"model": "truncated"}, "{truncated} is not a complete checkpoint (..."),
    ]
    if name != "shift-invariance" or "tgt" not in replaced  # it reads a source alone
]

# Command-specific cases: (name, args, message).
OTHER_CASES = [
    ("length-buckets", LENGTH_BUCKETS[:4] + ["--hyp", "A={short}"],
     "{src} has 6 lines but {short} has 3; they must match line by line"),
    ("length-buckets", ["--src", "{empty}", "--ref", "{empty}", "--hyp", "A={empty}"], "{empty} is empty"),
    ("length-buckets", [*LENGTH_BUCKETS, "--hyp", "A={src}"], "--hyp: the label 'A' is given twice ({tgt} and {src})"),
    ("length-buckets", LENGTH_BUCKETS[:4] + ["--hyp", "{tgt}"], "--hyp expects LABEL=FILE, got '{tgt}'"),
    ("length-buckets", [*LENGTH_BUCKETS, "--baseline", "Z"], "--baseline 'Z' is not one of the --hyp labels ['A']"),
    ("length-buckets", [*LENGTH_BUCKETS, "--train-src", "{empty}"], "{empty} is empty"),
    ("length-buckets", [*LENGTH_BUCKETS, "--hyp", "B={latin1}"],
     "{latin1}:3: not UTF-8 text (byte 0xdf: invalid continuation byte)"),
    ("length-buckets", [*LENGTH_BUCKETS, "--plot", "{missing}", "--json", "{json}"],
     "--plot {missing}: the folder {missing_folder} does not exist"),
    # matplotlib refused an unknown format after the work, and wrote '.png' behind a name without one
    ("length-buckets", [*LENGTH_BUCKETS, "--plot", "{docx}"], "--plot {docx}: a .docx file; name the image format..."),
    ("shift-invariance", [*MODEL_COMMANDS["shift-invariance"], "--plot", "{noext}"],
     "--plot {noext}: no extension; name the image format..."),
    ("token-nll", [*MODEL_COMMANDS["token-nll"], "--labels", "X", "X"], "--labels: A and B must differ, got 'X' twice"),
    ("token-nll", [*MODEL_COMMANDS["token-nll"], "--train-tgt", "{empty}"],
     "{empty} is empty: no training frequencies"),
    ("token-nll", [*MODEL_COMMANDS["token-nll"], "--train-tgt", "{latin1}"],
     "{latin1}:3: not UTF-8 text (byte 0xdf: invalid continuation byte)"),
    ("speed", [*MODEL_COMMANDS["speed"], "--model", "A={text_model}"],
     "--model: the label 'A' is given twice ({model} and {text_model})"),
    ("speed", ["--model", "{model}", "--src", "{src}", "--tgt", "{tgt}"],
     "--model expects LABEL=CHECKPOINT, got '{model}'"),
    ("speed", [*MODEL_COMMANDS["speed"], "--baseline", "Z"], "--baseline 'Z' is not one of the --model labels ['A']"),
    ("shift-invariance", [*MODEL_COMMANDS["shift-invariance"], "--plot", "{missing}", "--json", "{json}"],
     "--plot {missing}: the folder {missing_folder} does not exist"),
    ("position-ablation",
     [*MODEL_COMMANDS["position-ablation"], "--sinusoid-plot", "{missing}", "--json", "{json}"],
     "--sinusoid-plot {missing}: the folder {missing_folder} does not exist"),
    ("swapped", ["--model", "{model}", "--src", "{src}", "--tgt", "{tgt}", "--workdir", "{workdir}"],
     "{src} has no line with the separator '<sep>': swapped needs joined (INTERPOLATE) lines, "
     "as `onmt-posenc interpolate join` writes them"),
    ("swapped", [*MODEL_COMMANDS["swapped"], "--tgt", "{tgt}"],
     "{joined_src} has 3 lines but {tgt} has 6; they must match line by line"),
    ("swapped", [*MODEL_COMMANDS["swapped"], "--tgt", "{uneven}"],
     "{uneven}:2: 0 separators where {joined_src}:2 has 1"),
    ("swapped", [*MODEL_COMMANDS["swapped"], "--src", "{empty}"], "{empty} is empty"),
    ("swapped", MODEL_COMMANDS["swapped"], "{model} does not exist"),
    ("swapped", [*MODEL_COMMANDS["swapped"], "--model", "{text_model}"],
     "{text_model} is not a complete checkpoint (not a pickle of tensors)"),
    ("swapped", [*MODEL_COMMANDS["swapped"], "--model", "{truncated}"],
     "{truncated} is not a complete checkpoint (..."),
    ("swapped", [*MODEL_COMMANDS["swapped"], "--model", "{full}", "--translate-config", "{missing}"],
     "--translate-config {missing} does not exist"),
    # onmt_translate would refuse these after the first checks, in a log
    ("swapped", [*MODEL_COMMANDS["swapped"], "--model", "{full}", "--translate-config", "{misspelt}"],
     "--translate-config {misspelt}: beam_sise: unknown option; did you mean 'beam_size'?"),
    ("swapped", [*MODEL_COMMANDS["swapped"], "--model", "{full}", "--translate-config", "{wrong_value}"],
     "--translate-config {wrong_value}: beam_size: invalid int value: 'four'"),
    ("swapped", [*MODEL_COMMANDS["swapped"], "--model", "{full}", "--translate-config", "{not_mapping}"],
     "--translate-config {not_mapping}: a config file must be a YAML mapping"),
    ("swapped", [*MODEL_COMMANDS["swapped"], "--model", "{full}", "--workdir", "{src}"],
     "--workdir {src} is not a folder"),
    ("swapped", [*MODEL_COMMANDS["swapped"], "--model", "{full}", "--workdir", "{src}/sub"],
     "--workdir {src}/sub is not a folder ({src} is a file)"),
    ("swapped", [*MODEL_COMMANDS["swapped"], "--model", "{full}", "--json", "{missing}"],
     "--json {missing}: the folder {missing_folder} does not exist"),
]


def check_message(line, name, message, files):
    expected = f"onmt-posenc {name}: error: " + message.format(**files)
    if expected.endswith("..."):  # torch's own reason, or a list, follows
        assert line.startswith(expected[:-3]), line
    else:
        assert line == expected


@pytest.mark.parametrize("name, replaced, message", FILE_CASES,
                         ids=[f"{name}-{'-'.join(replaced.values())}" for name, replaced, _ in FILE_CASES])
def test_bad_files_are_named_before_the_model_loads(files, name, replaced, message):
    line = error_line(posenc(name, MODEL_COMMANDS[name], files, **replaced), files)
    check_message(line, name, message, files)


@pytest.mark.parametrize("name, args, message", OTHER_CASES,
                         ids=[name + "-" + re.sub(r"[^-\w]", "", message.split()[0])
                              for name, _, message in OTHER_CASES])
def test_bad_labels_files_and_outputs_are_named(files, tmp_path, name, args, message):
    line = error_line(posenc(name, args, files), files)
    check_message(line, name, message, files)
    assert not (tmp_path / "swapped" / "original.hyp").exists()  # nothing translated


def test_swapped_reports_a_failed_translation_on_stderr(files, tmp_path):
    """A checkpoint with a model, options and a vocabulary passes the check; onmt_translate
    then fails on it (empty ones). Not a usage error (exit 1), but still one line, on stderr."""
    fake = tmp_path / "fake.pt"
    torch.save({"model": {}, "opt": argparse.Namespace(), "vocab": {}}, fake)
    result = posenc("swapped", [*MODEL_COMMANDS["swapped"], "--model", str(fake)], files)
    assert result.returncode == 1 and result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.startswith("onmt-posenc swapped: error: onmt_translate exited with status")
    assert len(result.stderr.strip().splitlines()) == 1
