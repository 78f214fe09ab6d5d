"""What a template types by hand that a reader takes as measured: a number or a verdict word in
its literal text. Every figure, count, degree of freedom, ratio and verdict comes from an
expression (`{{ ... }}`) over the records; the template's own words say why a batch was run,
how, and what to read into it.

Literal text is what is left of a template without its Jinja tags, its code (blocks and
`inline`: commands, options, names) and its links' targets. A number there is hand-typed unless
it is a year (1990-2099), part of a name (WMT16, Multi30k, En-De), a list item's number at the
start of a line, or names a source: a paper's "Table 2", "Fig. 4", "eq. 7", "sec. 3.2", an
"issue 59" of this project, a "seed 2" of a run. A ratio glued to x (x3.16) is a number too. The
verdict words are those of a comparison (better, worse, the same, the most, ...): a page says
them through the claims engine (words.difference, words.verdict) or a record's verdict."""
import re

TAGS = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.S)
CODE = re.compile(r"```.*?```|`[^`\n]+`", re.S)
LINK_TARGET = re.compile(r"\]\([^)]*\)")
NUMBER = re.compile(r"(?<![\w.\-/])(?:x(?=\d))?[-+\u2212]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\w.]*\w)")
SOURCE = re.compile(r"(?:Table|Tables|Fig\.|Figure|eq\.|Eq\.|sec\.|Sec\.|section|issue|issues|seed|seeds|stage|"
                    r"stages|Stage|item|items)\s+$")
YEAR = re.compile(r"(?:19[89]\d|20\d\d)[a-z]?")
LIST_ITEM = re.compile(r"^\s*\d+\.\s")
VERDICT = re.compile(r"\b(?:better|worse|best|worst|the most|the least|the same as|no different|no better|no worse|"
                     r"measurabl[ey]|significant(?:ly)?|outperform\w*|beats?|translates as|neither helps?|nor hurts?|"
                     r"as good as|on par|indistinguishable|equally)\b", re.I)


def literal_text(source):
    """The template's text a reader reads as typed: without tags, code and link targets, each
    blanked to spaces of the same length so that lines and columns stay where they were."""
    def blank(match):
        return re.sub(r"[^\n]", " ", match.group(0))
    for pattern in (TAGS, CODE, LINK_TARGET):
        source = pattern.sub(blank, source)
    return source


def typed_by_hand(source):
    """[(line, what)] of the numbers and verdict words a template types in its literal text."""
    found = []
    for line_number, line in enumerate(literal_text(source).splitlines(), 1):
        for match in NUMBER.finditer(line):
            before = line[:match.start()]
            if (YEAR.fullmatch(match.group(0)) or SOURCE.search(before)
                    or (LIST_ITEM.match(line) and not before.strip())):
                continue
            found.append((line_number, f"the number {match.group(0)!r}"))
        found += [(line_number, f"the verdict word {match.group(0)!r}") for match in VERDICT.finditer(line)]
    return found
