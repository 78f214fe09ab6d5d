"""Training speed of perSPE against APE: tokens per second of the stock onmt_train.

    python tools/bench_perspe.py                       # the 2,000 En-Ja pairs of tests/data
    python tools/bench_perspe.py --data DIR            # DIR: the whole small_parallel_enja
    python tools/bench_perspe.py --hidden 512 --layers 6 --batch-size 4096 --steps 200   # on a GPU: add --gpu

Trains the same En->Ja model three ways on the same data and seed (so the
same batches), in alternation (repeats x methods). Two measures:
- wall clock: OpenNMT-py's own throughput reports (target tokens per second
  over each report window, data loading included; the first window is warm-up
  and skipped);
- CPU time of the whole onmt_train process (start-up included), which other
  jobs on a shared machine disturb much less than the wall clock; the same
  batches in each run, so the APE/method ratio of CPU time is the speed ratio.

    ape            sinusoidal APE on both sides, no phrase data (the baseline)
    perspe-phrase  perSPE R=1 on the decoder, phrase boundaries through the data pipeline
    perspe-token   perSPE R=1 per token: the position module alone, no boundary data

The target is perspe-phrase >= 0.97x APE. The phrase boundaries are made once,
offline, by `onmt-posenc chunk-ja`, whose time is reported separately.
"""
import argparse
import itertools
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO / "tests" / "data" / "small_parallel_enja"
BIN = Path(sys.executable).parent
REPORT = re.compile(r"Step (\d+)/.*?(\d+)/\s*(\d+) tok/s")
METHODS = {
    "ape": {},
    "perspe-phrase": {"perspe_range": 1, "phrases": True},
    "perspe-token": {"perspe_range": 1, "perspe_unit": "token"},
}


def head(src, dst, n):
    with open(src, encoding="utf-8") as lines:
        Path(dst).write_text("".join(itertools.islice(lines, n)), encoding="utf-8")


def config(workdir, args, method):
    settings = dict(METHODS[method])
    corpus = {"path_src": str(workdir / "train.en"), "path_tgt": str(workdir / "train.ja")}
    if settings.pop("phrases", False):
        corpus.update(path_tgt_phrases=str(workdir / "train.ja.phrases"), transforms=["tgt_phrases"])
    mapping = {
        "data": {"corpus_1": corpus},
        "save_data": str(workdir / "samples"),
        "src_vocab": str(workdir / "vocab.joint"),
        "share_vocab": True,
        "save_model": str(workdir / method),
        "encoder_type": "transformer",
        "decoder_type": "transformer",
        "position_encoding": True,
        "layers": args.layers,
        "heads": args.heads,
        "hidden_size": args.hidden,
        "word_vec_size": args.hidden,
        "transformer_ff": 4 * args.hidden,
        "dropout": [0.1],
        "batch_type": "tokens",
        "batch_size": args.batch_size,
        "bucket_size": 8192,
        "num_workers": args.num_workers,
        "optim": "adam",
        "learning_rate": 0.001,
        "train_steps": args.steps,
        "valid_steps": 10**9,
        "save_checkpoint_steps": 10**9,
        "report_every": args.report_every,
        "seed": 1,
        **settings,
    }
    if args.gpu:
        mapping.update(world_size=1, gpu_ranks=[0])
    path = workdir / f"{method}.yaml"
    path.write_text(yaml.safe_dump(mapping, sort_keys=False), encoding="utf-8")
    return path


def children_cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def train(config_path):
    """(target tokens/s of each report window after the first, CPU seconds of the run)."""
    cpu_before = children_cpu_seconds()
    result = subprocess.run([str(BIN / "onmt_train"), "-config", str(config_path)], capture_output=True, text=True)
    cpu = children_cpu_seconds() - cpu_before
    if result.returncode != 0:
        sys.exit(f"onmt_train failed:\n{result.stderr[-3000:]}")
    rates = [int(m.group(3)) for m in REPORT.finditer(result.stderr + result.stdout)]
    if len(rates) < 2:
        sys.exit(f"too few throughput reports ({len(rates)}): raise --steps or lower --report-every")
    return rates[1:], cpu


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with train.en and train.ja")
    parser.add_argument("--lines", type=int, default=20000, help="at most as many as --data has")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--report-every", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=2048, help="tokens")
    parser.add_argument("--num-workers", type=int, default=0, help="0: data processing inside the training loop")
    parser.add_argument("--gpu", action="store_true")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for side in ("en", "ja"):
            head(args.data / f"train.{side}", workdir / f"train.{side}", args.lines)
        start = time.perf_counter()
        subprocess.run([str(BIN / "onmt-posenc"), "chunk-ja", str(workdir / "train.ja"),
                        str(workdir / "train.ja.phrases")], check=True, capture_output=True)
        chunk_seconds = time.perf_counter() - start
        vocab_config = config(workdir, args, "perspe-phrase")
        built = subprocess.run([str(BIN / "onmt_build_vocab"), "-config", str(vocab_config), "-n_sample", "-1"],
                               capture_output=True, text=True)
        if built.returncode != 0:
            sys.exit(f"onmt_build_vocab failed:\n{built.stderr[-3000:]}")

        rates = {method: [] for method in METHODS}
        cpu = {method: [] for method in METHODS}
        for _ in range(args.repeats):
            for method in METHODS:  # alternate, so drifting machine load hits every method alike
                windows, seconds = train(config(workdir, args, method))
                rates[method] += windows
                cpu[method].append(seconds)

    ape = statistics.median(rates["ape"])
    ape_cpu = statistics.median(cpu["ape"])
    print(f"chunk-ja: {args.lines} lines in {chunk_seconds:.1f} s (offline, once)")
    print(f"model d={args.hidden} layers={args.layers} batch={args.batch_size} tokens, "
          f"{args.steps} steps x {args.repeats} repeats, num_workers={args.num_workers}, "
          f"{'GPU' if args.gpu else 'CPU'}")
    print("| method | wall: target tok/s, median (min-max, windows) | x APE | CPU s per run, median (min-max) | x APE |")
    print("|---|---|---|---|---|")
    for method, values in rates.items():
        median = statistics.median(values)
        seconds = statistics.median(cpu[method])
        print(f"| {method} | {median:.0f} ({min(values)}-{max(values)}, {len(values)}) | {median / ape:.3f} "
              f"| {seconds:.1f} ({min(cpu[method]):.1f}-{max(cpu[method]):.1f}) | {ape_cpu / seconds:.3f} |")


if __name__ == "__main__":
    main()
