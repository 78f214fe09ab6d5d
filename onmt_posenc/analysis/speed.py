"""Relative training speed of position methods (SHAPE paper, Table 2, "Speed").

Every model runs the same training batches (forward, loss, backward, in
training mode so SHAPE draws its shifts) and its throughput in tokens/s
(source + target, padding excluded) is divided by the baseline's. The models
take turns batch by batch, so a machine that slows down for a moment slows
all of them alike. The optimizer update is left out (it costs RPE and Music a
little more, for their distance tables), so this is a micro-benchmark of the
model; `onmt-posenc run` measures real training speed in every run instead.

    onmt-posenc speed --model ape=ape.pt --model shape=shape.pt --model rpe=rpe.pt \\
        --src valid.src --tgt valid.tgt --baseline ape
"""
import json
import time

import torch

from onmt_posenc.analysis import AnalysisError, check_outputs, labelled, models
from onmt_posenc.core.arguments import positive_int


def training_step(model, batch):
    _, _, gold_log_probs = models.teacher_forced(model, batch)
    (-gold_log_probs.sum()).backward()
    model.zero_grad(set_to_none=True)


def throughput(loaded_models, src_lines, tgt_lines, batches=8, rounds=3, max_tokens=2048):
    """{label: tokens per second} of each model over the same `batches` batches, `rounds` times."""
    some = next(iter(loaded_models.values()))
    chosen = list(models.batches(some.vocabs, src_lines, tgt_lines, max_tokens=max_tokens))
    # Every length, not only the shortest: spread the chosen batches over the sorted list.
    step = max(len(chosen) // batches, 1)
    chosen = chosen[::step][:batches]
    for label, loaded in loaded_models.items():
        if loaded.vocabs["src"].ids_to_tokens != some.vocabs["src"].ids_to_tokens or \
                loaded.vocabs["tgt"].ids_to_tokens != some.vocabs["tgt"].ids_to_tokens:
            raise ValueError(f"{label} has other vocabularies than the first model: not the same batches")
        loaded.model.train()
        training_step(loaded.model, chosen[0])  # warm-up
    padding = models.padding_id(some.model, "tgt")
    tokens = rounds * sum(int(batch["srclen"].sum()) + int((batch["tgt"][:, 1:] != padding).sum()) for batch in chosen)
    seconds = dict.fromkeys(loaded_models, 0.0)
    for _ in range(rounds):
        for batch in chosen:
            for label, loaded in loaded_models.items():
                start = time.perf_counter()
                training_step(loaded.model, batch)
                seconds[label] += time.perf_counter() - start
    for loaded in loaded_models.values():
        loaded.model.eval()
    return {label: tokens / seconds[label] for label in loaded_models}


def relative(tokens_per_second, baseline):
    return {label: value / tokens_per_second[baseline] for label, value in tokens_per_second.items()}


def add_arguments(parser):
    parser.add_argument("--model", action="append", required=True, metavar="LABEL=CHECKPOINT",
                        help="a model to time (repeat; all must share vocabularies)")
    parser.add_argument("--baseline", help="LABEL the speeds are relative to (default: the first)")
    parser.add_argument("--src", required=True, help="source sentences to build batches from")
    parser.add_argument("--tgt", required=True, help="their translations")
    parser.add_argument("--batches", type=positive_int, default=8, help="batches per round (default: %(default)s)")
    parser.add_argument("--rounds", type=positive_int, default=3, help="passes over the batches (default: %(default)s)")
    parser.add_argument("--batch-tokens", type=positive_int, default=2048,
                        help="tokens per batch (default: %(default)s)")
    parser.add_argument("--json", help="write the result to this JSON file")


def main(args):
    paths = labelled(args.model, "model", "CHECKPOINT")
    baseline = args.baseline or next(iter(paths))
    if baseline not in paths:
        raise AnalysisError(f"--baseline {baseline!r} is not one of the --model labels {sorted(paths)}")
    check_outputs(args, "json")
    src, tgt = models.read_tokens([args.src, args.tgt])
    for path in paths.values():  # all, before the first loads
        models.check_model(path)
    loaded = {label: models.load_model(path) for label, path in paths.items()}
    speeds = throughput(loaded, src, tgt, args.batches, args.rounds, args.batch_tokens)
    ratios = relative(speeds, baseline)
    print(f"torch threads: {torch.get_num_threads()}")
    print("model".ljust(16) + "tokens/s".rjust(12) + f"  vs {baseline}")
    for label in paths:
        print(label.ljust(16) + f"{speeds[label]:12.0f}  x{ratios[label]:.2f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"tokens_per_second": speeds, "relative": ratios, "baseline": baseline}, f, indent=1)
