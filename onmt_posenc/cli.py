"""`onmt-posenc COMMAND ...`: the project's own commands.

Each command is a module with `add_arguments(parser)` and `main(args)`; the
table below maps command names to modules, imported only when run.
"""
import argparse
import importlib
import sys

from onmt_posenc import __version__
from onmt_posenc.core.errors import UserError
from onmt_posenc.hooks.stock import StockCommandError
from onmt_posenc.installation import fix_for_missing

COMMANDS = {
    "chunk-ja": ("onmt_posenc.data.chunk_japanese", "Japanese phrase boundaries for perSPE (MeCab + nltk RegexpParser)"),
    "prepare": ("onmt_posenc.data.prepare_corpus", "Multi30k, KFTT, small_parallel_enja or toy-ende in the layout of `run --data`: download or local copy"),
    "prepare-wmt16": ("onmt_posenc.data.prepare_wmt16", "WMT16 En-De as in the SHAPE paper: download, then build all data settings"),
    "interpolate": ("onmt_posenc.data.interpolate", "INTERPOLATE dev/test files: join N sentences per line, split translations back"),
    "evaluate": ("onmt_posenc.core.scoring", "detokenized sacreBLEU per newstest year with dev/test macro averages"),
    "run": ("onmt_posenc.experiments.run", "run an experiment YAML: a grid of trainings, BLEU, analyses, and the report"),
    "report": ("onmt_posenc.experiments.report.command", "merge the finished runs of an experiment (all shards) into one report"),
    "pages": ("onmt_posenc.experiments.pages.command", "the committed results pages rendered again from their templates and records (--check: compare)"),
    "claims": ("onmt_posenc.experiments.report.claims_side_by_side", "the papers' claims in several batches side by side, each judged from its results.json"),
    "schema": ("onmt_posenc.experiments.file.schema", "the experiment file's JSON Schema, for editors (recipes/experiments/schema.json)"),
    "swapped": ("onmt_posenc.analysis.swapped", "swapped evaluation: BLEU of the first sentence moved to the end"),
    "joined-lines": ("onmt_posenc.analysis.joined_lines", "a translation of joined sentences line by line: separators, length, where the first sentence lands"),
    "shift-invariance": ("onmt_posenc.analysis.shift_invariance", "cosine similarity of encoder states under position offsets"),
    "length-buckets": ("onmt_posenc.analysis.length_buckets", "BLEU and gain over a baseline by source length"),
    "token-nll": ("onmt_posenc.analysis.token_nll", "share of gold tokens where model A has lower NLL than B"),
    "speed": ("onmt_posenc.analysis.speed", "forward-backward tokens/s of checkpoints relative to a baseline, same batches"),
    "position-ablation": ("onmt_posenc.analysis.position_ablation", "features and perplexity with the position encoding removed"),
    "length-penalty": ("onmt_posenc.analysis.length_penalty", "BLEU with each length penalty, chosen on valid: how much is length"),
    "doctor": ("onmt_posenc.installation", "check the installation: OpenNMT-py, torch and CUDA, Triton, the start-up hook, ONMT_POSENC"),
}


def step_left_out(error):
    """The one-line fix for a module missing from the installation (OpenNMT-py, torch, a
    dependency, imported as a command starts or while it runs); our own module missing is a bug."""
    missing = (error.name or "").split(".")[0]
    if missing in ("", "onmt_posenc"):
        raise error
    return fix_for_missing(missing)


class OneLineParser(argparse.ArgumentParser):
    """A bad argument in one line, `onmt-posenc COMMAND: error: ...` (exit 2), as the
    commands' own errors; `-h` shows the usage."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv=None):
    parser = OneLineParser(prog="onmt-posenc", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"onmt-posenc {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = argv if argv is not None else sys.argv[1:]
    for name, (module_name, summary) in COMMANDS.items():
        sub = commands.add_parser(name, help=summary, description=summary)
        # Import a command's module only to run it or to show its own help.
        if chosen[:1] == [name]:
            try:
                module = importlib.import_module(module_name)
                module.add_arguments(sub)  # which may import what the command needs
            except ModuleNotFoundError as error:  # an install step skipped (OpenNMT-py, torch, pip --no-deps)
                parser.exit(2, f"onmt-posenc {name}: error: {step_left_out(error)}\n")
            sub.set_defaults(run=module.main)
    args = parser.parse_args(chosen)
    try:
        return args.run(args)
    except ModuleNotFoundError as error:  # imported only as the command works (OpenNMT-py to load a model)
        print(f"onmt-posenc {args.command}: error: {step_left_out(error)}", file=sys.stderr)
        return 2
    # before UserError, which it is: a stock command that failed on input that passed the checks
    except StockCommandError as error:
        print(f"onmt-posenc {args.command}: error: {error}", file=sys.stderr)
        return 1
    except (UserError, OSError) as error:
        # what the user can fix: a file, an option, a value; a file missing or unreadable
        print(f"onmt-posenc {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
