"""Speed and memory of position methods in OpenNMT-py self-attention.

Three measurements, every ratio against APE measured in the same run:

1. layer: one self-attention layer (an encoder's: bidirectional, with its padding
   mask), forward + backward, at each length with equal tokens per batch;
2. model: a small encoder-decoder built by OpenNMT-py's model builder, forward +
   backward through the loss, source and target of the same length;
3. train: end-to-end `onmt_train` tokens per second on INTERPOLATE-length data
   (10 consecutive toy-ende pairs joined with <sep>, about 235 tokens per side).

Each method runs on PyTorch's fastest path ("fastest": fused attention, SDPA, where
its maths allows; the value term of Shaw needs the attention weights, so Shaw is
always plain there), on the fused Triton kernel ("triton", `attention_kernel: triton`,
onmt_posenc/model/attention/fused_kernel/: the methods with a relative term; CUDA, or
the CPU under Triton's interpreter for a dry run), and, to compare position methods
rather than kernels, all on the same plain matmul-softmax-matmul path
(`self_attn_type: scaled-dot`). "speed" is APE's time over the method's (the paper's
x0.91 means 9% slower), on the same path except for the Triton path, whose ratios are
against APE on PyTorch's fastest path (SDPA, whose backend each part prints); "memory"
is the method's peak over that APE's, the peak being the memory allocated during forward
+ backward above the parameters and inputs. On CUDA the layer and model parts run in
bfloat16 and float16 under autocast (TF32 on for float32 products), as mixed-precision
training runs, each dtype's tables printed as soon as it ends, with each Triton kernel's
compile time.

What one failure or a slow machine can cost: each method is measured on its own (at each
path and length), so an error (a Triton compile or launch error) loses that method's row
there and nothing else; each row is printed ("row: ...", flushed) the moment it is measured;
the paths run in turn over all lengths, PyTorch's fastest first, then the kernel's, then
the plain path. With --budget a part starts nothing once its seconds are spent (the layer
and model parts share them out over the dtypes) and says what it skipped ("skipped: ...").

    python tools/benchmark_attention.py                  # everything, CPU (GPU if there is one)
    python tools/benchmark_attention.py --parts layer --lengths 512 --repeats 5
    python tools/benchmark_attention.py --parts train --data DIR   # DIR: the full toy-ende corpus
"""
import argparse
import contextlib
import importlib.metadata
import importlib.util
import logging
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path

import onmt  # noqa: F401  (activates onmt_posenc)
import pyonmttok
import torch
import torch.nn.functional as F
import yaml
from onmt import model_builder
from onmt.bin.train import _get_parser
from onmt.constants import DefaultTokens
from onmt.modules.multi_headed_attn import MultiHeadedAttention
from onmt.utils.logging import logger
from onmt.utils.parse import ArgumentParser
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from onmt_posenc.model.attention import ATTENTIONS, fused_kernel, relative_attention_choices, replacement_for
from onmt_posenc.model.attention.music import MusicRelativeAttention
from onmt_posenc.model.attention.self_attention import SDPA_LOGGED, SelfAttention
from onmt_posenc.model.attention.shaw import ShawRelativeAttention

# The repository's excerpt (2,000 training pairs); --data names the whole corpus.
TOY_ENDE = Path(__file__).resolve().parents[1] / "tests" / "data" / "toy-ende"
PATHS = ("fastest", "triton", "plain")  # the order they run in: APE on SDPA before the kernel
# the path whose APE a path's ratios are against (the kernel's: APE on flash SDPA)
BASE_PATH = {"triton": "fastest", "fastest": "fastest", "plain": "plain"}


DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def paths_on(device):
    """The Triton kernel runs on CUDA, and on the CPU under Triton's interpreter (a dry run)."""
    return PATHS if device.type == "cuda" or fused_kernel.interpreted() else tuple(p for p in PATHS if p != "triton")


def on_path(module, path):
    """`module` set to attend on `path`; None for a built-in layer on the Triton path
    (OpenNMT-py's layers do not take the kernel). A method without a relative term takes
    SDPA on the Triton path too (as attention_kernel does)."""
    if isinstance(module, SelfAttention):
        module.kernel = "triton" if path == "triton" and module.kernel_covers() else "pytorch"
    elif path == "triton":
        return None
    return module


def autocast(device, dtype):
    """Mixed precision as training runs it (float32 parameters, products in `dtype`)."""
    return torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)


def kernel_variant(src):
    """A compiled kernel's variant in words: the dtype, the head size, the terms it takes."""
    constants = {src.fn.arg_names[path[0]]: value for path, value in src.constants.items()}
    flags = [name for name in ("CAUSAL", "ROW_TABLE", "SHARED_TABLE", "ALIBI", "HAS_PAD", "DROPOUT", "VALUES")
             if constants.get(name) is True]
    ramp = [f"RAMP={constants['RAMP']}"] if constants.get("RAMP") else []
    slots = [f"WINDOW={constants['WINDOW']}"] if constants.get("VALUES") is True else []
    return " ".join([src.signature.get("Q", "?").lstrip("*"), f"D={constants.get('D')}", *flags, *ramp, *slots])


class CompileTimes:
    """Triton's compiles while the block runs (its compilation listener): each kernel, the
    variant (its constants), seconds."""

    def __enter__(self):
        self.compiles = []
        if importlib.util.find_spec("triton") is None:
            return self
        import triton

        def listen(*, src, metadata, metadata_group, times, cache_hit):
            if not cache_hit:
                self.compiles.append((src.fn.__name__, kernel_variant(src), times.total / 1e6))
                print(f"  compiled {src.fn.__name__} ({kernel_variant(src)}) in {times.total / 1e6:.1f} s",
                      file=sys.stderr, flush=True)

        self._knobs, self._before = triton.knobs.compilation, triton.knobs.compilation.listener
        self._knobs.listener = listen
        return self

    def __exit__(self, *exc):
        if hasattr(self, "_knobs"):
            self._knobs.listener = self._before

    def print_table(self, title):
        print(f"\n### {title}: Triton kernels compiled, seconds\n")
        if not self.compiles:
            print("none (cached, or Triton's interpreter)")
            return
        print("| kernel | variant | seconds |\n|---|---|---|")
        for name, constants, seconds in self.compiles:
            print(f"| {name} | {constants} | {seconds:.1f} |")


class PeakNewMemory(TorchDispatchMode):
    """CPU has no allocator statistics: follow every tensor storage that an operation
    creates inside the block until it is freed, and keep the peak of their sum."""

    def __enter__(self):
        self.live = self.peak = 0
        self._refs = {}
        return super().__enter__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for tensor in tree_leaves(out):
            if isinstance(tensor, torch.Tensor):
                storage = tensor.untyped_storage()
                if storage.nbytes() and storage.data_ptr() not in inputs and id(storage) not in self._refs:
                    self._add(storage)
        return out

    def _add(self, storage):
        size, key = storage.nbytes(), id(storage)

        def freed(_):
            self.live -= size
            self._refs.pop(key, None)

        self._refs[key] = weakref.ref(storage, freed)
        self.live += size
        self.peak = max(self.peak, self.live)


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def peak_memory(step, device):
    """Bytes allocated during `step()` above what existed before, at the peak."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    with PeakNewMemory() as tracker:
        step()
    return tracker.peak


def clock(device):
    """GPU: wall time. CPU: this process's CPU time, which other processes on a
    shared machine do not inflate (with one thread it is the wall time of an
    idle machine)."""
    return time.perf_counter if device.type == "cuda" else time.process_time


class Budget:
    """A part's seconds (None: no limit), counted from its start."""

    def __init__(self, seconds):
        self.seconds, self.start = seconds, time.monotonic()

    def left(self):
        return None if self.seconds is None else self.seconds - (time.monotonic() - self.start)

    def spent(self, needs=0.0):
        """Would a task of `needs` seconds, started now, end past the budget?"""
        return self.seconds is not None and self.left() <= needs

    def share(self, parts):
        """A fair share of what is left for the next of `parts` parts (what one leaves goes to the next)."""
        return Budget(None if self.seconds is None else max(0.0, self.left()) / parts)


def failure(error):
    """A row's cell for a method that raised: the error in one line."""
    return "failed: " + (f"{type(error).__name__}: {error}".splitlines() or [""])[0][:300]


def measure(steps, repeats, device):
    """Best-of-`repeats` seconds and peak bytes of each named step that has run once (its
    warm-up), or the failure of one that raised; the steps take turns, so that changing load
    on a shared machine spreads over all of them."""
    now = clock(device)
    seconds = {name: [] for name in steps}
    failed = {}
    for _ in range(repeats):
        for name, step in steps.items():
            if name in failed:
                continue
            try:
                synchronize(device)
                start = now()
                step()
                synchronize(device)
            except Exception as error:  # noqa: BLE001  (one method's error loses its row only)
                failed[name] = failure(error)
                continue
            seconds[name].append(now() - start)
    measured = {}
    for name, step in steps.items():
        try:
            measured[name] = failed.get(name) or (min(seconds[name]), peak_memory(step, device))
        except Exception as error:  # noqa: BLE001
            measured[name] = failure(error)
    return measured


def measure_rows(where, methods, args, device, budget):
    """Measure each path (in PATHS' order) at each length: `methods(path, length)` gives
    {name: make}, make() the method's step (None: the method does not run on that path).
    Each method is built and warmed up (the kernel's compile) on its own, an error losing its
    row only; each row is printed as it is measured; once `budget` is spent nothing more starts
    and what is left is said. Returns {path: {name: {length: (seconds, bytes) or failure}}}."""
    results = {path: {} for path in paths_on(device)}
    for path in paths_on(device):
        for length in args.lengths:
            steps, skipped = {}, []
            for name, make in methods(path, length).items():
                if budget.spent():
                    skipped.append(name)
                    continue
                try:
                    step = make()
                    if step is None:
                        continue
                    results[path].setdefault(name, {})  # the tables' rows in the methods' order
                    step()  # warm-up: the kernel's compile
                    steps[name] = step
                except Exception as error:  # noqa: BLE001  (one method's error loses its row only)
                    results[path].setdefault(name, {})[length] = failure(error)
                    print(f"row: {where} {path} | {name} | L={length} | {failure(error)}", flush=True)
            for name, value in measure(steps, args.repeats, device).items():
                results[path].setdefault(name, {})[length] = value
                cell = value if isinstance(value, str) else f"{value[0] * 1e3:.3f} ms | {value[1] / 2**20:.2f} MiB"
                print(f"row: {where} {path} | {name} | L={length} | {cell}", flush=True)
            if skipped:
                print(f"skipped: {where} {path} | L={length} | {len(skipped)} methods, the budget "
                      f"({budget.seconds:.0f} s) spent: {'; '.join(skipped)}", flush=True)
    return results


# --- 1. one self-attention layer ----------------------------------------------------

def registered_variants(far):
    """The options of each self-attention variant that relative_attention chooses (its
    registry, onmt_posenc.model.attention): a file added there is benchmarked here."""
    return {name: {"max_relative_positions": far if ATTENTIONS[name].needs_distance else 0, "relative_attention": name}
            for name in relative_attention_choices()}


def layer_methods(args):
    dim, heads, far, dropout = args.d_model, args.heads, args.far, args.attention_dropout
    common = dict(dropout=dropout, is_decoder=False)
    methods = {
        "APE / SHAPE / none": lambda fused: SelfAttention(heads, dim, fused=fused, **common),
        "built-in Shaw": lambda fused: MultiHeadedAttention(
            heads, dim, max_relative_positions=far, attn_type="self", **common
        ),
        "our shaw, separate tables": lambda fused: ShawRelativeAttention(
            heads, dim, far, values="separate", **common
        ),
        f"our music, K={args.music_far}": lambda fused: MusicRelativeAttention(heads, dim, args.music_far, fused=fused,
                                                                               **common),
    }
    # every registered variant of relative_attention, built as `install` builds it from the stock layer
    for name, settings in registered_variants(far).items():
        def ours(fused, settings=settings):
            stock = MultiHeadedAttention(heads, dim, attn_type="self", max_relative_positions=settings[
                "max_relative_positions"], **common)
            return replacement_for(stock, "scaled-dot-flash" if fused else "scaled-dot", settings["relative_attention"])

        methods[f"our {name}"] = ours
    # OpenNMT-py's own schemes, its layer against ours (`replacement_for` builds ours from it).
    for name, scheme in STOCK_SCHEMES.items():
        def stock(fused, scheme=scheme):
            return MultiHeadedAttention(heads, dim, attn_type="self", **scheme, **common,
                                        self_attn_type="scaled-dot-flash" if fused else "scaled-dot")

        methods[f"built-in {name}"] = stock
        methods[f"our {name}"] = lambda fused, stock=stock: replacement_for(
            stock(fused), "scaled-dot-flash" if fused else "scaled-dot"
        )
    return methods


# Rotary (-1), ALiBi (-2) and T5 buckets as MultiHeadedAttention options.
STOCK_SCHEMES = {
    "rotary": {"max_relative_positions": -1},
    "ALiBi": {"max_relative_positions": -2},
    "T5 buckets": {"max_relative_positions": 128, "relative_positions_buckets": 32},
}


def layer_step(module, batch, length, dim, device, dtype):
    x = torch.randn(batch, length, dim, device=device, requires_grad=True)
    mask = torch.zeros(batch, 1, length, length, dtype=torch.bool, device=device)  # equal lengths

    def step():
        module.zero_grad(set_to_none=True)
        x.grad = None
        with autocast(device, dtype):
            out, _ = module(x, x, x, mask=mask)
        out.float().sum().backward()

    return step


def benchmark_layer(args, device, dtype, where, budget):
    def methods(path, length):
        def step_of(make):
            torch.manual_seed(0)
            module = on_path(make(path != "plain"), path)
            if module is None:
                return None
            module = module.to(device).train()
            for parameter in module.parameters():
                torch.nn.init.normal_(parameter, std=0.05)
            return layer_step(module, max(1, args.tokens // length), length, args.d_model, device, dtype)

        return {name: lambda make=make: step_of(make) for name, make in layer_methods(args).items()}

    return measure_rows(where, methods, args, device, budget)


# --- 2. a small full model -----------------------------------------------------------

def model_methods(far):
    return {
        "none": ([], False),
        "APE": (["-position_encoding"], False),
        "SHAPE K=500": (["-position_encoding", "-shape_max_shift", "500"], False),
        "built-in Shaw": (["-max_relative_positions", str(far)], True),
        **{f"our {name}": ([f"-{key}={value}" for key, value in settings.items()], False)
           for name, settings in registered_variants(far).items()},
        **{
            f"{who} {name}": ([f"-{key}={value}" for key, value in scheme.items()], who == "built-in")
            for name, scheme in STOCK_SCHEMES.items()
            for who in ("built-in", "our")
        },
    }


@contextlib.contextmanager
def openmt_attention_only():
    """Build with OpenNMT-py's own self-attention (the builder without our swap)."""
    ours = model_builder.build_task_specific_model
    model_builder.build_task_specific_model = ours.__wrapped__
    try:
        yield
    finally:
        model_builder.build_task_specific_model = ours


def model_options(args, extra, path):
    opt, _ = _get_parser().parse_known_args(
        ["-data", "{}", "-src_vocab", "unused", "-encoder_type", "transformer", "-decoder_type", "transformer",
         "-layers", str(args.model_layers), "-heads", str(args.model_heads), "-hidden_size", str(args.model_dim),
         "-word_vec_size", str(args.model_dim), "-transformer_ff", str(4 * args.model_dim),
         "-dropout", "0.1", "-attention_dropout", str(args.attention_dropout),
         "-self_attn_type", "scaled-dot" if path == "plain" else "scaled-dot-flash",
         "-attention_kernel", "triton" if path == "triton" else "pytorch", *extra]
    )
    ArgumentParser.update_model_opts(opt)
    ArgumentParser.validate_model_opts(opt)
    return opt


def model_step(model, batch, length, vocab_size, device, dtype):
    src = torch.randint(4, vocab_size, (batch, length, 1), device=device)
    tgt = torch.randint(4, vocab_size, (batch, length + 1, 1), device=device)
    src_len = torch.full((batch,), length, device=device)

    def step():
        model.zero_grad(set_to_none=True)
        with autocast(device, dtype):
            out, _ = model(src, tgt, src_len)
            logits = model.generator(out)
        F.cross_entropy(logits.float().flatten(0, 1), tgt[:, 1:, 0].flatten()).backward()

    return step


def benchmark_model(args, device, dtype, where, budget):
    specials = [DefaultTokens.UNK, DefaultTokens.PAD, DefaultTokens.BOS, DefaultTokens.EOS]
    vocab = pyonmttok.build_vocab_from_tokens([f"w{i}" for i in range(args.vocab)], special_tokens=specials)
    vocabs = {"src": vocab, "tgt": vocab, "data_task": "seq2seq", "decoder_start_token": DefaultTokens.BOS}

    def methods(path, length):
        def step_of(extra, stock):
            if stock and path == "triton":
                return None  # OpenNMT-py's own layers do not take the kernel
            torch.manual_seed(0)
            with openmt_attention_only() if stock else contextlib.nullcontext():
                model = model_builder.build_base_model(model_options(args, extra, path), vocabs)
            for parameter in model.parameters():
                torch.nn.init.uniform_(parameter, -0.1, 0.1)
            return model_step(model.to(device).train(), max(1, args.tokens // length), length, len(vocab), device,
                              dtype)

        return {name: lambda extra=extra, stock=stock: step_of(extra, stock)
                for name, (extra, stock) in model_methods(args.far).items()}

    return measure_rows(where, methods, args, device, budget)


# --- 3. onmt_train on INTERPOLATE-length data ------------------------------------------

def join_sentences(sentences):
    """One line of whitespace tokens, <sep> between the sentences (also empty ones)."""
    tokens = []
    for sentence in sentences:
        tokens += (["<sep>"] if tokens else []) + sentence.split()
    return " ".join(tokens)


def join_pairs(src_lines, tgt_lines, group=10):
    """INTERPOLATE: groups of `group` consecutive pairs, joined with <sep>."""
    starts = range(0, len(src_lines) - group + 1, group)
    return [tuple(join_sentences(side[start : start + group]) for side in (src_lines, tgt_lines)) for start in starts]


def train_methods(far):
    shaw = {"max_relative_positions": far}
    return {
        "APE, OpenNMT-py alone": ({"position_encoding": True}, True),
        "APE": ({"position_encoding": True}, False),
        "SHAPE K=500": ({"position_encoding": True, "shape_max_shift": 500}, False),
        "built-in Shaw, OpenNMT-py alone": (shaw, True),
        **{f"our {name}": (settings, False) for name, settings in registered_variants(far).items()},
        # on CUDA the runs above take the Triton kernel: our Shaw without it
        "our shaw, attention_kernel pytorch": ({**shaw, "attention_kernel": "pytorch"}, False),
    }


# The train part's baselines, whatever --train-methods says: its table's two ratios are to them
TRAIN_BASELINES = ("APE, OpenNMT-py alone", "APE")


def onmt_train(config, env):
    """Run onmt_train; returns its log and the CPU seconds it used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    command = [str(Path(sys.executable).parent / "onmt_train"), "-config", str(config)]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise RuntimeError(f"onmt_train -config {config} failed:\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return done.stdout + done.stderr, cpu


def reported(log, pattern):
    """(source + target) figures of each onmt_train report, the first (warm-up) left out."""
    values = [int(src) + int(tgt) for src, tgt in re.findall(pattern, log)]
    if len(values) < 2:
        raise RuntimeError(f"onmt_train reported {len(values)} times; raise --train-steps\n{log[-3000:]}")
    return values[1:]


def throughput(config, settings, env, args, device):
    """Tokens per second of training after the first report. GPU: onmt_train's own
    (wall-clock) figures. CPU: tokens over CPU seconds, the CPU seconds of start-up
    and of the first report's steps removed by a second, shorter run."""
    config.write_text(yaml.safe_dump(settings), encoding="utf-8")
    log, cpu = onmt_train(config, env)
    said = [line.split("] ", 1)[-1] for line in log.splitlines() if ATTENTION_SAID.search(line)]
    if device.type == "cuda":
        return statistics.mean(reported(log, r"(\d+)/\s*(\d+) tok/s")), said
    tokens = sum(reported(log, r"bsz:\s*(\d+)/\s*(\d+)/")) * args.train_report
    config.write_text(yaml.safe_dump({**settings, "train_steps": args.train_report}), encoding="utf-8")
    _, start_cpu = onmt_train(config, env)
    return tokens / (cpu - start_cpu), said


# What onmt_train's log says of the attention that ran: the SDPA backends, the kernel's first-use check
ATTENTION_SAID = re.compile(r"on PyTorch's SDPA|first-use check|fused Triton kernel is off")


def benchmark_train(args, device, budget):
    """Train each method (APE's two baselines first) and print its row as it finishes; a run
    that fails loses its row only. Once `budget` would be spent by a run as long as the longest
    so far, the methods left are skipped, and said."""
    def lines(name):
        return (args.data / name).read_text(encoding="utf-8").split("\n")[: args.train_pairs]

    joined = join_pairs(lines("src-train.txt"), lines("tgt-train.txt"))
    mean_length = statistics.mean(len(src.split()) for src, _ in joined)
    env = {**os.environ}
    if device.type == "cpu" and args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for side, index in (("src", 0), ("tgt", 1)):
            (tmp / f"train.{side}").write_text("".join(pair[index] + "\n" for pair in joined), encoding="utf-8")
        base = {
            "data": {"interpolate": {"path_src": str(tmp / "train.src"), "path_tgt": str(tmp / "train.tgt")}},
            "save_data": str(tmp / "samples"), "src_vocab": str(tmp / "vocab.src"),
            "tgt_vocab": str(tmp / "vocab.tgt"), "overwrite": True,
            "encoder_type": "transformer", "decoder_type": "transformer",
            "layers": args.model_layers, "heads": args.model_heads, "hidden_size": args.model_dim,
            "word_vec_size": args.model_dim, "transformer_ff": 4 * args.model_dim,
            "dropout": [0.1], "attention_dropout": [args.attention_dropout],
            "batch_type": "tokens", "batch_size": args.train_batch, "bucket_size": 512, "num_workers": 0,
            "optim": "adam", "learning_rate": 0.0005, "train_steps": args.train_steps,
            "report_every": args.train_report, "valid_steps": 10**6,
            "save_checkpoint_steps": 10**6, "save_model": str(tmp / "model"), "seed": 1,
        }
        if device.type == "cuda":
            base.update(world_size=1, gpu_ranks=[0], model_dtype="fp16")
        vocab_config = tmp / "vocab.yaml"
        vocab_config.write_text(yaml.safe_dump(base), encoding="utf-8")
        build_vocab = [Path(sys.executable).parent / "onmt_build_vocab", "-config", vocab_config, "-n_sample", "-1"]
        subprocess.run([str(a) for a in build_vocab], check=True, capture_output=True, env=env)
        print(f"\n## onmt_train on INTERPOLATE-length data ({len(joined)} examples of 10 toy-ende pairs, "
              f"mean {mean_length:.0f} source tokens; {args.model_layers} layers, d={args.model_dim}, "
              f"batch {args.train_batch} tokens, {args.train_steps} steps)\n")
        per = "second" if device.type == "cuda" else "CPU second"
        print(f"| method | tokens per {per} | vs APE | vs APE, OpenNMT-py alone |\n|---|---|---|---|", flush=True)
        chosen = [name for name in train_methods(args.far)
                  if not args.train_methods or name in (*TRAIN_BASELINES, *args.train_methods)]
        longest, skipped = 0.0, []
        for name in chosen:
            settings, stock = train_methods(args.far)[name]
            if budget.spent(longest):
                skipped.append(name)
                continue
            method_env = {**env, "ONMT_POSENC": "off"} if stock else env
            started = time.monotonic()
            try:
                results[name], said = throughput(tmp / "train.yaml", {**base, **settings}, method_env, args, device)
            except (RuntimeError, subprocess.SubprocessError, OSError) as error:  # its row only
                results[name], said = failure(error), str(error).splitlines()[1:][-20:]
            longest = max(longest, time.monotonic() - started)
            print(train_row(name, results), flush=True)
            print(f"  onmt_train {name} done" + "".join(f"\n    {line}" for line in said), file=sys.stderr,
                  flush=True)
        if skipped:
            print(f"\nskipped: train | {len(skipped)} methods, the budget ({budget.seconds:.0f} s) would be spent "
                  f"(a run took up to {longest:.0f} s): {'; '.join(skipped)}", flush=True)
    return results


def train_row(name, rates):
    """The train table's row of `name`: its rate and the ratios to APE's two baselines (measured first)."""
    rate = rates[name]
    if isinstance(rate, str):
        return f"| {name} | {rate} | | |"
    ratios = [f"x{rate / rates[base]:.2f}" if isinstance(rates.get(base), (int, float)) else "–" for base in
              ("APE", "APE, OpenNMT-py alone")]
    return f"| {name} | {rate:.0f} | " + " | ".join(ratios) + " |"


# --- tables --------------------------------------------------------------------------------

def table_cell(cells, base, length, index, scale, ratio):
    """A table's cell: the figure and its ratio to APE's; "failed" or "skipped" where there is none."""
    cell = cells.get(length, "skipped")
    if isinstance(cell, str):
        return cell.split(":")[0]
    against = base.get(length)
    return f"{cell[index] * scale:.1f}" + (f" (x{ratio(against[index], cell[index]):.2f})"
                                          if isinstance(against, tuple) else "")


def print_layer_tables(title, results, reference, lengths):
    for path in results:
        rows = results[path]
        base = results[BASE_PATH[path]].get(reference, {})
        for index, what, scale, ratio in ((0, "ms (speed vs APE)", 1e3, lambda ape, it: ape / it),
                                          (1, "peak MiB (memory vs APE)", 2**-20, lambda ape, it: it / ape)):
            print(f"\n### {title}, {path} path: {what}\n")
            print("| method | " + " | ".join(f"L={n}" for n in lengths) + " |")
            print("|---|" + "---|" * len(lengths))
            for name, cells in rows.items():
                print(f"| {name} | " + " | ".join(table_cell(cells, base, n, index, scale, ratio) for n in lengths)
                      + " |")


@contextlib.contextmanager
def sdpa_backends_said():
    """The lines in which our self-attention says which SDPA backend ran (each kind of call
    once: said again for this block)."""
    said = []

    class Said(logging.Handler):
        def emit(self, record):
            if "on PyTorch's SDPA" in record.getMessage():
                said.append(record.getMessage().replace("onmt-posenc self-attention on PyTorch's SDPA ", ""))

    SDPA_LOGGED.clear()
    handler = Said()
    logger.addHandler(handler)
    logger.setLevel(min(logger.level or logging.INFO, logging.INFO))
    try:
        yield said
    finally:
        logger.removeHandler(handler)


def timed_part(title, reference, measure_part, args, device):
    """Measure a part in each dtype, each a fair share of the budget; print its tables, the SDPA
    backends and the Triton compiles as soon as each dtype is done."""
    budget = Budget(args.budget)
    for done, dtype_name in enumerate(args.dtypes):
        dtype = DTYPES[dtype_name]
        with sdpa_backends_said() as backends, CompileTimes() as compiles:
            results = measure_part(args, device, dtype, f"{title} {dtype_name}", budget.share(len(args.dtypes) - done))
        where = f"{title}, {dtype_name}" + (" autocast" if dtype != torch.float32 else "")
        print(f"\nSDPA's backends ({where}): " + ("; ".join(backends) or "none said"))
        print_layer_tables(where, results, reference, args.lengths)
        compiles.print_table(where)
        sys.stdout.flush()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", nargs="+", choices=("layer", "model", "train"), default=["layer", "model", "train"])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtypes", nargs="+", choices=tuple(DTYPES), default=None,
                        help="layer and model parts; fp16 and bf16 under autocast (default: both on CUDA, fp32 on CPU)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: PyTorch's)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 128, 512, 1024])
    parser.add_argument("--tokens", type=int, default=2048, help="tokens per batch (batch = tokens // L)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per method (best is kept)")
    parser.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                        help="each part's seconds: it starts nothing after, and says what it skipped (default: none)")
    parser.add_argument("--d-model", type=int, default=512, help="layer part")
    parser.add_argument("--heads", type=int, default=8, help="layer part")
    parser.add_argument("--far", type=int, default=16, help="max_relative_positions (K)")
    parser.add_argument("--music-far", type=int, default=64,
                        help="layer part: Music's K (its Q E^T grows with it, L x 2K + 1 a head)")
    parser.add_argument("--attention-dropout", type=float, default=0.1)
    parser.add_argument("--model-layers", type=int, default=3, help="model and train parts")
    parser.add_argument("--model-dim", type=int, default=256, help="model and train parts")
    parser.add_argument("--model-heads", type=int, default=4, help="model and train parts")
    parser.add_argument("--vocab", type=int, default=8000, help="model part: vocabulary size")
    parser.add_argument("--data", type=Path, default=TOY_ENDE, help="train part: folder with {src,tgt}-train.txt")
    parser.add_argument("--train-pairs", type=int, default=4000, help="pairs of --data joined by 10")
    parser.add_argument("--train-steps", type=int, default=24)
    parser.add_argument("--train-report", type=int, default=4, help="onmt_train report_every")
    parser.add_argument("--train-batch", type=int, default=1024, help="onmt_train batch_size (tokens)")
    parser.add_argument("--train-methods", nargs="+", default=None, metavar="NAME",
                        help="train part: these methods besides APE's two baselines (default: every one: "
                        + "; ".join(name for name in train_methods(16) if name not in TRAIN_BASELINES) + ")")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.train_methods or ()) - set(train_methods(args.far)))
    if unknown:
        parser.error(f"--train-methods: no method {', '.join(map(repr, unknown))}; the methods: "
                     + "; ".join(name for name in train_methods(args.far) if name not in TRAIN_BASELINES))

    device = torch.device(args.device)
    args.dtypes = args.dtypes or (["bf16", "fp16"] if device.type == "cuda" else ["fp32"])
    if args.threads:
        torch.set_num_threads(args.threads)
    if device.type == "cuda":  # TF32 for the float32 products, as mixed-precision training takes them
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    triton = (f", Triton {importlib.metadata.version('triton')}"
              if "triton" in paths_on(device) and importlib.util.find_spec("triton") else "")
    interpreted = " (Triton's interpreter: a dry run, no speeds)" if device.type == "cpu" and fused_kernel.interpreted() \
        else ""
    print(f"# Position methods in OpenNMT-py attention: {where}, torch {torch.__version__}{triton}{interpreted}")
    timing = "wall time" if device.type == "cuda" else "CPU time of the process"
    print(f"\nK = {args.far}, attention dropout {args.attention_dropout}, training mode; "
          f"{args.tokens} tokens per batch; best of {args.repeats} runs ({timing}).", flush=True)

    if "layer" in args.parts:
        print(f"\n## One self-attention layer (d={args.d_model}, {args.heads} heads), forward + backward")
        print("\nAPE, SHAPE and no PE differ only in the embeddings: one row here.")
        timed_part("Layer", "APE / SHAPE / none", benchmark_layer, args, device)
    if "model" in args.parts:
        print(f"\n## Encoder-decoder model ({args.model_layers}+{args.model_layers} layers, d={args.model_dim}, "
              f"{args.model_heads} heads, vocabulary {args.vocab}), forward + backward with the loss")
        timed_part("Model", "APE", benchmark_model, args, device)
    if "train" in args.parts:
        benchmark_train(args, device, Budget(args.budget))


if __name__ == "__main__":
    main()
