"""Learning curves, training speed and the convergence rule, read from onmt_train's log
(lines in OpenNMT-py 3.5.1's own format; the runner's end-to-end tests read real logs)."""
import pytest

from onmt_posenc.experiments.running import curves

LOG = """\
$ /venv/bin/onmt_train -config run/config.yaml
[2026-11-23 20:39:03,895 INFO] Step  5/   20; acc: 0.8; ppl: 195.8; xent: 5.3; lr: 0.00034; sents:    1240; bsz: 1692/1816/124; 800/900 tok/s;      2 sec;
[2026-11-23 20:39:04,895 INFO] Step 10/   20; acc: 5.5; ppl: 123.2; xent: 4.8; lr: 0.00066; sents:    1215; bsz: 1727/1849/122; 1000/1100 tok/s;      4 sec;
[2026-11-23 20:39:05,586 INFO] validation BLEU: 3.5
[2026-11-23 20:39:05,586 INFO] Validation perplexity: 98.8756
[2026-11-23 20:39:05,586 INFO] Validation accuracy: 6.93866
[2026-11-23 20:39:07,167 INFO] Step 15/   20; acc: 9.2; ppl:  87.9; xent: 4.5; lr: 0.00097; sents:    1446; bsz: 1691/1835/145; 3000/3100 tok/s;      6 sec;
$ /venv/bin/onmt_train -config run/config.yaml -train_from run/model_step_10.pt
[2026-11-23 20:40:07,167 INFO] Step 15/   20; acc: 9.0; ppl:  88.0; xent: 4.5; lr: 0.00097; sents:    1446; bsz: 1691/1835/145; 500/500 tok/s;      3 sec;
[2026-11-23 20:40:09,161 INFO] Step 20/   20; acc: 10.1; ppl:  70.5; xent: 4.3; lr: 0.00128; sents:    1424; bsz: 1661/1804/142; 2000/2100 tok/s;      5 sec;
[2026-11-23 20:40:09,283 INFO] validation BLEU: 6.0
[2026-11-23 20:40:09,283 INFO] Validation perplexity: 64.7662
[2026-11-23 20:40:09,283 INFO] Validation accuracy: 9.57535
"""


@pytest.fixture
def log(tmp_path):
    path = tmp_path / "train.log"
    path.write_text(LOG, encoding="utf-8")
    return path


def test_curve_steps_come_from_valid_steps_and_the_checkpoint_a_run_resumed_from(log):
    curve = curves.read(log, valid_steps=10)
    assert curve["valid"] == [{"step": 10, "bleu": 3.5, "ppl": 98.8756, "acc": 6.93866},
                              {"step": 20, "bleu": 6.0, "ppl": 64.7662, "acc": 9.57535}]
    # padded steps ("Step  5/") are read; the resumed reading of step 15 wins
    assert [(p["step"], p["ppl"]) for p in curve["train"]] == [(5, 195.8), (10, 123.2), (15, 88.0), (20, 70.5)]
    assert curve["started_from"] == [0, 10] and curve["train_seconds"] == 6 + 5


def test_a_command_line_with_spaces_in_its_paths_is_read_as_the_shell_would(tmp_path):
    """The runner writes each command line shell-quoted: an output folder with a space in
    its name still gives the step a resumed invocation went on from."""
    first, resumed = LOG.split("$ ")[1:]
    quoted = (f"$ '/my venv/bin/onmt_train' -config '/My Runs/run/config.yaml'\n{first.split(chr(10), 1)[1]}"
              f"$ '/my venv/bin/onmt_train' -config '/My Runs/run/config.yaml' -train_from "
              f"'/My Runs/run/model_step_10.pt'\n{resumed.split(chr(10), 1)[1]}")
    path = tmp_path / "train.log"
    path.write_text(quoted, encoding="utf-8")
    curve = curves.read(path, valid_steps=10)
    assert curve["started_from"] == [0, 10] and curve["train_seconds"] == 6 + 5
    assert [v["step"] for v in curve["valid"]] == [10, 20]
    assert curves.invocation_start("$ /venv/bin/onmt_translate -model m.pt") is None
    assert curves.invocation_start("$ /venv/bin/onmt_train -config c.yaml -train_from src/averaged.pt") == 0


def test_training_speed_leaves_out_each_invocations_first_report(log):
    speed = curves.training_speed(log)
    assert speed == {"tokens_per_second": 4100, "reports": 3}  # the median of 2100, 6100 and 4100


@pytest.mark.parametrize("ppls, converged", [
    ([40.0, 30.0, 20.0, 19.9, 19.85], True),   # 19.9 at step 75 of 100 -> 19.85: 0.25% better
    ([40.0, 30.0, 20.0, 19.0, 18.0], False),  # 19.0 -> 18.0: 5% better
    ([40.0, 30.0, 20.0, 19.0, 19.5], True),   # worse at the end: past its best
    ([40.0, 30.0, 20.0, 19.0, 23.0], False),  # 21% worse: diverging
])
def test_convergence_rule(ppls, converged):
    valid = [{"step": 25 * i, "ppl": ppl} for i, ppl in enumerate(ppls)]
    result = curves.convergence(valid)
    assert result["converged"] is converged
    assert f"valid ppl {ppls[3]:.2f} at step 75 -> {ppls[4]:.2f} at step 100" in result["why"]


def test_convergence_needs_two_validations():
    assert curves.convergence([{"step": 100, "ppl": 5.0}])["converged"] is None
    assert curves.convergence([])["converged"] is None


@pytest.mark.parametrize("config, anneals", [
    ({"decay_method": "noam", "train_steps": 2500}, False),
    ({"decay_method": "noamwd", "start_decay_steps": 1250, "train_steps": 2500}, True),
    ({"decay_method": "noamwd", "train_steps": 2500}, False),  # OpenNMT-py's start, 50,000, is never reached
    ({"train_steps": 2500, "start_decay_steps": 1000}, True),  # decay_method none: exponential decay
    ({"train_steps": 2500, "start_decay_steps": 1000, "learning_rate_decay": 1.0}, False),
    ({}, True),  # OpenNMT-py's defaults: 100,000 updates, halved every 10,000 from 50,000
])
def test_which_schedules_anneal_the_learning_rate(config, anneals):
    assert curves.anneals(config) is anneals


def test_the_runner_writes_a_command_line_that_reads_back_with_its_spaces(tmp_path, monkeypatch):
    """run_logged writes each command line shell-quoted: onmt_train in a folder with a space,
    resumed from a checkpoint in another, is found and its resumed step read back."""
    import shlex

    from onmt_posenc.hooks import stock

    script = tmp_path / "my bin" / "onmt_train"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\necho trained\n", encoding="utf-8")
    script.chmod(0o755)
    monkeypatch.setattr(stock, "command_path", lambda name: str(script.parent / name))
    checkpoint = tmp_path / "a run" / "model_step_750.pt"
    stock.run_logged("onmt_train", ["-config", "c.yaml", "-train_from", checkpoint], tmp_path / "train.log")
    first, output = (tmp_path / "train.log").read_text(encoding="utf-8").splitlines()
    assert first == "$ " + shlex.join([str(script), "-config", "c.yaml", "-train_from", str(checkpoint)])
    assert output == "trained" and curves.invocation_start(first) == 750
