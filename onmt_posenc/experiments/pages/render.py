"""The results pages from their templates: each `NAME.md.jinja` under the project's
`recipes/experiments/results/` and `docs/` renders `NAME.md` beside it, from the records of the
results folder it lies in (a page elsewhere names its folders). A template whose first line is
`{# section of PAGE: HEADING #}` renders that section of PAGE instead (the README's results),
from its heading to the next heading of its level.

Rendered with StrictUndefined: a name no record or function holds fails, said with the
template's line, as does a hand-typed figure or verdict word (typed)."""
import functools
import re
from pathlib import Path

import jinja2

from onmt_posenc.core.errors import UserError
from onmt_posenc.experiments.pages import plots, records, words
from onmt_posenc.experiments.pages.typed import typed_by_hand

RESULTS = Path("recipes") / "experiments" / "results"
ROOTS = (RESULTS, Path("docs"))
SUFFIX = ".jinja"
SECTION_OF = re.compile(r"\{#\s*section of (?P<page>\S+): (?P<heading>#+ .+?)\s*#\}\n")


class PageError(UserError):
    """A template that does not render: its file and line, and what is wrong."""


def templates(root):
    """The project's page templates, in a stable order."""
    return sorted(path for base in ROOTS for path in (Path(root).resolve() / base).rglob(f"*.md{SUFFIX}"))


def target(template):
    """(the page a template renders, the heading of the section it renders or None for the whole page)."""
    found = SECTION_OF.match(template.read_text(encoding="utf-8"))
    if found:
        return (template.parent / found["page"]).resolve(), found["heading"]
    return template.with_name(template.name[:-len(SUFFIX)]), None


def folder_of(template, root):
    """The results folder a template lies in, else None."""
    parts = template.relative_to(Path(root) / RESULTS).parts if template.is_relative_to(Path(root) / RESULTS) else ()
    return parts[0] if len(parts) > 1 else None


def environment(root, page_folder=None, draw=False):
    """The template functions and filters; `differences_plot` writes its PNG (relative to the
    page's folder) only when `draw` (`onmt-posenc pages`, not --check)."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(root)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, autoescape=False)
    env.filters.update(words.FILTERS)
    env.globals.update(words.FUNCTIONS)
    env.globals["differences_plot"] = functools.partial(plots.differences, page_folder or root, draw)
    return env


def render(template, root, reading=None, draw=False):
    """The text a template renders (the whole page, or its section); `reading`: a Records to share;
    `draw`: write the figures it shows too."""
    root, template = Path(root).resolve(), Path(template).resolve()
    source = template.read_text(encoding="utf-8")
    typed = typed_by_hand(source)
    if typed:
        raise PageError(f"{template}: " + "; ".join(f"line {line}: {what} is typed by hand" for line, what in typed)
                        + " (a figure or a verdict comes from an expression over the records)")
    reading = reading or records.Records(root / RESULTS)
    env = environment(root, target(template)[0].parent, draw)
    try:
        compiled = env.from_string(SECTION_OF.sub("", source, count=1))
        return compiled.render(records.namespace(reading, folder_of(template, root)))
    except (jinja2.TemplateError, records.RecordError, TypeError, ValueError, KeyError) as error:
        line = _template_line(error)
        raise PageError(f"{template}{f':{line}' if line else ''}: {type(error).__name__}: {error}") from None


def _template_line(error):
    """The template line an error was raised at, where Jinja says it."""
    if getattr(error, "lineno", None):
        return error.lineno
    trace = error.__traceback__
    line = None
    while trace is not None:
        if trace.tb_frame.f_code.co_filename == "<template>":
            line = trace.tb_lineno
        trace = trace.tb_next
    return line


def page_text(template, root, reading=None, draw=False):
    """(the page a template writes, its whole new text)."""
    page, heading = target(Path(template).resolve())
    rendered = render(template, root, reading, draw)
    if heading is None:
        return page, rendered
    text = page.read_text(encoding="utf-8")
    level = heading.split(" ", 1)[0]
    found = re.search(rf"^{re.escape(heading)}\n.*?(?=^{level} |\Z)", text, flags=re.M | re.S)
    if found is None:
        raise PageError(f"{template}: {page} has no section {heading!r} to render")
    return page, text[:found.start()] + rendered + text[found.end():]


def render_all(root, check=False, only=None):
    """Write every page from its template, or those of the templates `only` (check: write
    nothing, not even a figure); [the pages that differed]."""
    root = Path(root).resolve()
    reading = records.Records(root / RESULTS)
    differed, failed = [], []
    for template in only or templates(root):
        if not template.name.endswith(f".md{SUFFIX}") or not template.is_file():
            raise PageError(f"{template}: not a page template (a *.md{SUFFIX} file)")
        try:
            page, text = page_text(template, root, reading, draw=not check)
        except PageError as error:  # the other pages are still written; every failure is said
            failed.append(str(error))
            continue
        if not page.is_file() or page.read_text(encoding="utf-8") != text:
            differed.append(page)
            if not check:
                page.write_text(text, encoding="utf-8")
    if failed:
        raise PageError(f"{len(failed)} templates do not render:\n" + "\n".join(failed))
    return differed
