"""Stock OpenNMT-py keeps working with the extension installed: its own unit tests, validation
metrics in onmt_train, onmt_server with a model of every method, and the A/B switch.

OpenNMT-py 3.5.1 ships its unit tests in its wheel (`onmt/tests/`), but not the files they
read from the repository they came from (`data/`, `onmt/tests/test_model.pt`). They run here
from a copy of the installed test modules, beside stand-ins for those files: the repository's
two subword models (tests/data/opennmt-py, MIT), OpenNMT-py's own toy En-De text
(tests/data/toy-ende) for its corpora, vocabularies counted from it, and a tiny model trained
by the stock commands for the translation server's tests. The suite runs twice: with the
extension, and with `ONMT_POSENC=stock` (stock OpenNMT-py with safe checkpoint loading only,
without which no checkpoint loads on torch >= 2.6); every test must end the same way in both.
"""
import collections
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
import torch
from conftest import TEST_DATA, TOY_ENDE, command, head, run, tiny_transformer, write_yaml

# OpenNMT-py's tests whose outcome is drawn at random on the packages installed here, so that
# the two runs may end differently by chance alone; each must still run in both.
RANDOM_OUTCOME = {
    "test_transform.py::TestSubwordTransform::test_sentencepiece":
        "its gold holds one draw of sentencepiece's subword sampling, which sentencepiece 0.2 makes "
        "differently in each process despite the seed OpenNMT-py sets ('response' as 'p on' or 'po n')",
}
STOCK = {"ONMT_POSENC": "stock"}


def installed_onmt_tests():
    import onmt.tests

    return Path(onmt.tests.__file__).parent


@pytest.fixture(scope="module")
def opennmt_suite(tmp_path_factory):
    """A folder where OpenNMT-py's unit tests find what they read: `tests/` (the installed test
    modules and the stand-in models), and `data/` (its corpora, vocabularies and subword models)."""
    root = tmp_path_factory.mktemp("opennmt_suite")
    tests = root / "tests"
    tests.mkdir()
    for module in installed_onmt_tests().glob("*.py"):
        shutil.copy(module, tests)
    data = root / "data"
    data.mkdir()
    for name in ("sample.bpe", "sample.sp.model"):
        shutil.copy(TEST_DATA / "opennmt-py" / name, data)
    for side in ("src", "tgt"):
        shutil.copy(TOY_ENDE / f"{side}-train.txt", data / f"{side}-train.txt")
        head(TOY_ENDE / f"{side}-val.txt", data / f"{side}-val.txt", 50)
        counts = collections.Counter((data / f"{side}-train.txt").read_text(encoding="utf-8").split())
        (data / f"vocab-train.{side}").write_text("".join(f"{w}\t{n}\n" for w, n in counts.most_common()),
                                                   encoding="utf-8")
    write_yaml(data / "data.yaml", {"data": {
        "corpus_1": {"path_src": "data/src-train.txt", "path_tgt": "data/tgt-train.txt"},
        "valid": {"path_src": "data/src-val.txt", "path_tgt": "data/tgt-val.txt"}}})
    # the server's test models: a tiny Transformer of the stock commands
    work = root / "model"
    work.mkdir()
    config = write_yaml(work / "model.yaml", tiny_transformer(work, train_steps=2, save_model=str(work / "model")))
    run([command("onmt_build_vocab"), "-config", config, "-n_sample", "-1"], env=STOCK)
    run([command("onmt_train"), "-config", config], env=STOCK)
    for name in ("test_model.pt", "test_model2.pt"):
        shutil.copy(work / "model_step_2.pt", tests / name)
    return root


def outcomes(root, env):
    """{test id: passed / failed / skipped} of OpenNMT-py's suite run in `root` under `env`."""
    report = root / f"junit-{env.get('ONMT_POSENC', 'on')}.xml"
    result = subprocess.run([sys.executable, "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider",
                             f"--junitxml={report}"], cwd=root, capture_output=True, text=True, timeout=900,
                            env={**os.environ, "OMP_NUM_THREADS": "1", **env})
    assert report.is_file(), result.stdout[-3000:] + result.stderr[-3000:]
    found = {}
    for case in ElementTree.parse(report).iter("testcase"):
        test = f"{case.get('classname').rsplit('.', 1)[-1]}::{case.get('name')}"
        module = case.get("classname").split(".")[1] if "." in case.get("classname") else ""
        kinds = {child.tag for child in case}
        found[f"{module}.py::{test}"] = ("failed" if kinds & {"failure", "error"} else
                                         "skipped" if "skipped" in kinds else "passed")
    return found


def test_opennmt_unit_tests_end_as_they_do_without_the_extension(opennmt_suite):
    stock, ours = outcomes(opennmt_suite, STOCK), outcomes(opennmt_suite, {})
    assert len(stock) >= 100  # the whole suite ran: 113 tests in OpenNMT-py 3.5.1
    assert set(RANDOM_OUTCOME) <= stock.keys() & ours.keys()
    differ = {test: (stock.get(test), ours.get(test)) for test in stock.keys() | ours.keys()
              if stock.get(test) != ours.get(test) and test not in RANDOM_OUTCOME}
    assert not differ, f"(without, with) the extension: {differ}"
    failed = {test for test, outcome in stock.items() if outcome == "failed"}
    assert not failed - set(RANDOM_OUTCOME), "OpenNMT-py's own tests fail without the extension"
    # the tests the extension used to break
    for test in ("test_transform.py::TestSubwordTransform::test_pyonmttok_bpe",
                 "test_translation_server.py::TestServerModel::test_run"):
        assert ours[test] == "passed"


# --- validation metrics in onmt_train --------------------------------------------

def test_validation_bleu_and_ter_in_onmt_train(tmp_path):
    """`valid_metrics` translates the validation set with OpenNMT-py's scoring utilities, which
    pass `-model dummy -src dummy`: the extension's checks of onmt_translate must not read them."""
    config = write_yaml(tmp_path / "train.yaml", tiny_transformer(tmp_path, train_steps=10, valid_steps=5,
                                                                  valid_metrics=["BLEU", "TER"]))
    run([command("onmt_build_vocab"), "-config", config, "-n_sample", "-1"])
    result = run([command("onmt_train"), "-config", config])
    log = result.stdout + result.stderr
    assert log.count("validation BLEU:") == 2 and log.count("validation TER:") == 2
    assert (tmp_path / "model_step_10.pt").is_file()


# --- onmt_server --------------------------------------------------------------------

# One model of each position method: its keys over tiny_transformer's
SERVED_METHODS = {
    "ape": {},
    "shape": {"shape_max_shift": 10},
    "perspe-token": {"perspe_range": 1, "perspe_unit": "token"},
    "randomized": {"src_position_encoding": "randomized", "tgt_position_encoding": "randomized",
                   "randomized_max_position": 64, "randomized_eval_length": 20},
    "cape": {"src_position_encoding": "cape", "tgt_position_encoding": "cape"},
    "none": {"src_position_encoding": "none", "tgt_position_encoding": "none"},
    "shaw": {"position_encoding": False, "max_relative_positions": 4},
    "music": {"position_encoding": False, "max_relative_positions": 4, "relative_attention": "music"},
    "rotary": {"position_encoding": False, "max_relative_positions": -1},
    "alibi": {"position_encoding": False, "max_relative_positions": -2},
    "t5": {"position_encoding": False, "max_relative_positions": 16, "relative_positions_buckets": 8},
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, payload):
    request = urllib.request.Request(url, json.dumps(payload).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def test_onmt_server_serves_a_model_of_every_method(tmp_path):
    vocab = write_yaml(tmp_path / "vocab.yaml", tiny_transformer(tmp_path))
    run([command("onmt_build_vocab"), "-config", vocab, "-n_sample", "-1"])
    models = []
    for number, (method, keys) in enumerate(SERVED_METHODS.items(), 1):
        config = write_yaml(tmp_path / f"{method}.yaml", tiny_transformer(
            tmp_path, train_steps=2, save_model=str(tmp_path / method), **keys))
        run([command("onmt_train"), "-config", config])
        models.append({"id": number, "model": f"{method}_step_2.pt", "timeout": -1, "load": True,
                       "opt": {"beam_size": 2, "max_length": 8}})
    (tmp_path / "server.json").write_text(json.dumps({"models_root": str(tmp_path), "models": models}),
                                          encoding="utf-8")
    port = free_port()
    server = subprocess.Popen([command("onmt_server"), "--ip", "127.0.0.1", "--port", str(port), "--url_root",
                               "/translator", "--model_config", tmp_path / "server.json"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}/translator"
        for _ in range(240):  # loading every model at start-up
            try:
                listed = json.loads(urllib.request.urlopen(f"{url}/models", timeout=5).read())
                break
            except OSError:
                assert server.poll() is None, server.stdout.read()[-3000:]
                time.sleep(0.5)
        else:
            pytest.fail("onmt_server did not answer")
        assert sorted(model["model_id"] for model in listed) == list(range(1, len(models) + 1))
        for number, method in enumerate(SERVED_METHODS, 1):
            answer = post(f"{url}/translate", [{"src": "the house is small .", "id": number}])
            assert isinstance(answer[0][0]["tgt"], str), (method, answer)
    finally:
        server.terminate()
        server.wait(timeout=30)


# --- the A/B switch -------------------------------------------------------------------

def test_stock_mode_is_the_a_b_baseline_end_to_end(tmp_path):
    """`ONMT_POSENC=stock` trains, averages and translates as stock OpenNMT-py would if it could
    load its checkpoints; the extension's APE follows it to the logged precision and translates
    the same (no attention dropout: PyTorch's fused attention draws its own masks)."""
    src = head(TOY_ENDE / "src-test.txt", tmp_path / "test.src", 20)
    vocab = write_yaml(tmp_path / "vocab.yaml", tiny_transformer(tmp_path))
    run([command("onmt_build_vocab"), "-config", vocab, "-n_sample", "-1"], env=STOCK)
    translations, losses = {}, {}
    for mode, env in (("stock", STOCK), ("on", {})):
        config = write_yaml(tmp_path / f"{mode}.yaml", tiny_transformer(
            tmp_path, train_steps=20, save_checkpoint_steps=10, report_every=5, attention_dropout=[0.0],
            save_model=str(tmp_path / mode)))
        log = run([command("onmt_train"), "-config", config], env=env)
        losses[mode] = [line.split("xent: ")[1].split(";")[0] for line in (log.stdout + log.stderr).splitlines()
                        if "xent: " in line]
        run([command("onmt_average_models"), "-models", tmp_path / f"{mode}_step_10.pt",
             tmp_path / f"{mode}_step_20.pt", "-output", tmp_path / f"{mode}_avg.pt"], env=env)
        output = tmp_path / f"{mode}.hyp"
        run([command("onmt_translate"), "-model", tmp_path / f"{mode}_avg.pt", "-src", src, "-output", output,
             "-beam_size", "2", "-max_length", "20"], env=env)
        translations[mode] = output.read_text(encoding="utf-8")
    assert len(losses["stock"]) == 4 and losses["on"] == losses["stock"]
    assert translations["on"] == translations["stock"] and translations["on"].strip()


def test_spacy_is_imported_at_its_first_use_only():
    """OpenNMT-py imports spacy at start-up for its terminology transform (about a third of its
    import time); with the extension on, the import waits for the first use and then gives the
    real module; `stock` keeps OpenNMT-py's imports as they are."""
    probe = ("import sys, onmt; print('thinc' in sys.modules); import onmt.transforms.terminology as t; "
             "print(t.spacy.blank('en')('two words').text, 'thinc' in sys.modules); import spacy.tokens; "
             "print(spacy.tokens.Doc.__name__)")
    assert run([sys.executable, "-c", probe]).stdout.splitlines() == ["False", "two words True", "Doc"]
    assert run([sys.executable, "-c", probe], env=STOCK).stdout.splitlines()[0] == "True"


def test_layers_are_built_without_importing_torch_dynamo():
    """OpenNMT-py builds its embeddings and linear layers with `skip_init` on the meta device,
    which on torch 2.13 imports torch._dynamo (2-3 s of every onmt_translate's start). With the
    extension on, they are built on the CPU, with the same parameters, and the seeded random
    stream does not move (test_stock_mode_is_the_a_b_baseline_end_to_end: the same losses).
    `stock` keeps skip_init (which imports torch._dynamo on torch 2.13, not necessarily on others)."""
    probe = ("import sys, torch, onmt\n"
             "from onmt.modules.embeddings import Embeddings\n"
             "from onmt.modules.multi_headed_attn import MultiHeadedAttention\n"
             "from onmt.modules.position_ffn import PositionwiseFeedForward\n"
             "torch.manual_seed(1); state = torch.get_rng_state()\n"
             "layers = [Embeddings(16, 100, 1), MultiHeadedAttention(4, 16), PositionwiseFeedForward(16, 32)]\n"
             "print('torch._dynamo' in sys.modules, torch.equal(state, torch.get_rng_state()),\n"
             "      [(name, tuple(p.shape)) for layer in layers for name, p in layer.named_parameters()])")
    on, stock = (run([sys.executable, "-c", probe], env=env).stdout.split(" ", 2) for env in ({}, STOCK))
    assert on[:2] == ["False", "True"] and stock[1] == "True"
    assert on[2] == stock[2] and "linear_query.weight" in on[2]


def test_off_is_exactly_stock_and_cannot_load_a_checkpoint_on_this_torch(tmp_path):
    """`ONMT_POSENC=off` adds nothing, so on torch >= 2.6 OpenNMT-py's weights-only loading
    refuses every checkpoint (docs/internals.md says so)."""
    assert tuple(int(part) for part in torch.__version__.split(".")[:2]) >= (2, 6)
    config = write_yaml(tmp_path / "model.yaml", tiny_transformer(tmp_path, train_steps=2,
                                                                  save_model=str(tmp_path / "model")))
    run([command("onmt_build_vocab"), "-config", config, "-n_sample", "-1"], env={"ONMT_POSENC": "off"})
    run([command("onmt_train"), "-config", config], env={"ONMT_POSENC": "off"})
    src = head(TOY_ENDE / "src-test.txt", tmp_path / "test.src", 2)
    result = run([command("onmt_translate"), "-model", tmp_path / "model_step_2.pt", "-src", src,
                  "-output", tmp_path / "hyp"], env={"ONMT_POSENC": "off"}, expect_ok=False)
    assert result.returncode != 0 and "weights_only" in result.stderr
    unknown = run([sys.executable, "-c", "import onmt"], env={"ONMT_POSENC": "stok"})
    assert "ONMT_POSENC=stok is none of on, stock, off: the extension stays on" in unknown.stderr
