"""What a batch shows and records while it runs: progress lines with ETAs, whether training
shared its machine (for the speed claims), and the machine itself."""
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from onmt_posenc.experiments.running import curves


def machine():
    """What the runs ran on, for the report's speed column."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {"cpu": cpu, "cores": os.cpu_count(), "gpus": gpus, "torch": torch.__version__}


class Progress:
    """One line per event on stderr: which run, which step, and how long the rest should take.

    ETAs come from the training speed so far (between OpenNMT-py's reports) and,
    once a run has finished, from how long the finished runs took."""

    def __init__(self, total, stream=None):
        self.total = total
        self.stream = stream or sys.stderr
        self.durations = []  # seconds of each run finished in this invocation
        self.after_training = []  # seconds each of them spent after training
        self.index, self.run_id = 0, ""
        self.train_end = 0.0

    @staticmethod
    def clock(seconds):
        seconds = int(max(seconds, 0))
        return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"

    def say(self, text):
        print(f"[{self.index}/{self.total} {self.run_id}] {text}", file=self.stream, flush=True)

    def start_run(self, index, run_id):
        self.index, self.run_id, self.run_start = index, run_id, time.time()
        self.say("start")

    def start_training(self, from_step=0):
        self.train_start, self.from_step, self.first_report = time.time(), from_step, None
        self.say("train")

    def end_training(self):
        self.train_end = time.time()

    def train_step(self, step, total):
        now = time.time()
        if self.first_report is None:  # from the first report on, start-up time no longer counts
            self.first_report = (step, now)
            rate = (step - self.from_step) / max(now - self.train_start, 1e-9)
        else:
            first_step, first_time = self.first_report
            rate = (step - first_step) / max(now - first_time, 1e-9)
        training_eta = (total - step) / rate if rate > 0 else 0.0
        mean = statistics.mean
        rest_of_run = training_eta + (mean(self.after_training) if self.after_training else 0.0)
        this_run = now - self.run_start + rest_of_run
        other_runs = (self.total - self.index) * (mean(self.durations) if self.durations else this_run)
        self.say(f"train step {step}/{total} ({100 * step // max(total, 1)}%), {rate:.1f} steps/s, "
                 f"run ETA {self.clock(rest_of_run)}, all runs ETA ~{self.clock(rest_of_run + other_runs)}")

    def end_run(self, status):
        seconds = time.time() - self.run_start
        if status == "finished" and self.train_end > self.run_start:
            self.durations.append(seconds)
            self.after_training.append(time.time() - self.train_end)
        self.say(f"{status} in {self.clock(seconds)}")


class DeviceWatch:
    """Whether training shared its machine, sampled at each of onmt_train's reports: the
    other onmt_train processes running (other shards on the GPU or the CPU) and the load
    average against the cores. A speed measured beside other work says nothing about
    the method (claims.shape_paper.speed)."""

    def __init__(self):
        self.others, self.loads = [], []

    def sample(self):
        if hasattr(os, "getloadavg"):
            self.loads.append(os.getloadavg()[0])
        trainings = other_trainings()
        if trainings is not None:
            self.others.append(trainings)

    def summary(self, earlier=None):
        """This invocation's samples, merged with an earlier invocation's summary (its load
        average weighted by the samples it stands for)."""
        earlier = earlier or {}
        load_sum, samples = sum(self.loads), len(self.loads)
        if earlier.get("load_average") is not None:
            earlier_samples = earlier.get("samples") or 1
            load_sum, samples = load_sum + earlier["load_average"] * earlier_samples, samples + earlier_samples
        others = self.others + ([earlier["other_trainings"]] if earlier.get("other_trainings") is not None else [])
        return {"other_trainings": max(others) if others else None,
                "load_average": round(load_sum / samples, 2) if samples else None,
                "cores": os.cpu_count(), "samples": samples}


def other_trainings():
    """How many onmt_train processes run on this machine besides one (ours); None where
    processes cannot be listed (no /proc)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    count = 0
    for cmdline in proc.glob("[0-9]*/cmdline"):
        try:
            arguments = cmdline.read_bytes().split(b"\0")
        except OSError:  # the process ended meanwhile
            continue
        # the console script (python .../onmt_train) or the module; the first spawned worker's
        # parent too: count the command line of each training once
        count += any(Path(a.decode(errors="replace")).name == "onmt_train" for a in arguments[:2])
    return max(count - 1, 0)


def train_progress(progress, watch):
    """on_line for onmt_train: progress from its reports (curves.TRAIN_REPORT), and the
    machine's sharing sampled at each."""

    def on_line(line):
        found = curves.TRAIN_REPORT.search(line)
        if found:
            progress.train_step(int(found.group(1)), int(found.group(2)))
            watch.sample()

    return on_line
