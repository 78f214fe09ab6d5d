"""What onmt_train's log says about a run: its learning curves, its training speed,
and whether it has converged.

OpenNMT-py 3.5.1 writes (onmt.utils.statistics.Statistics.output and
onmt.utils.report_manager.ReportMgr._report_step):

    Step  2/    6; acc: 3.1; ppl: 812.4; xent: 6.7; lr: 0.00001; ...; 1523/1611 tok/s;     12 sec;
    validation BLEU: 12.3            (only with valid_metrics: [BLEU])
    Validation perplexity: 31.8
    Validation accuracy: 52.1

A validation line carries no step: validation runs at every multiple of
`valid_steps`, so the n-th validation of one onmt_train invocation is at the
n-th multiple after the step it started from. The runner writes each
invocation's command line into the log first (`$ onmt_train ... -train_from
model_step_500.pt` when it resumes), which gives that starting step. A resumed
run repeats the steps after its checkpoint; the later reading of a step wins.
"""
import re
import shlex
import statistics
from pathlib import PurePath

from onmt_posenc.core.text import read_lines

TRAIN_REPORT = re.compile(r"Step\s+(\d+)/\s*(\d+); acc:\s*([\d.]+); ppl:\s*([\d.]+);"
                          r".*?([\d.]+)/\s*([\d.]+) tok/s;\s*(\d+) sec;")
VALID_LINE = re.compile(r"(Validation perplexity|Validation accuracy|validation BLEU): ([\d.eE+-]+|nan|inf)")
CHECKPOINT_STEP = re.compile(r"model_step_(\d+)\.pt$")
VALID_FIELDS = {"Validation perplexity": "ppl", "Validation accuracy": "acc", "validation BLEU": "bleu"}

# The convergence rule: validation perplexity improved by less than CONVERGED_BELOW
# over the last quarter of training (from the last validation at or before 3/4 of the
# steps to the last one), and did not rise by more than DIVERGED_ABOVE: a model past
# its best creeps up a little, one that diverges does not count as trained.
CONVERGED_BELOW, DIVERGED_ABOVE = 0.01, 0.05
RULE = (f"validation perplexity improved by less than {CONVERGED_BELOW:.0%}, and rose by no more than "
        f"{DIVERGED_ABOVE:.0%}, over the last quarter of training (last validation at or before 3/4 of "
        "the steps -> last validation)")


# OpenNMT-py's defaults, for a config that does not set them
DEFAULT_VALID_STEPS, DEFAULT_TRAIN_STEPS = 10000, 100000


def invocation_start(line):
    """The step an onmt_train command line of the log goes on from (0: the start; a
    warm start's -train_from names no checkpoint of the run's), None for any other line.
    The runner writes command lines shell-quoted (hooks.stock.run_logged), so that a path
    with spaces is one word; a line that does not split as the shell would is split at spaces."""
    if not line.startswith("$ "):
        return None
    try:
        argv = shlex.split(line[2:])
    except ValueError:
        argv = line[2:].split()
    if not argv or PurePath(argv[0]).name != "onmt_train":
        return None
    if "-train_from" not in argv[:-1]:
        return 0
    resumed = CHECKPOINT_STEP.search(argv[argv.index("-train_from") + 1])
    return int(resumed.group(1)) if resumed else 0


def read(log_path, valid_steps=DEFAULT_VALID_STEPS):
    """From a training log: {"train": [{step, ppl, acc}], "valid": [{step, ppl, acc[, bleu]}],
    "started_from": the step each onmt_train invocation went on from (0: the start),
    "train_seconds": their training time added up, as their last reports say}."""
    train, valid, started, seconds = {}, {}, [], []
    start, validations, pending = 0, 0, {}
    for line in read_lines(log_path):
        invoked = invocation_start(line)
        if invoked is not None:
            start, validations = invoked, 0
            started.append(start)
            seconds.append(0)
            continue
        found = TRAIN_REPORT.search(line)
        if found:
            step = int(found.group(1))
            train[step] = {"step": step, "ppl": float(found.group(4)), "acc": float(found.group(3))}
            if seconds:
                seconds[-1] = int(found.group(7))
            continue
        found = VALID_LINE.search(line)
        if not found:
            continue
        field = VALID_FIELDS[found.group(1)]
        pending[field] = float(found.group(2))
        if field == "acc":  # the last line of a validation
            validations += 1
            step = (start // valid_steps + validations) * valid_steps
            valid[step] = {"step": step, **pending}
            pending = {}
    return {"train": [train[s] for s in sorted(train)], "valid": [valid[s] for s in sorted(valid)],
            "started_from": started, "train_seconds": sum(seconds)}


def training_speed(log_path):
    """Training throughput from onmt_train's own reports: source + target tokens per
    second over each report interval (forward, backward and optimizer step, dropout
    on), the median over the intervals after each invocation's first (warm-up; the
    median also ignores the intervals that held a validation or a save)."""
    rates, first = [], True
    for line in read_lines(log_path):
        if invocation_start(line) is not None:
            first = True
            continue
        found = TRAIN_REPORT.search(line)
        if found:
            if not first:
                rates.append(float(found.group(5)) + float(found.group(6)))
            first = False
    if not rates:
        return None
    return {"tokens_per_second": statistics.median(rates), "reports": len(rates)}


def anneals(config):
    """Does the learning rate decay on a schedule of its own before training ends:
    OpenNMT-py's noamwd halvings, or the exponential decay of decay_method none
    (both from start_decay_steps, by learning_rate_decay), beyond noam's or rsqrt's
    inverse square root?"""
    return (config.get("decay_method", "none") in ("noamwd", "none")
            and config.get("learning_rate_decay", 0.5) < 1
            and config.get("start_decay_steps", 50000) < config.get("train_steps", DEFAULT_TRAIN_STEPS))


def convergence(valid):
    """{"converged": True/False/None, "why": text} for a validation curve (see RULE)."""
    if len(valid) < 2:
        return {"converged": None, "why": f"{len(valid)} validation(s); the rule needs two"}
    last = valid[-1]
    quarter = [point for point in valid if point["step"] <= 0.75 * last["step"]]
    if not quarter:
        return {"converged": None, "why": f"no validation at or before step {0.75 * last['step']:.0f}"}
    before = quarter[-1]
    gain = (before["ppl"] - last["ppl"]) / before["ppl"]
    return {"converged": -DIVERGED_ABOVE <= gain < CONVERGED_BELOW,
            "why": f"valid ppl {before['ppl']:.2f} at step {before['step']} -> {last['ppl']:.2f} at step "
                   f"{last['step']} ({-gain:+.1%}{'; diverging' if gain < -DIVERGED_ABOVE else ''})"}


def generalization_gap(curve):
    """The last validation perplexity over the mean training perplexity of the last quarter of
    training (the reports after 3/4 of the last validation's step): how much worse the model
    does on held-out text than on the text it trains on. None without both curves."""
    valid, train = curve.get("valid") or [], curve.get("train") or []
    if not valid:
        return None
    last = valid[-1]["step"]
    quarter = [point["ppl"] for point in train if 0.75 * last < point["step"] <= last]
    return valid[-1]["ppl"] / statistics.mean(quarter) if quarter else None
