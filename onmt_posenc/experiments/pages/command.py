"""`onmt-posenc pages [--check] [TEMPLATE ...]`: every results page (or those of the templates
named) rendered again from its template and the records (pages.render); --check writes nothing
and fails on a page that differs."""
import sys
from pathlib import Path

from onmt_posenc.experiments.pages.render import ROOTS, render_all, templates


def add_arguments(parser):
    parser.add_argument("--root", type=Path, default=Path.cwd(),
                        help="the project's folder (default: here), which holds " + " and ".join(map(str, ROOTS)))
    parser.add_argument("templates", nargs="*", type=Path, metavar="TEMPLATE",
                        help="only these templates (*.md.jinja; default: all of the project's)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; list the pages that differ from their templates' render, exit 1 if any")


def main(args):
    found = [path.resolve() for path in args.templates] or templates(args.root)
    if not found:
        print(f"onmt-posenc pages: error: no *.md.jinja template under {args.root} "
              f"({', '.join(map(str, ROOTS))})", file=sys.stderr)
        return 2
    differed = render_all(args.root, check=args.check, only=found)
    for page in differed:
        print(f"{'differs' if args.check else 'rendered'}: {page}")
    print(f"{len(found)} templates, {len(differed)} pages {'differ' if args.check else 'written again'}")
    return 1 if args.check and differed else 0
