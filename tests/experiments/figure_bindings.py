"""Every figure of a hand-written results page bound to the one record it comes from
(docs/analyses.md, "Figures in hand-written pages", says how to write the bindings).

A binding comment, `<!-- figures: FIGURE = REFERENCE; FIGURE = REFERENCE; ... -->`, binds in
order the figures of the text between the previous binding comment (or the top of the page)
and itself: the first entry the first figure, and so on, each entry naming the figure as the
text shows it. Entries are split at ';' and at line ends; a line `with SUBJECT: FIGURE =
.field; ...` binds its entries that start with '.' or '[' to fields of SUBJECT. A REFERENCE is a
Python expression over the records of a results folder:

    run("vanilla/ape/seed1").bleu.test                 a run of results.json, a field
    mean(runs("vanilla/ape/seed*").bleu.test)          its seeds (a glob of run ids): mean, sd, min, max
    mean(run("a").bleu.test, run("b").bleu.test)       of values given one by one
    run("vanilla/rpe/seed1").bleu.test - mean(runs("vanilla/ape/seed*").bleu.test)
    claim("RPE's BLEU on VANILLA").figures.margin      a claims row as today's code judges results.json,
                                                       by how its claim starts
    run("vanilla/ape/seed1").curve.valid.at(step=1750).ppl
    run("vanilla/ape/seed1").convergence.why.number(5) the 5th number of a text field
    record("calibration-1/results.json").runs.at(id="vanilla/ape/seed1").bleu.test
    cell("report-as-written.md", "Shift invariance of the encoder", "vanilla/ape/seed1", "mean")
                                                       a Markdown record's table cell (its section, row, column;
                                                       a row by its first cells where one is not enough)
    section("randomized-eval-rule.md", "The model").number(3)   a number of a Markdown record's section
    record("results.json").across_runs.speed.vanilla.rpe    any JSON record of the folder

A name of a run, claim, record or cell file is in the page's folder, or in another results
folder named before a colon, `run("multi30k-questions:vanilla/ape/seed1")`; a page outside
the results folders (docs/results.md, README.md) names the folder every time. A section of
such a page must link every folder its bindings name, and a results folder's README every
other folder. `FIGURE = unrecorded: WHY` takes a figure that no record holds (a statistic of
a corpus, a formula), and `<!-- figures unrecorded: WHY -->` every figure of its text.

A figure is a number with a decimal point (integers are counts, steps and years), signed or
not, outside code (blocks and `inline`) and not part of a version or of a word (x1.01). Its
reference must round to it as shown: an unsigned figure or one with a plus sign to a value >= 0, one with a
minus sign to a value <= 0.
"""
import fnmatch
import json
import math
import re
import statistics
from pathlib import Path

from onmt_posenc.experiments.report.claims_side_by_side import judged

FIGURE = re.compile(r"(?<![\w.])([-+\u2212]?)(\d+\.\d+)(?!\d|\.\d)")
NUMBER = re.compile(r"(?<![\w.])[-+\u2212]?\d+(?:,\d{3})*(?:\.\d+)?")
CODE = re.compile(r"```.*?```|`[^`\n]+`", re.S)  # code blocks and inline code: commands and names
BINDING = re.compile(r"<!-- figures(?P<unrecorded> unrecorded)?:(?P<body>.*?)-->", re.S)
FUNCTIONS = {"mean": statistics.mean, "sd": statistics.stdev, "min": min, "max": max, "abs": abs}


class BindingError(Exception):
    pass


def shown(figure):
    """(sign, digits) of a figure's text, the minus sign as '-'."""
    match = FIGURE.fullmatch(figure.strip())
    if not match:
        raise BindingError(f"{figure!r} is not a figure")
    return match.group(1).replace("\u2212", "-"), match.group(2)


def rounds_to(value, figure):
    """Does `value` round to `figure` as the text shows it (its decimals, its sign)?"""
    sign, digits = shown(figure)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    expected = -float(digits) if sign == "-" else float(digits)
    if (sign in ("", "+") and value < 0) or (sign == "-" and value > 0):
        return False
    return abs(value - expected) <= 0.5 * 10 ** -len(digits.split(".")[1]) + 1e-9


# ---------------------------------------------------------------- the records a reference reads
class Text(str):
    def number(self, index):
        """The index-th number (from 1) of the text: 1,234 is 1234; a minus sign counts."""
        numbers = NUMBER.findall(self)
        if not 1 <= index <= len(numbers):
            raise BindingError(f"no number {index} in {self[:80]!r} (it has {len(numbers)})")
        return float(numbers[index - 1].replace(",", "").replace("\u2212", "-"))


def wrap(value, where):
    if isinstance(value, dict):
        return Node(value, where)
    if isinstance(value, list):
        return Many(value, where)
    if isinstance(value, str):
        return Text(value)
    return value


class Node:
    """A JSON object: its keys as attributes, or as [key] where a key is not a name."""

    def __init__(self, value, where):
        self._value, self._where = value, where

    def __getattr__(self, key):
        return self[key]

    def __getitem__(self, key):
        if key not in self._value:
            raise BindingError(f"{self._where} has no {key!r} (it has {', '.join(map(str, self._value))[:300]})")
        return wrap(self._value[key], f"{self._where}.{key}")


class Many:
    """A JSON list: [index], and .at(field=value) for the one element with that value."""

    def __init__(self, values, where):
        self._values, self._where = values, where

    def __getitem__(self, index):
        if not -len(self._values) <= index < len(self._values):
            raise BindingError(f"{self._where} has {len(self._values)} elements, no [{index}]")
        return wrap(self._values[index], f"{self._where}[{index}]")

    def __getattr__(self, key):
        raise BindingError(f"{self._where} is a list: [index] or .at(field=value), not .{key}")

    def at(self, **fields):
        found = [element for element in self._values
                 if isinstance(element, dict) and all(element.get(k) == v for k, v in fields.items())]
        if len(found) != 1:
            raise BindingError(f"{self._where}: {len(found)} elements with {fields}, not one")
        return wrap(found[0], f"{self._where}.at({fields})")


class Each:
    """The runs of a glob, and what is read from each: every field, [index], .at() and
    .number() is read from each of them; mean, sd, min and max take the values."""

    def __init__(self, values):
        self._values = values

    def __getattr__(self, name):
        return Each([getattr(value, name) for value in self._values])

    def __getitem__(self, index):
        return Each([value[index] for value in self._values])

    def __call__(self, *args, **kwargs):
        return Each([value(*args, **kwargs) for value in self._values])

    def __iter__(self):
        return iter(self._values)


class Records:
    """What the references of one page read: results folders by name (RESULTS/name)."""

    def __init__(self, results):
        self.results = Path(results)
        self.cache = {}

    def folder_of(self, name):
        """(the results folder a name starts with, 'FOLDER:', or None; the rest of the name)."""
        where, colon, rest = name.partition(":")
        return (where, rest) if colon and (self.results / where).is_dir() else (None, name)

    def json(self, folder, path):
        file = self.results / folder / path
        if file not in self.cache:
            if not file.is_file():
                raise BindingError(f"no record {folder}/{path}")
            self.cache[file] = json.loads(file.read_text(encoding="utf-8"))
        return self.cache[file]

    def claims(self, folder):
        """The claims rows of a folder's results.json as today's code judges them (`onmt-posenc
        claims`; the committed report.md says the same, test_committed_reports checks)."""
        key = ("claims", folder)
        if key not in self.cache:
            self.cache[key] = judged(self.results / folder / "results.json")[0]
        return self.cache[key]

    def markdown(self, folder, path):
        """A Markdown record's text: not a README or COMMANDS.md, which are words about records."""
        file = self.results / folder / path
        if file.name in ("README.md", "COMMANDS.md") or not file.is_file():
            raise BindingError(f"{folder}/{path} is not a Markdown record (a README or COMMANDS.md is not one)")
        return file.read_text(encoding="utf-8")

    def section(self, folder, path, heading):
        """The text of a Markdown record's section, from its heading to the next heading."""
        parts = re.split(r"^#+ +(.*)$", self.markdown(folder, path), flags=re.M)
        found = [body for title, body in zip(parts[1::2], parts[2::2]) if title.strip() == heading]
        if len(found) != 1:
            raise BindingError(f"{folder}/{path} has {len(found)} sections {heading!r}")
        return found[0]

    def cells(self, folder, path):
        """{(heading, table number): [{column: cell}]} of a Markdown record's tables."""
        file = self.results / folder / path
        if file not in self.cache:
            tables, heading, number, header, in_code = {}, "", 0, None, False
            for line in self.markdown(folder, path).splitlines():
                in_code ^= line.startswith("```")
                if line.startswith("#") and not in_code:
                    heading, number, header = line.lstrip("#").strip(), 0, None
                elif line.startswith("|") and not in_code:
                    cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
                    if header is None:
                        header, number = cells, number + 1
                        tables[(heading, number)] = []
                    elif not set(line) <= set("|-: "):
                        tables[(heading, number)].append(dict(zip(header, cells)))
                else:
                    header = None
            self.cache[file] = tables
        return self.cache[file]


def namespace(records, folder):
    """The functions a reference calls, reading `folder` (None: every name must name its folder)."""
    def split(name):
        where, rest = records.folder_of(name)
        if where is None and folder is None:
            raise BindingError(f"{name!r}: name its results folder ('FOLDER:{name}'), this page has none")
        return where or folder, rest

    def runs_of(folder_name):
        return records.json(folder_name, "results.json")["runs"]

    def run(name):
        where, id = split(name)
        found = [r for r in runs_of(where) if r["id"] == id]
        if len(found) != 1:
            raise BindingError(f"{where}/results.json has {len(found)} runs {id!r}")
        return Node(found[0], f"run({name!r})")

    def runs(name):
        where, pattern = split(name)
        found = [r for r in runs_of(where) if fnmatch.fnmatchcase(r["id"], pattern)]
        if not found:
            raise BindingError(f"{where}/results.json has no run {pattern!r}")
        return Each([Node(r, f"run({where}:{r['id']!r})") for r in found])

    def claim(name):
        where, start = split(name)
        rows = records.claims(where)
        found = [row for row in rows if row["claim"].startswith(start)]
        if len(found) != 1:
            raise BindingError(f"{where}/results.json has {len(found)} claims starting {start!r}")
        return Node(found[0], f"claim({name!r})")

    def record(name):
        where, path = split(name)
        return wrap(records.json(where, path), f"record({name!r})")

    def cell(name, heading, row, column, table=1):
        where, path = split(name)
        rows = records.cells(where, path).get((heading, table))
        if rows is None:
            raise BindingError(f"{where}/{path} has no table {table} under the heading {heading!r}")
        leading = (row,) if isinstance(row, str) else tuple(row)  # a row's first cell, or its first cells
        found = [r for r in rows if tuple(r.values())[:len(leading)] == leading]
        if len(found) != 1 or column not in found[0]:
            raise BindingError(f"{where}/{path}, {heading!r} table {table}: {len(found)} rows {row!r}"
                               + ("" if not found else f", columns {list(found[0])}"))
        text = Text(found[0][column])
        numbers = NUMBER.findall(text)
        return text.number(1) if len(numbers) == 1 and numbers[0] == text.strip("*").strip() else text

    def section(name, heading):
        where, path = split(name)
        return Text(records.section(where, path, heading))

    return {"run": run, "runs": runs, "claim": claim, "record": record, "cell": cell, "section": section,
            **{name: _over_many(function) for name, function in FUNCTIONS.items()}}


def _over_many(function):
    def applied(*values):
        values = list(values[0]) if len(values) == 1 and isinstance(values[0], Each) else list(values)
        return function(values) if function is not abs else abs(values[0])
    return applied


def folders_named(reference, records):
    """The results folders a reference's records name ('FOLDER:' before a run, claim, record or cell)."""
    names = re.findall(r"\b(?:runs?|claim|record|cell)\(\"([^\"]*)\"", reference)
    return {where for where, _ in map(records.folder_of, names) if where}


def evaluate(reference, records, folder):
    try:
        value = eval(compile(reference, "<binding>", "eval"), {"__builtins__": {}}, namespace(records, folder))
    except BindingError:
        raise
    except Exception as error:  # a reference that is not an expression over the records
        raise BindingError(f"{reference}: {type(error).__name__}: {error}") from None
    return value


# ---------------------------------------------------------------- a page's figures and bindings
def _split_outside_quotes(text, separators):
    """Split at `separators` outside double quotes (a reference's strings; an apostrophe is text)."""
    parts, current, quote = [], "", None
    for char in text:
        if quote:
            quote = None if char == quote else quote
        elif char == '"':
            quote = char
        elif char in separators:
            parts.append(current)
            current = ""
            continue
        current += char
    return parts + [current]


def entries(body):
    """[(figure, reference)] of a binding comment's body: entries split at ';' and at line ends;
    a line `with SUBJECT: FIGURE = .field; ...` prefixes the references of its entries that
    start with '.' or '[' with SUBJECT."""
    found = []
    for line in body.splitlines():
        subject = None
        if line.strip().startswith("with "):
            head, *rest = _split_outside_quotes(line.strip()[len("with "):], ":")
            if not rest:
                raise BindingError(f"{line.strip()!r}: a line `with SUBJECT: FIGURE = .field; ...`")
            subject, line = head.strip(), ":".join(rest)
        for part in (p.strip() for p in _split_outside_quotes(line, ";") if p.strip()):
            figure, equals, reference = part.partition("=")
            if not equals:
                raise BindingError(f"{part!r}: an entry is FIGURE = REFERENCE")
            reference = reference.strip()
            if reference.startswith((".", "[")):
                if subject is None:
                    raise BindingError(f"{part!r}: a reference starting with '.' or '[' needs a `with SUBJECT:` "
                                       "line")
                reference = subject + reference
            found.append((figure.strip(), reference))
    return found


def figures_of(text):
    """The figures of a piece of a page, as shown, outside code blocks."""
    return [sign + digits for sign, digits in FIGURE.findall(CODE.sub("", text))]


def chunks(text):
    """[(the text before a binding comment, the comment's match or None for the text after the last)]."""
    found, start = [], 0
    for match in BINDING.finditer(text):
        found.append((text[start:match.start()], match))
        start = match.end()
    return found + [(text[start:], None)]


def line_of(text, position):
    return text.count("\n", 0, position) + 1


def problems(text, records, folder):
    """What is wrong with a page's figures and bindings, one line each; and the folders its
    references name ({folder: first line})."""
    wrong, named, position = [], {}, 0
    for piece, match in chunks(text):
        line = line_of(text, position)
        position += len(piece) + (len(match.group(0)) if match else 0)
        figures = figures_of(piece)
        if match is None:
            wrong += [f"line {line}+: {figure} is bound by no binding comment after it"
                      + (f" (it could be: {'; '.join(candidates(records, folder, figure, folder, limit=3))})"
                         if folder else "") for figure in figures]
            continue
        if match.group("unrecorded"):
            if not match.group("body").strip():
                wrong.append(f"line {line}+: `figures unrecorded:` needs why")
            continue
        try:
            bound = entries(match.group("body"))
        except BindingError as error:
            wrong.append(f"line {line}+: {error}")
            continue
        if [f for f, _ in bound] != figures:
            wrong.append(f"line {line}+: the text's figures {figures} are not the binding's {[f for f, _ in bound]}")
            continue
        for figure, reference in bound:
            if reference.startswith("unrecorded:"):
                if not reference[len("unrecorded:"):].strip():
                    wrong.append(f"line {line}+: {figure} = unrecorded: needs why")
                continue
            for name in folders_named(reference, records):
                named.setdefault(name, line)
            try:
                value = evaluate(reference, records, folder)
            except BindingError as error:
                wrong.append(f"line {line}+: {figure} = {reference}: {error}")
                continue
            if not rounds_to(value, figure):
                wrong.append(f"line {line}+: {figure} = {reference} is {value!r}")
    return wrong, named


# ---------------------------------------------------------------- what a figure could be bound to
def candidates(records, folder, figure, page_folder, limit=12):
    """References to `folder`'s records that round to `figure`, for a page of `page_folder`:
    what its binding could name (the test's message for a figure bound to nothing)."""
    found = []
    for reference, value in named_values(records, folder, "" if folder == page_folder else f"{folder}:"):
        if rounds_to(value, figure) and reference not in found:
            found.append(reference)
            if len(found) == limit:
                break
    return found


def named_values(records, folder, prefix=""):
    """(reference, value) of a folder's run fields, their means and spreads over seeds, the
    differences of BLEU and shift invariance between runs and means, its claims' figures, its
    other JSON records and its Markdown records' table cells; `prefix`: "FOLDER:" where the
    page is another folder's."""
    try:
        stored = records.json(folder, "results.json")
    except BindingError:
        stored = {"runs": []}
    runs = [r for r in stored["runs"] if r.get("status") == "finished"]
    for r in runs:
        yield from _leaves(r, f'run("{prefix}{r["id"]}")', skip=("config", "curve", "evaluation", "training_data"))
        for point in (r.get("curve") or {}).get("valid", []):
            yield f'run("{prefix}{r["id"]}").curve.valid.at(step={point["step"]}).ppl', point["ppl"]
    groups = {}
    for r in runs:
        groups.setdefault(r["id"].rsplit("/", 1)[0], []).append(r)
    means = {}
    for group, members in groups.items():
        for path in ("bleu.test", "bleu.valid", "length_ratio.test", "bleu_details.test.brevity_penalty",
                     "analysis_results.shift_invariance.mean_off_diagonal"):
            values = [_get(r, path) for r in members]
            if len(members) > 1 and None not in values:
                many = f'runs("{prefix}{group}/seed*").{path}'
                for name, function in (("mean", statistics.mean), ("sd", statistics.stdev), ("min", min),
                                       ("max", max)):
                    yield f"{name}({many})", function(values)
                means[(group, path)] = (f"mean({many})", statistics.mean(values))
    across = stored.get("across_runs") or {}
    for row in (records.claims(folder) if stored["runs"] else []):
        yield from _leaves(row.get("figures", {}), f'claim("{prefix}{row["claim"][:40]}").figures')
    for key, value in across.items():
        if key != "claims":
            yield from _leaves(value, f'record("{prefix}results.json").across_runs.{key}')
    for path in ("bleu.test", "bleu.valid", "analysis_results.shift_invariance.mean_off_diagonal"):
        terms = [(f'run("{prefix}{r["id"]}").{path}', _get(r, path)) for r in runs if _get(r, path) is not None]
        terms += [term for (group, p), term in means.items() if p == path]
        for (a, x), (b, y) in ((s, t) for s in terms for t in terms if s != t):
            yield f"{a} - {b}", x - y
    base = records.results / folder
    for file in sorted(base.rglob("*.json")):
        relative = file.relative_to(base).as_posix()
        if relative != "results.json":
            yield from _leaves(records.json(folder, relative), f'record("{prefix}{relative}")')
    for file in sorted(base.rglob("*.md")):
        relative = file.relative_to(base).as_posix()
        if file.name in ("README.md", "COMMANDS.md"):
            continue
        for (heading, table), rows in records.cells(folder, relative).items():
            for row in rows:
                key = next(iter(row.values()), "")
                for column, text in row.items():
                    reference = (f'cell("{prefix}{relative}", "{heading}", "{key}", "{column}"'
                                 + (f", table={table})" if table > 1 else ")"))
                    numbers = NUMBER.findall(text)
                    if len(numbers) == 1 and numbers[0] == text.strip("*").strip():
                        yield reference, Text(text).number(1)
                    else:
                        for index in range(1, min(len(numbers), 12) + 1):
                            yield f"{reference}.number({index})", Text(text).number(index)


def _get(record, path):
    value = record
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _leaves(node, reference, skip=()):
    if isinstance(node, dict):
        for key, value in node.items():
            if key not in skip:
                yield from _leaves(value, f"{reference}.{key}" if key.isidentifier() else f'{reference}["{key}"]')
    elif isinstance(node, list):
        if len(node) <= 64:
            for index, value in enumerate(node):
                yield from _leaves(value, f"{reference}[{index}]")
    elif isinstance(node, str):
        for index in range(1, min(len(NUMBER.findall(node)), 12) + 1):
            yield f"{reference}.number({index})", Text(node).number(index)
    elif isinstance(node, (int, float)) and not isinstance(node, bool) and math.isfinite(node):
        yield reference, node
