"""Sentences per second: CTranslate2 against onmt_translate, same model, same beam.

Each OpenNMT-py checkpoint is exported with the stock
`onmt_release_model --format ctranslate2` (the extension's export, see
onmt_posenc/model/export.py), then both engines translate the same sentences with the
same decoding settings: beam size, batch of --batch_size sentences, at most
--max_length tokens, no length normalization, no length-ratio cap. Model loading
is not timed; each engine's best of --repeats runs is reported, with the share of
identical outputs as a check that both did the same work.

    python tools/benchmark_ctranslate2.py --model ape.pt shape.pt shaw.pt \
        --src tests/data/small_parallel_enja/test.en --beam 4 --threads 1
"""
import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onmt  # noqa: F401  (activates the extension)
import torch
from onmt.bin.translate import _get_parser
from onmt.inference_engine import InferenceEnginePY
from onmt.utils.parse import ArgumentParser

from onmt_posenc.model import export


def describe(checkpoint_path):
    """The model's position scheme in a few words, from its options."""
    info = export.metadata(export.model_options(torch.load(checkpoint_path)["opt"]))
    if "relative_attention" in info:
        return f"{info['relative_attention']} {info['relative_values']} (+-{info['max_relative_positions']})"
    if "relative_positions_buckets" in info:
        return f"T5 bias, {info['relative_positions_buckets']} buckets up to {info['max_relative_positions']}"
    if "rotary_theta" in info:
        return f"rotary{' interleaved' if info['rotary_interleave'] else ''}, theta {info['rotary_theta']}"
    sides = f"{info['src_position_encoding']}/{info['tgt_position_encoding']}"
    return sides + (f" offset {info['shape_inference_offset']}" if "shape_inference_offset" in info else "")


def release(checkpoint_path, output_dir):
    bin_dir = Path(sys.executable).parent
    subprocess.run(
        [str(bin_dir / "onmt_release_model"), "--model", str(checkpoint_path), "--output", str(output_dir),
         "--format", "ctranslate2"],
        check=True, capture_output=True,
    )  # fmt: skip


def best_time(run, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return min(times), result


def time_onmt(args, checkpoint_path, workdir):
    output = Path(workdir) / "onmt.out"
    opt = _get_parser().parse_args([
        "-model", str(checkpoint_path), "-src", str(args.src_head), "-output", str(output),
        "-beam_size", str(args.beam), "-batch_size", str(args.batch_size), "-batch_type", "sents",
        "-length_penalty", "none", "-max_length", str(args.max_length), "-max_length_ratio", "0",
        "-gpu", "0" if args.device == "cuda" else "-1", "-log_file", str(Path(workdir) / "onmt.log"),
    ])  # fmt: skip
    # What onmt.bin.translate.translate does before it builds the same engine.
    ArgumentParser.validate_translate_opts(opt)
    ArgumentParser._get_all_transform_translate(opt)
    ArgumentParser._validate_transforms_opts(opt)
    ArgumentParser.validate_translate_opts_dynamic(opt)
    engine = InferenceEnginePY(opt)

    def run():
        engine.infer_file()
        return [line.split() for line in output.read_text(encoding="utf-8").splitlines()]

    seconds, translations = best_time(run, args.repeats)
    engine.terminate()
    return seconds, translations


def time_ctranslate2(args, model_dir, source):
    translator = export.open_translator(
        model_dir, device=args.device, compute_type=args.compute_type, intra_threads=args.threads
    )

    def run():
        results = translator.translate_batch(
            source, max_batch_size=args.batch_size, beam_size=args.beam, length_penalty=0,
            max_decoding_length=args.max_length, min_decoding_length=0,
        )  # fmt: skip
        return [result.hypotheses[0] for result in results]

    return best_time(run, args.repeats)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", nargs="+", required=True, help="OpenNMT-py checkpoints")
    parser.add_argument("--src", required=True, help="tokenized source sentences, one per line")
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--max_length", type=int, default=250)
    parser.add_argument("--threads", type=int, default=1, help="torch threads and CTranslate2 intra_threads")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument(
        "--compute_type", default="default",
        help="CTranslate2's (default: the exported float32; int8 quantizes at load, "
        "so outputs may then differ from onmt_translate's)",
    )  # fmt: skip
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as workdir:
        lines = Path(args.src).read_text(encoding="utf-8").splitlines()[: args.sentences]
        args.src_head = Path(workdir) / "src.txt"
        args.src_head.write_text("\n".join(lines) + "\n", encoding="utf-8")
        source = [line.split() for line in lines]
        print(f"{len(lines)} sentences, beam {args.beam}, batch {args.batch_size}, {args.device}, "
              f"{args.threads} thread(s), CTranslate2 compute type {args.compute_type}, "
              f"best of {args.repeats}")  # fmt: skip
        print("| model | positions | onmt_translate sent/s | CTranslate2 sent/s | speed-up | identical | tokens/sent |")
        print("|---|---|---|---|---|---|---|")
        for i, checkpoint_path in enumerate(args.model):
            model_dir = Path(workdir) / f"ct2_{i}"
            release(checkpoint_path, model_dir)
            onmt_seconds, reference = time_onmt(args, checkpoint_path, workdir)
            ct2_seconds, ours = time_ctranslate2(args, model_dir, source)
            same = sum(a == b for a, b in zip(ours, reference))
            length = sum(map(len, ours)) / len(ours)
            print(f"| {Path(checkpoint_path).name} | {describe(checkpoint_path)} | {len(lines) / onmt_seconds:.1f} | "
                  f"{len(lines) / ct2_seconds:.1f} | x{onmt_seconds / ct2_seconds:.2f} | {same}/{len(lines)} | "
                  f"{length:.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
