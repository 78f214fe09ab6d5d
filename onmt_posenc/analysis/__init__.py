"""The SHAPE paper's analyses, each usable on any trained OpenNMT-py model and
each an `onmt-posenc` command of its own:

    swapped            move the first sentence of INTERPOLATE examples to the end
    shift_invariance   encoder hidden states under position offsets
    length_buckets     BLEU and the gain over a baseline by source length
    token_nll          which model gives gold tokens the lower NLL, by position x frequency
    speed              training throughput of models against a baseline, same batches
    position_ablation  features and perplexity with the position encoding removed
"""


def labelled(pairs, option, what):
    """{label: value} of a repeated command-line option `--option LABEL=WHAT`."""
    values = {}
    for pair in pairs:
        label, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--{option} expects LABEL={what}, got {pair!r}")
        values[label] = value
    return values
