"""The fused Triton kernel's GPU resources, measured without a GPU: every kernel variant that
the defaults reach, compiled for sm_80 (A100) and sm_90 (H100, H200) in float16 and bfloat16
at head sizes 64 and 128, with its registers, spilled bytes and shared memory; and the same in
float32, with IEEE products (PyTorch's default, OpenNMT-py's model_dtype fp32) and with TF32,
which attention_kernel 'auto' leaves to the PyTorch path on CUDA (first_use.FIT_ON_CUDA) and only
'triton' reaches.

Each variant is launched as training, validation and translation launch it: a method's layer
(built by `replacement_for`, as onmt_train builds it) attends on the kernel, forward and
backward, with the launches recorded instead of run; each recorded launch is specialized by
Triton's own JIT binder (its argument types, the integers equal to 1, the 16-divisible
pointers and integers) and compiled with `triton.compile(ASTSource(...),
target=GPUTarget("cuda", 90, 32))`, then assembled by the ptxas that Triton's wheel ships
(whose -v log gives the registers and spills); shared memory is Triton's own figure. No
interpreter, no GPU; Triton 3.x's binder is internal API (`create_function_from_signature`,
`JITFunction._pack_args`).

    python tools/kernel_resources.py                     # the whole table -> docs/kernel_resources.md
    python tools/kernel_resources.py --subset ci --check # CI's subset (`jobs`); exit 1 if a target is missed
    python tools/kernel_resources.py --subset image --beside  # under another Triton: where it differs

`--beside` (with `--subset image`, the lent H200's kernels: sm_90, float16 and bfloat16, every
method) compiles under the Triton installed and writes, into docs/kernel_resources.md below its
table, a section of that Triton's figures where they differ from the table's (the table itself,
the whole set under one Triton, stays as it was).

Targets (--check): no spills in float16 and bfloat16 at d_head 64, forward and backward, for
Shaw K = 16, T5, ALiBi and the decaying mask; shared memory within sm_80's 163 KiB a block (every
dtype).
"""
import argparse
import contextlib
import dataclasses
import importlib.metadata
import io
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)  # compiled kernels, not the interpreter
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default, said (it warns otherwise)

import onmt  # noqa: E402,F401  (activates onmt_posenc)
import torch  # noqa: E402
from onmt.modules.multi_headed_attn import MultiHeadedAttention  # noqa: E402

from onmt_posenc.model.attention import replacement_for  # noqa: E402
from onmt_posenc.model.attention.fused_kernel import first_use  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TABLE = REPO / "docs" / "kernel_resources.md"
# sm_80's largest shared memory a block may take (A100: 163 KiB); sm_90's is 227 KiB
SHARED_LIMIT = {80: 163 * 1024, 90: 227 * 1024}
ARCHS = (80, 90)
# The dtypes compiled: 'auto''s on CUDA first (the spill targets'), then float32 with IEEE and
# with TF32 products (the kernel takes PyTorch's torch.backends.cuda.matmul.allow_tf32)
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "tf32": torch.float32}
AUTO_DTYPES = tuple(name for name, dtype in DTYPES.items() if dtype in first_use.FIT_ON_CUDA)
HEAD_SIZES = (64, 128)
HEADS, LENGTH, FAR = 2, 200, 16  # a length that is no multiple of 16: the general specialization
# (relative_attention options of MultiHeadedAttention, relative_attention, relative_values)
METHODS = {
    "shaw K=16": (dict(max_relative_positions=FAR), "shaw", "shared"),
    "shaw K=16 keys": (dict(max_relative_positions=FAR), "shaw", "none"),
    "shaw K=64": (dict(max_relative_positions=64), "shaw", "shared"),
    "music K=16": (dict(max_relative_positions=FAR), "music", None),
    "t5": (dict(max_relative_positions=128, relative_positions_buckets=32), None, None),
    "alibi": (dict(max_relative_positions=-2), None, None),
    "decay": (dict(), "decay", None),
}
# What a side launches: training (dropout, padding; forward and backward), a whole sequence
# without dropout (validation; translation's encoder), and the decoder's steps (one query, the
# layer cache, no mask).
MODES = {"encoder": ("train", "eval"), "decoder": ("train", "eval", "step")}
# The targets CI checks (methods at d_head 64, float16 and bfloat16)
TARGET_METHODS = ("shaw K=16", "t5", "alibi", "decay")


@dataclasses.dataclass(frozen=True)
class Variant:
    method: str
    side: str
    mode: str
    dtype: str
    head_size: int


def jobs(subset):
    """[(variant, arch)] to compile. `ci`, the targets' kernels at d_head 64: the decoder's
    training (causal) in float16 and bfloat16 for sm_90, the encoder's in float16 for sm_80, and
    the decoder's step in float16 for sm_90."""
    if subset == "image":
        return [(Variant(m, side, mode, dtype, d), 90) for m in METHODS for side, modes in MODES.items()
                for mode in modes for dtype in AUTO_DTYPES for d in HEAD_SIZES]
    if subset == "ci":
        return ([(Variant(m, "decoder", "train", dtype, 64), 90) for m in TARGET_METHODS for dtype in AUTO_DTYPES]
                + [(Variant(m, "encoder", "train", "fp16", 64), 80) for m in TARGET_METHODS]
                + [(Variant(m, "decoder", "step", "fp16", 64), 90) for m in TARGET_METHODS])
    return [(Variant(m, side, mode, dtype, d), arch) for m in METHODS for side, modes in MODES.items()
            for mode in modes for dtype in DTYPES for d in HEAD_SIZES for arch in ARCHS]


def recorded_launches(variant):
    """[(kernel, arguments)] that the kernel's autograd Function launches for this variant."""
    from onmt_posenc.model.attention import fused_kernel
    from onmt_posenc.model.attention.fused_kernel import function

    fused_kernel.TILES["cpu"] = fused_kernel.TILES["cuda"]  # the tiles a GPU takes, for tensors made here
    options, relative_attention, values = METHODS[variant.method]
    decoder = variant.side == "decoder"
    stock = MultiHeadedAttention(HEADS, HEADS * variant.head_size, dropout=0.1, is_decoder=decoder, attn_type="self",
                                 **options)
    module = replacement_for(stock, "scaled-dot-flash", relative_attention, values)
    module.train(variant.mode == "train")
    dtype = DTYPES[variant.dtype]
    query_len = 1 if variant.mode == "step" else LENGTH
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, HEADS, length, variant.head_size, generator=generator).to(dtype).requires_grad_()
               for length in (query_len, LENGTH, LENGTH))
    mask = None
    if variant.mode != "step":
        mask = torch.zeros(2, 1, LENGTH, LENGTH, dtype=torch.bool)
        mask[1, ..., LENGTH - 7:] = True
    launches = []
    launch, tf32 = function.KernelArguments.launch, torch.backends.cuda.matmul.allow_tf32
    function.KernelArguments.launch = lambda arguments, kernel: launches.append(
        (kernel, {**arguments.for_kernel(kernel), **arguments.options(kernel)}))
    torch.backends.cuda.matmul.allow_tf32 = variant.dtype == "tf32"
    try:
        out = module.kernel_attend(q, k, v, mask)
        if variant.mode == "train":
            out.float().sum().backward()
    finally:
        function.KernelArguments.launch, torch.backends.cuda.matmul.allow_tf32 = launch, tf32
    return launches


def specialization(kernel, arguments, arch):
    """What Triton's JIT would compile for this launch on sm_`arch`: (ASTSource, options),
    by its own binder (argument types, integers equal to 1, 16-divisible pointers and integers)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    backend = make_backend(GPUTarget("cuda", arch, 32))
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    kwargs = dict(arguments)  # with the launch's num_warps and num_stages
    bound, specialized, options = binder(**kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound, specialized, options)
    return ASTSource(kernel, signature, constexprs, attrs), options


def compile_offline(kernel, arguments, arch):
    """Compile one launch for sm_`arch` as Triton's JIT would on that GPU; returns the
    compiled kernel, the ptxas log and the seconds it took."""
    import triton
    from triton.backends.compiler import GPUTarget

    source, options = specialization(kernel, arguments, arch)
    triton.knobs.nvidia.dump_ptxas_log = True
    triton.knobs.compilation.always_compile = True  # a cached kernel runs no ptxas, so has no log
    log = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(log):
        compiled = triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options.__dict__)
    return compiled, log.getvalue(), time.perf_counter() - started


def ptxas_figure(log, pattern):
    found = re.search(pattern, log)
    if found is None:
        raise RuntimeError(f"no '{pattern}' in the ptxas log:\n{log[-2000:]}")
    return int(found.group(1))


def measure(job):
    """One row per kernel the variant launches, for one architecture."""
    variant, arch = job
    rows = []
    for kernel, arguments in recorded_launches(variant):
        compiled, log, seconds = compile_offline(kernel, arguments, arch)
        rows.append(dict(
            **dataclasses.asdict(variant), arch=arch, kernel=kernel.__name__,
            registers=ptxas_figure(log, r"Used (\d+) registers"),
            spill_stores=ptxas_figure(log, r"(\d+) bytes spill stores"),
            spill_loads=ptxas_figure(log, r"(\d+) bytes spill loads"),
            stack=ptxas_figure(log, r"(\d+) bytes stack frame"),
            shared=compiled.metadata.shared, seconds=seconds))
    return rows


KERNEL_NAMES = {"attention_forward": "forward", "attention_backward_keys": "dK dV",
                "attention_backward_queries": "dQ, tables"}


def spill_target(row):
    """Is the row held to no spills (the targets' methods at d_head 64, in auto's dtypes)?"""
    return row["method"] in TARGET_METHODS and row["head_size"] == 64 and row["dtype"] in AUTO_DTYPES


def missed(row):
    """Why a row misses a target (None: it meets those that apply)."""
    reasons = []
    if row["shared"] > SHARED_LIMIT[80]:
        reasons.append(f"shared memory {row['shared']} B > sm_80's {SHARED_LIMIT[80]} B")
    if spill_target(row) and row["spill_stores"]:
        reasons.append(f"spills {row['spill_stores']} B")
    return "; ".join(reasons) or None


def verdict(row):
    """The table's last column: the targets that apply, met or missed."""
    return missed(row) or ("met" if spill_target(row) else "shared memory met (no spill target)")


def summary(rows):
    """A few lines over all rows: spills by dtype and head size, the most shared memory by
    architecture, compile times."""
    lines = []
    for dtype in DTYPES:
        for size in HEAD_SIZES:
            these = [row for row in rows if row["head_size"] == size and row["dtype"] == dtype]
            if not these:
                continue
            spilling = [row for row in these if row["spill_stores"]]
            most = max(spilling, key=lambda row: row["spill_stores"], default=None)
            lines.append(
                f"- {dtype}, d_head {size}: {len(these)} kernels, at most {max(r['registers'] for r in these)} "
                "registers; " + (f"{len(spilling)} spill, at most {most['spill_stores']} B ({describe(most)})"
                                 if spilling else "none spills"))
    for arch in ARCHS:
        these = [row for row in rows if row["arch"] == arch]
        if these:
            most = max(these, key=lambda row: row["shared"])
            lines.append(f"- sm_{arch}: at most {most['shared']} B of shared memory a block ({describe(most)}); "
                         f"the target, sm_80's limit: {SHARED_LIMIT[80]} B"
                         + (f" (sm_{arch}'s: {SHARED_LIMIT[arch]} B)" if arch != 80 else ""))
    seconds = sorted(row["seconds"] for row in rows)
    slowest = max(rows, key=lambda row: row["seconds"])
    lines.append(f"- compile: median {seconds[len(seconds) // 2]:.1f} s a kernel, at most {slowest['seconds']:.1f} s "
                 f"({describe(slowest)}), here")
    return lines


def describe(row):
    return (f"{row['method']} {row['side']} {row['mode']} {row['dtype']} d_head {row['head_size']} "
            f"{KERNEL_NAMES[row['kernel']]} sm_{row['arch']}")


def markdown(rows, triton_version):
    lines = [
        "# The fused kernel's GPU resources (compiled offline)",
        "",
        f"Written by `python tools/kernel_resources.py` (Triton {triton_version}, {len(rows)} kernels compiled "
        "without a GPU; how: the tool's docstring). One row per kernel that a method's layer launches: "
        "`train` (dropout and padding, forward and backward), `eval` (a whole sequence without dropout: "
        "validation, translation's encoder) and `step` (the decoder's steps: one query, no mask). "
        f"{LENGTH} keys (no multiple of 16). Registers a thread (255 at most), bytes spilled to local memory "
        "(stores), stack frame, shared memory a block (sm_80's limit: 163 KiB), compile seconds on this "
        "project's 2-core CPU.",
        "",
        "dtype: fp16 and bf16 (what `attention_kernel: auto` puts on the kernel on CUDA), fp32 (float32 with "
        "IEEE products: PyTorch's default, OpenNMT-py's `model_dtype: fp32`) and tf32 (float32 with "
        "`torch.backends.cuda.matmul.allow_tf32`); in float32 `auto` keeps PyTorch's path, `triton` takes the "
        "kernel.",
        "",
        "Targets: no spills at d_head 64 in fp16 and bf16 for Shaw K = 16, T5, ALiBi and the decaying mask; "
        "shared memory within sm_80's limit. Rows that miss one say so in the last column.",
        "",
        *summary(rows),
        "",
        "| method | side | mode | dtype | d | sm | kernel | registers | spilled B | stack B | shared B | compile s "
        "| targets |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['method']} | {row['side']} | {row['mode']} | {row['dtype']} | {row['head_size']} | "
            f"{row['arch']} | {KERNEL_NAMES[row['kernel']]} | {row['registers']} | {row['spill_stores']} | "
            f"{row['stack']} | {row['shared']} | {row['seconds']:.1f} | {verdict(row)} |")
    return "\n".join(lines) + "\n"


# The committed table's rows (as `markdown` writes them) and the section that --beside writes below it
TABLE_ROW = re.compile(r"^\| (?P<method>[^|]+) \| (?P<side>\w+) \| (?P<mode>\w+) \| (?P<dtype>\w+) \| "
                       r"(?P<head_size>\d+) \| (?P<arch>\d+) \| (?P<kernel>[^|]+) \| (?P<registers>\d+) \| "
                       r"(?P<spill_stores>\d+) \| (?P<stack>\d+) \| (?P<shared>\d+) \| [0-9.]+ \| [^|]+ \|$", re.M)
BESIDE = "\n## Under another Triton"
COMPARED = ("registers", "spill_stores", "stack", "shared")


def key(row):
    return tuple(str(row[name]) for name in ("method", "side", "mode", "dtype", "head_size", "arch")) + (
        KERNEL_NAMES.get(row["kernel"], row["kernel"]),)


def beside(table, rows, triton_version):
    """The table's text with its section of `rows`, compiled under `triton_version`: how many
    agree with the table's rows, and each that differs, both figures side by side."""
    text = table.split(BESIDE)[0].rstrip("\n") + "\n"
    committed = {key(match.groupdict()): match.groupdict() for match in TABLE_ROW.finditer(text)}
    built = re.search(r"Triton ([0-9.]+)", text).group(1)
    missing = [row for row in rows if key(row) not in committed]
    if missing:
        raise SystemExit(f"{len(missing)} kernels compiled are not in {TABLE}: {describe(missing[0])}, ...")
    differing = [row for row in rows if any(str(row[name]) != committed[key(row)][name] for name in COMPARED)]
    spilling = [row for row in rows if row["spill_stores"]]
    lines = [
        BESIDE.strip("\n") + f" (Triton {triton_version})",
        "",
        f"Written by `python tools/kernel_resources.py --subset image --beside` under Triton {triton_version}: "
        f"{len(rows)} kernels for sm_90 in fp16 and bf16 (the lent H200's), every method, side, mode and head "
        f"size. Against the table above (Triton {built}): {len(rows) - len(differing)} agree in registers, "
        f"spills, stack and shared memory, {len(differing)} differ. Under Triton {triton_version} "
        + (f"{len(spilling)} spill, at most {max(r['spill_stores'] for r in spilling)} B"
           if spilling else "none spills")
        + f"; {sum(1 for row in rows if missed(row))} miss a target.",
        "",
    ]
    if differing:
        lines += [f"| method | side | mode | dtype | d | sm | kernel | registers {built} / {triton_version} "
                  f"| spilled B | stack B | shared B | targets ({triton_version}) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for row in differing:
            before = committed[key(row)]
            lines.append("| " + " | ".join(key(row)) + " | " + " | ".join(
                f"{before[name]} / {row[name]}" for name in COMPARED) + f" | {verdict(row)} |")
    return text + "\n" + "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subset", choices=("all", "ci", "image"), default="all")
    parser.add_argument("--jobs", type=int, default=2, help="compiling processes")
    parser.add_argument("--output", type=Path, default=None,
                        help=f"the markdown table (default with --subset all: {TABLE.relative_to(REPO)})")
    parser.add_argument("--check", action="store_true", help="exit 1 if a row misses a target")
    parser.add_argument("--beside", action="store_true",
                        help="with --subset image: write this Triton's differences below the table "
                        f"({TABLE.relative_to(REPO)})")
    args = parser.parse_args(argv)
    if args.beside and args.subset != "image":
        parser.error("--beside goes with --subset image")
    todo = jobs(args.subset)
    print(f"compiling the kernels of {len(todo)} variants and architectures, {args.jobs} at a time", flush=True)
    rows = []
    with ProcessPoolExecutor(args.jobs) as pool:
        for done, found in enumerate(pool.map(measure, todo), 1):
            rows += found
            for row in found:
                print(f"[{done}/{len(todo)}] {row['method']} {row['side']} {row['mode']} {row['dtype']} "
                      f"d={row['head_size']} sm_{row['arch']} {row['kernel']}: {row['registers']} registers, "
                      f"{row['spill_stores']} B spilled, {row['shared']} B shared, {row['seconds']:.1f} s "
                      f"({verdict(row)})", flush=True)
    version = importlib.metadata.version("triton")
    output = args.output or (TABLE if args.subset == "all" or args.beside else None)
    if args.beside:
        output.write_text(beside(output.read_text(encoding="utf-8"), rows, version), encoding="utf-8")
        print(f"wrote {output}")
    elif output:
        old = output.read_text(encoding="utf-8") if output.exists() else ""
        kept = BESIDE + old.split(BESIDE, 1)[1] if BESIDE in old else ""
        output.write_text(markdown(rows, version) + kept, encoding="utf-8")
        print(f"wrote {output}")
    failing = [row for row in rows if missed(row)]
    if args.check and failing:
        print(f"{len(failing)} kernels miss a target", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
