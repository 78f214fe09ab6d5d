"""Bad values, bad corpora and bad checkpoints stop the real commands in one line that
names the option, file and line at fault, with no traceback (onmt_posenc/hooks/preflight.py,
plugin.py, checkpoints.py)."""
import os
import shutil

import pytest
import torch
from conftest import TOY_ENDE, build_tiny_vocab, command, head, run, tiny_transformer, train_tiny, write_yaml

from onmt_posenc.model import checkpoints


def one_line_error(result, status=None):
    """The command failed with a single line on stderr and printed no traceback."""
    assert result.returncode != 0 if status is None else result.returncode == status, result.stderr[-3000:]
    assert "Traceback" not in result.stdout + result.stderr, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-3000:]
    return lines[0]


def line_of(path, key):
    """The YAML line (1-based) that sets `key`."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith(f"{key}:"):
            return number
    raise AssertionError(f"{key} not in {path}")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """Vocabularies and one tiny model (2 steps) on the toy-ende excerpt, for the whole module."""
    workdir = build_tiny_vocab(tmp_path_factory.mktemp("bad_input"))
    train_tiny(workdir, "model", train_steps=2)
    return workdir


@pytest.fixture(scope="module")
def model(workdir):
    return workdir / "model_step_2.pt"


def config_with(workdir, name, corpus=None, **overrides):
    """tiny_transformer's config, with the training corpus replaced by `corpus` (a dict)."""
    config = tiny_transformer(workdir, train_steps=1, save_model=str(workdir / name), **overrides)
    if corpus is not None:
        config["data"]["corpus_1"] = corpus
    return write_yaml(workdir / f"{name}.yaml", config)


# 2. Bad values in configs and on the command line

@pytest.mark.parametrize("values, key, message", [
    ({"shape_max_shift": -3}, "shape_max_shift", "shape_max_shift must be >= 0, got -3"),
    ({"shape_max_shift": 2, "shape_inference_offset": -1}, "shape_inference_offset",
     "shape_inference_offset must be >= 0, got -1"),
    # OpenNMT-py fails on these at the first update (a ZeroDivisionError)
    ({"valid_steps": 0}, "valid_steps", "valid_steps must be >= 1, got 0"),
    ({"save_checkpoint_steps": -1}, "save_checkpoint_steps", "save_checkpoint_steps must be >= 1, got -1"),
    # OpenNMT-py itself stops these with a bare assert while building, or a garbled message
    ({"heads": 3}, "heads", "heads 3 does not divide hidden_size 64: each head takes hidden_size / heads"),
    # OpenNMT-py took these as unset, built 500 features, and failed in a layer norm
    ({"hidden_size": -64}, "hidden_size", "hidden_size must be >= 1, or -1 for enc_hid_size and dec_hid_size, got -64"),
    ({"word_vec_size": 32}, "word_vec_size",
     "word_vec_size 32 differs from hidden_size 64: a Transformer's embeddings are of its model size"),
    ({"max_relative_positions": 16}, "position_encoding",
     "position_encoding is true with max_relative_positions 16: OpenNMT-py's model takes absolute positions "
     "or positions in its attention, not both (position_encoding false for rotary, ALiBi or relative attention: "
     "`position_encoding: false` in a config, `-position_encoding false` on the command line)"),
])
def test_bad_value_in_the_config_names_its_file_and_line(workdir, values, key, message):
    config = config_with(workdir, "negative", **values)
    line = one_line_error(run([command("onmt_train"), "-config", config], expect_ok=False))
    assert line == f"onmt_train: error: {message} (set in {config}:{line_of(config, key)})"


def test_key_without_a_value_names_its_file_and_line(workdir):
    """OpenNMT-py's config parser drops a key without a value (`valid_steps:`) and uses the
    option's default without a word (`train_steps:` would train for 100,000 updates)."""
    config = config_with(workdir, "no_value", valid_steps=None)
    line = one_line_error(run([command("onmt_train"), "-config", config], expect_ok=False), status=2)
    assert line == (f"onmt_train: error: valid_steps has no value (set in {config}:{line_of(config, 'valid_steps')}): "
                    "give it one, or remove the line to use the default")


def test_negative_value_on_the_command_line_says_so(workdir):
    config = config_with(workdir, "plain")
    result = run([command("onmt_train"), "-config", config, "-shape_max_shift", "-2"], expect_ok=False)
    line = one_line_error(result)
    assert line == "onmt_train: error: shape_max_shift must be >= 0, got -2 (set in the command line)"
    # OpenNMT-py would train without end
    result = run([command("onmt_train"), "-config", config, "-train_steps", "0"], expect_ok=False)
    assert one_line_error(result) == "onmt_train: error: train_steps must be >= 1, got 0 (set in the command line)"


def test_wrong_type_in_the_config_names_its_file_and_line_without_the_usage(workdir):
    config = config_with(workdir, "wrong_type", shape_max_shift="ten")
    line = one_line_error(run([command("onmt_train"), "-config", config], expect_ok=False), status=2)
    assert line == ("onmt_train: error: argument --shape_max_shift/-shape_max_shift: invalid int value: 'ten' "
                    f"(set in {config}:{line_of(config, 'shape_max_shift')})")


@pytest.mark.parametrize("key, value, message", [("concat_n", 0, "must be >= 1, got 0"),
                                                 ("concat_sep", "a b", "must be one token without spaces, got 'a b'")])
def test_concat_pairs_options_out_of_range_name_their_file_and_line(workdir, key, value, message):
    config = config_with(workdir, "concat", **{key: value})
    line = one_line_error(run([command("onmt_train"), "-config", config], expect_ok=False), status=2)
    assert line == f"onmt_train: error: argument --{key}/-{key}: {message} (set in {config}:{line_of(config, key)})"


def test_wrong_type_on_the_command_line_without_the_usage(workdir):
    config = config_with(workdir, "plain")
    result = run([command("onmt_train"), "-config", config, "-shape_inference_offset", "1.5"], expect_ok=False)
    assert one_line_error(result, status=2) == (
        "onmt_train: error: argument --shape_inference_offset/-shape_inference_offset: "
        "invalid int value: '1.5' (set in the command line)")


def test_a_flag_on_the_command_line_means_what_it_says(workdir):
    """`-position_encoding false` used to set the flag (argparse's store_true takes no value and
    OpenNMT-py dropped the `false`): an RPE model then failed, or an ablation kept its positions."""
    config = config_with(workdir, "flag_false")  # position_encoding: true
    run([command("onmt_train"), "-config", config, "-position_encoding", "false", "-max_relative_positions", "4"])
    opt = checkpoints.safe_load(torch.load)(workdir / "flag_false_step_1.pt", map_location="cpu")["opt"]
    assert (opt.position_encoding, opt.max_relative_positions) == (False, 4)
    # the flag alone is true, and so is `true`: the hint of the error says how to turn it off
    for args in (["-position_encoding"], ["-position_encoding", "true"]):
        line = one_line_error(run([command("onmt_train"), "-config", config_with(workdir, "flag_true", position_encoding=False),
                                   *args, "-max_relative_positions", "4"], expect_ok=False))
        assert line.startswith("onmt_train: error: position_encoding is true with max_relative_positions 4: ")
        assert line.endswith("`-position_encoding false` on the command line) (set in the command line)")


@pytest.mark.parametrize("where", ["config", "command line"])
def test_a_bool_option_set_false_is_false(workdir, where):
    """OpenNMT-py's `type=bool` options (the normalize transform's) were bool(text): YAML's
    `penn: false` reached them as 'False', which is true. A checkpoint keeps the parsed options."""
    name = f"bool_{where.replace(' ', '_')}"
    config = config_with(workdir, name, **({"penn": False} if where == "config" else {}))
    run([command("onmt_train"), "-config", config, *(["-penn", "false"] if where == "command line" else [])])
    assert checkpoints.safe_load(torch.load)(workdir / f"{name}_step_1.pt", map_location="cpu")["opt"].penn is False


def test_a_flag_with_another_word_is_refused_naming_the_yaml_form(workdir):
    config = config_with(workdir, "flag_word")
    result = run([command("onmt_train"), "-config", config, "-position_encoding", "flase"], expect_ok=False)
    assert one_line_error(result, status=2) == (
        "onmt_train: error: argument --position_encoding/-position_encoding: expects true or false (or nothing: "
        "true), got 'flase'; in a YAML config: `position_encoding: true` or `position_encoding: false` "
        "(set in the command line)")


# 3. Bad corpora

COMMANDS = [["onmt_build_vocab", "-n_sample", "-1"], ["onmt_train"]]


def corpus_command(args, config):
    return [command(args[0]), "-config", config, *args[1:]]


@pytest.mark.parametrize("args", COMMANDS)
def test_corpus_that_is_not_utf8_names_the_file_and_line(workdir, args):
    lines = (workdir / "train.src").read_bytes().split(b"\n")
    lines[41] += " café".encode("latin-1")  # a Latin-1 file among UTF-8 ones
    bad = workdir / "latin1.src"
    bad.write_bytes(b"\n".join(lines))
    config = config_with(workdir, "latin1", {"path_src": str(bad), "path_tgt": str(workdir / "train.tgt")})
    line = one_line_error(run(corpus_command(args, config), expect_ok=False))
    assert line == (f"{args[0]}: error: corpus 'corpus_1': {bad}:42: "
                    "not UTF-8 text (byte 0xe9: invalid continuation byte)")


@pytest.mark.parametrize("args", COMMANDS)
def test_empty_corpus_is_an_error(workdir, args):
    empty = workdir / "empty.txt"
    empty.write_bytes(b"")
    config = config_with(workdir, "empty", {"path_src": str(empty), "path_tgt": str(empty)})
    line = one_line_error(run(corpus_command(args, config), expect_ok=False))
    assert line == f"{args[0]}: error: corpus 'corpus_1': path_src {empty} is empty"


@pytest.mark.parametrize("transforms", [[], ["concat_pairs"]], ids=["plain", "interpolate"])
@pytest.mark.parametrize("args", COMMANDS)
def test_source_and_target_of_different_lengths_name_both_files_and_counts(workdir, args, transforms):
    src = workdir / "train.src"
    short = head(TOY_ENDE / "tgt-train.txt", workdir / "short.tgt", 1999)
    config = config_with(workdir, "short", {"path_src": str(src), "path_tgt": str(short), "transforms": transforms})
    line = one_line_error(run(corpus_command(args, config), expect_ok=False))
    assert line == (f"{args[0]}: error: corpus 'corpus_1': {src} has 2000 lines but {short} has 1999; "
                    f"{src}:2000 has no partner line")


@pytest.mark.parametrize("args", COMMANDS)
def test_separator_in_a_line_under_interpolate_comes_alone(workdir, args):
    lines = (workdir / "train.src").read_text(encoding="utf-8").split("\n")
    lines[9] += " <sep>"
    bad = workdir / "sep.src"
    bad.write_text("\n".join(lines), encoding="utf-8")
    config = config_with(workdir, "sep", {"path_src": str(bad), "path_tgt": str(workdir / "train.tgt"),
                                          "transforms": ["concat_pairs"]})
    line = one_line_error(run(corpus_command(args, config), expect_ok=False))
    assert line == (f"{args[0]}: error: {bad}:10: the line already contains the concat_pairs separator '<sep>'; "
                    "remove it or choose another concat_sep")


def test_onmt_posenc_interpolate_names_the_line_that_is_not_utf8(workdir):
    bad = workdir / "latin1.test"
    bad.write_bytes("ein Satz\nnoch ein Satz\nStraße\n".encode("latin-1"))
    result = run([command("onmt-posenc"), "interpolate", "join", "-n", "2", bad, workdir / "joined"], expect_ok=False)
    line = one_line_error(result)
    assert line == f"onmt-posenc interpolate: error: {bad}:3: not UTF-8 text (byte 0xdf: invalid continuation byte)"


# 4. Bad checkpoints

@pytest.fixture(scope="module")
def bad_checkpoints(workdir, model):
    """A checkpoint cut short (as by a killed save), a file that is no checkpoint at all, and
    a checkpoint without its vocabulary (the analyses failed on it with a KeyError)."""
    truncated = workdir / "truncated.pt"
    truncated.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    text = workdir / "text.pt"
    shutil.copy(workdir / "train.src", text)
    # unpickled, a text's first byte is an opcode: 'a' (APPEND) failed with an IndexError
    text_a = workdir / "text_a.pt"
    text_a.write_text("a b c\n")
    no_vocab = workdir / "no_vocab.pt"
    checkpoint = checkpoints.safe_load(torch.load)(model, map_location="cpu")
    del checkpoint["vocab"]
    torch.save(checkpoint, no_vocab)
    return {"truncated": truncated, "text": text, "text_a": text_a, "no_vocab": no_vocab}


BAD = ["truncated", "text", "text_a", "no_vocab"]


def assert_not_complete(line, prefix, path):
    assert line.startswith(f"{prefix}{path} is not a complete checkpoint"), line


@pytest.mark.parametrize("kind", BAD)
def test_translate_names_the_bad_model_of_several_and_leaves_no_output(workdir, model, bad_checkpoints, kind):
    bad, output = bad_checkpoints[kind], workdir / f"translated_{kind}.txt"
    for models in ([bad], [model, bad]):
        result = run([command("onmt_translate"), "-model", *models, "-src", workdir / "valid.src",
                      "-output", output], expect_ok=False)
        assert_not_complete(one_line_error(result), "onmt_translate: error: model ", bad)
        assert not output.exists()


class Unsafe:
    def __reduce__(self):
        return (os.getcwd, ())


def test_translate_refuses_an_unsafe_checkpoint_in_one_line(workdir, tmp_path):
    unsafe = tmp_path / "unsafe.pt"
    torch.save({"model": {}, "opt": Unsafe()}, unsafe)
    output = tmp_path / "out.txt"
    result = run([command("onmt_translate"), "-model", unsafe, "-src", workdir / "valid.src", "-output", output],
                 expect_ok=False)
    assert one_line_error(result).startswith(f"onmt_translate: error: Refusing to load {unsafe}: it holds a pickled")
    assert not output.exists()


@pytest.mark.parametrize("kind", BAD)
def test_average_models_names_the_bad_one(workdir, model, bad_checkpoints, kind):
    bad, output = bad_checkpoints[kind], workdir / "averaged.pt"
    result = run([command("onmt_average_models"), "-models", model, bad, "-output", output], expect_ok=False)
    assert_not_complete(one_line_error(result), "onmt_average_models: error: ", bad)
    assert not output.exists()


@pytest.mark.parametrize("kind", BAD)
def test_release_model_names_the_bad_file(workdir, bad_checkpoints, kind):
    bad, output = bad_checkpoints[kind], workdir / "released.pt"
    result = run([command("onmt_release_model"), "-m", bad, "-o", output], expect_ok=False)
    assert_not_complete(one_line_error(result), "onmt_release_model: error: ", bad)
    assert not output.exists()


def test_release_to_ctranslate2_replaces_only_a_previous_export(model, tmp_path):
    """Stock `onmt_release_model --format ctranslate2` deletes its --output folder before
    writing (CTranslate2's force), whatever it holds: a folder of other files, or a file,
    is refused and left as it was; a previous export is replaced."""
    release = [command("onmt_release_model"), "-m", model, "--format", "ctranslate2", "-o"]
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "notes.txt").write_text("keep me")
    assert one_line_error(run([*release, runs], expect_ok=False)) == (
        f"onmt_release_model: error: refusing to export into {runs}: exporting replaces the whole folder, "
        "and it holds notes.txt, not a CTranslate2 model's files; choose a new folder")
    assert [path.name for path in runs.iterdir()] == ["notes.txt"]
    a_file = tmp_path / "model.txt"
    a_file.write_text("keep me")
    assert one_line_error(run([*release, a_file], expect_ok=False)) == (
        f"onmt_release_model: error: cannot export into {a_file}: it is a file, not a folder")
    assert a_file.read_text() == "keep me"
    exported = tmp_path / "exported"
    for _ in range(2):  # the second time over its own first export
        run([*release, exported])
    assert (exported / "model.bin").is_file() and (exported / "config.json").is_file()


@pytest.mark.parametrize("name, args", [("onmt_average_models", ["-models", "{model}", "{model}", "-output"]),
                                        ("onmt_release_model", ["-m", "{model}", "-o"])])
def test_average_and_release_into_a_missing_folder_name_it(workdir, model, name, args):
    output = workdir / "nosuch" / "out.pt"
    result = run([command(name), *[a.format(model=model) for a in args], output], expect_ok=False)
    assert one_line_error(result) == f"{name}: error: cannot write {output}: the folder {output.parent} does not exist"


@pytest.mark.parametrize("kind", BAD)
def test_train_from_a_bad_checkpoint(workdir, bad_checkpoints, kind):
    bad = bad_checkpoints[kind]
    config = config_with(workdir, "resumed")
    result = run([command("onmt_train"), "-config", config, "-train_from", bad], expect_ok=False)
    assert_not_complete(one_line_error(result), "onmt_train: error: train_from ", bad)


def test_translate_on_a_gpu_that_is_not_there(workdir, model):
    if torch.cuda.device_count() > 0:
        pytest.skip("this machine has a GPU")
    output = workdir / "on_gpu.txt"
    result = run([command("onmt_translate"), "-model", model, "-src", workdir / "valid.src", "-output", output,
                  "-gpu", "0"], expect_ok=False)
    assert one_line_error(result) == ("onmt_translate: error: gpu 0 asks for GPU 0, 0 found; "
                                      "on this machine add `-gpu -1` (translate on the CPU)")
    assert not output.exists()


@pytest.mark.parametrize("case", ["missing", "folder"])
@pytest.mark.parametrize("name", ["onmt_average_models", "onmt_release_model"])
def test_a_model_that_is_not_a_file(workdir, model, tmp_path, case, name):
    bad = tmp_path / ("nosuch.pt" if case == "missing" else "folder")
    if case == "folder":
        bad.mkdir()
    output = tmp_path / "out.pt"
    args = ["-models", model, bad, "-output", output] if name == "onmt_average_models" else ["-m", bad, "-o", output]
    line = one_line_error(run([command(name), *args], expect_ok=False))
    assert line == f"{name}: error: {bad} {'does not exist' if case == 'missing' else 'is a directory'}"
    assert not output.exists()


@pytest.mark.parametrize("case, message", [
    ("missing src", "src {src} does not exist"),
    ("empty src", "src {src} is empty: nothing to translate"),
    ("no output folder", "output {output}: the folder {folder} does not exist"),
    ("beam 0", "beam_size must be >= 1, got 0"),
])
def test_translate_checks_its_files_and_beam_before_loading(workdir, model, tmp_path, case, message):
    """Each of these failed after the model loaded, with a traceback (the empty source with an
    UnboundLocalError) and an empty output file left behind."""
    src, output, extra = workdir / "valid.src", tmp_path / "out.txt", []
    if case == "missing src":
        src = tmp_path / "nosuch.src"
    elif case == "empty src":
        src = tmp_path / "empty.src"
        src.write_text("")
    elif case == "no output folder":
        output = tmp_path / "nosuch" / "out.txt"
    else:
        extra = ["-beam_size", "0"]
    result = run([command("onmt_translate"), "-model", model, "-src", src, "-output", output, *extra],
                 expect_ok=False)
    expected = message.format(src=src, output=output, folder=output.parent)
    assert one_line_error(result) == f"onmt_translate: error: {expected}"
    assert not output.exists()


@pytest.mark.parametrize("args, message", [
    (["interpolate", "join", "--sep", "", "{text}", "{out}"], "argument --sep: must be one token without spaces, got ''"),
    (["interpolate", "split", "--sep", "a b", "--source", "{text}", "{text}", "{out}"],
     "argument --sep: must be one token without spaces, got 'a b'"),
    (["evaluate", "--hyp", "{text}", "--ref", "{text}", "--years", "2016-2014"],
     "argument --years: the range 2016-2014 is reversed"),
    (["evaluate", "--hyp", "{text}", "--ref", "{text}", "--years", "abc"],
     "argument --years: expects years like 2010-2016 or 2014,2016, got 'abc'"),
    (["evaluate", "--hyp", "hyp.{{yr}}.txt", "--ref", "{text}"],
     "argument --hyp: 'hyp.{{yr}}.txt' has {{yr}}; only {{year}} may stand in braces"),
    (["evaluate", "--hyp", "{text}", "--ref", "ref.{{year}}{{"],
     "argument --ref: Single '{{' encountered in format string in 'ref.{{year}}{{'; only {{year}} may stand in braces"),
    (["evaluate", "--hyp", "{text}", "--ref", "{text}", "--years", "2014,2015"],
     "argument --years: neither --hyp nor --ref has {{year}} to stand for them"),
    (["evaluate", "--hyp", "hyp.{{year}}", "--ref", "{text}", "--years", "2014"],
     "--hyp has {{year}} but --ref does not: every year would be scored against the one --ref file; "
     "put {{year}} in both"),
    (["chunk-ja", "{latin1}", "{out}"], "{latin1}:2: not UTF-8 text (byte 0xe9: invalid continuation byte)"),
    (["chunk-ja", "{text}", "{text}"], "the output {text} is the input {text}; name another output file"),
])
def test_onmt_posenc_options_and_files_in_one_line(tmp_path, args, message):
    files = {"text": tmp_path / "text.txt", "latin1": tmp_path / "latin1.txt", "out": tmp_path / "out.txt"}
    files["text"].write_text("a b\n")
    files["latin1"].write_bytes("a b\ncaf\xe9 x\n".encode("latin-1"))
    result = run([command("onmt-posenc"), *(arg.format(**files) for arg in args)], expect_ok=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines()[-1].endswith(message.format(**files))
    assert not files["out"].exists()


@pytest.mark.parametrize("name", ["onmt_build_vocab", "onmt_train"])
def test_a_config_that_is_not_yaml_is_named_with_its_line(tmp_path, name):
    config = tmp_path / "broken.yaml"
    config.write_text("save_data: run\ndata: {corpus_1: {path_src: x\n")
    line = one_line_error(run([command(name), "-config", config], expect_ok=False))
    assert line == f"{name}: error: {config}:3: not valid YAML (expected ',' or '}}', but got '<stream end>')"
