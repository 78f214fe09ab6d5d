"""onmt_train and onmt_build_vocab stop in one line, before any worker starts, when a
config's data, vocabulary or GPUs are not on this machine (onmt_posenc/hooks/preflight.py)."""
import sys

import pytest
import torch
from conftest import REPO, build_tiny_vocab, command, run, tiny_transformer, write_yaml

from onmt_posenc.hooks import preflight


def one_line_error(result):
    """The command failed with a single line on stderr: no traceback, no warnings."""
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-3000:]
    return lines[0]


@pytest.mark.parametrize("args", [["onmt_train"], ["onmt_build_vocab", "-n_sample", "-1"]])
def test_wmt16_recipe_without_its_data_names_the_file_and_the_command_that_makes_it(tmp_path, args):
    """As a new user would: the README's command, run where data/wmt16_en_de does not exist."""
    result = run([command(args[0]), "-config", REPO / "recipes" / "shape.yaml", *args[1:]],
                 cwd=tmp_path, expect_ok=False)
    line = one_line_error(result)
    assert line.startswith(f"{args[0]}: error: corpus 'wmt16': path_src data/wmt16_en_de/train.bpe.en does not exist")
    assert ("make it with: onmt-posenc prepare-wmt16 download data/wmt16_raw"
            " && onmt-posenc prepare-wmt16 build data/wmt16_raw data/wmt16_en_de") in line
    assert "Starting process" not in result.stdout + result.stderr


def test_eight_gpus_asked_for_where_there_are_fewer(tmp_path):
    found = torch.cuda.device_count()
    if found >= 8:
        pytest.skip("this machine has the 8 GPUs")
    build_tiny_vocab(tmp_path)
    config = write_yaml(tmp_path / "gpus.yaml", tiny_transformer(tmp_path, world_size=8, gpu_ranks=list(range(8))))
    result = run([command("onmt_train"), "-config", config], expect_ok=False)
    line = one_line_error(result)
    assert f"asks for 8 GPUs, {found} found" in line
    override = " ".join(["-world_size", str(max(found, 1)), "-gpu_ranks", *map(str, range(found))])
    assert f"add `{override}`" in line
    assert "Starting process" not in result.stdout + result.stderr
    # ... and the override it names trains
    run([command("onmt_train"), "-config", config, *override.split(), "-train_steps", "1"])


def test_missing_vocabulary_names_the_build_vocab_command(tmp_path):
    config = write_yaml(tmp_path / "novocab.yaml", tiny_transformer(tmp_path))
    line = one_line_error(run([command("onmt_train"), "-config", config], expect_ok=False))
    assert line == (f"onmt_train: error: src_vocab {tmp_path}/vocab.src does not exist; "
                    f"make it with: onmt_build_vocab -config {config} -n_sample -1")


def test_other_missing_files_say_where_relative_paths_were_looked_for(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.ja").write_text("私 は\n", encoding="utf-8")
    for data, expected in [
        ("own: {path_src: mine/train.en, path_tgt: mine/train.de}",
         f"corpus 'own': path_src mine/train.en does not exist; paths are relative to {tmp_path}"),
        ("ja: {path_src: train.ja, path_tgt: train.ja, path_tgt_phrases: train.ja.phrases}",
         "corpus 'ja': path_tgt_phrases train.ja.phrases does not exist; "
         "make it with: onmt-posenc chunk-ja train.ja train.ja.phrases"),
    ]:
        with pytest.raises(preflight.PreflightError) as error:
            preflight.check_corpora(data)
        assert str(error.value) == expected
    preflight.check_corpora({"ja": {"path_src": "train.ja", "path_tgt": "train.ja"}})  # all there: no error


@pytest.mark.parametrize(
    "world_size, gpu_ranks, found, message",
    [
        (1, [], 0, None),  # CPU
        (1, [0], 1, None),
        (16, list(range(8)), 8, None),  # one node of two: 8 local GPUs
        (2, [0, 1], 1, "asks for 2 GPUs, 1 found; on this machine add `-world_size 1 -gpu_ranks 0`"),
        (4, [0, 1, 2, 3], 2, "asks for 4 GPUs, 2 found; on this machine add `-world_size 2 -gpu_ranks 0 1`"),
        # without gpu_ranks, OpenNMT-py would start no process at all and exit 0
        (2, [], 0, "asks for 2 GPUs, 0 found; on this machine add `-world_size 1 -gpu_ranks` (no ranks"),
    ],
)
def test_gpu_count_check(world_size, gpu_ranks, found, message):
    if message is None:
        preflight.check_gpus(world_size, gpu_ranks, found)
        return
    with pytest.raises(preflight.PreflightError, match=message.replace("(", r"\(")):
        preflight.check_gpus(world_size, gpu_ranks, found)


def test_spawned_workers_import_onmt_quietly():
    """A worker of onmt_train is a fresh interpreter that imports what it runs: it must
    not repeat OpenNMT-py's deprecation warnings once per GPU."""
    probe = "import onmt.utils.distributed, onmt.train_single, onmt.bin.train"
    result = run([sys.executable, "-c", probe])
    assert result.stderr == ""
