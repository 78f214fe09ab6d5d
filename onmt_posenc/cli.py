"""`onmt-posenc COMMAND ...`: the project's own commands.

Each command is a module with `add_arguments(parser)` and `main(args)`; the
table below maps command names to modules, imported only when run.
"""
import argparse
import importlib
import sys

COMMANDS = {
}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="onmt-posenc", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = argv if argv is not None else sys.argv[1:]
    for name, (module_name, summary) in COMMANDS.items():
        sub = commands.add_parser(name, help=summary, description=summary)
        # Import a command's module only to run it or to show its own help.
        if chosen[:1] == [name]:
            module = importlib.import_module(module_name)
            module.add_arguments(sub)
            sub.set_defaults(run=module.main)
    args = parser.parse_args(chosen)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
