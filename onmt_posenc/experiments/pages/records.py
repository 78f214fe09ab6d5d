"""What a page's expressions read: the records of the committed results folders.

In a template, `run("vanilla/ape/seed1").bleu.test` is a field of a run of the page's folder's
results.json; `runs("vanilla/ape/seed*")` its seeds (a glob of run ids), read field by field and
taken by mean, sd, min and max; `claim("RPE's BLEU on VANILLA")` a row of the claims as today's
code judges results.json, by how the claim starts; `record("calibration/results.json")` any JSON
record of the folder; `cell("report.md", heading, row, column)` a table cell of a Markdown
record and `section("x.md", heading)` a section's text, whose `.number(k)` is its k-th number.
A name in another folder starts with it and a colon, `run("multi30k:vanilla/ape/seed1")`; a page
outside the results folders (docs/results.md, README.md) names the folder every time."""
import fnmatch
import json
import re
import statistics
from pathlib import Path

from onmt_posenc.core.errors import UserError
from onmt_posenc.experiments.report.claims_side_by_side import judged

NUMBER = re.compile(r"(?<![\w.])[-+\u2212]?\d+(?:,\d{3})*(?:\.\d+)?")


class RecordError(UserError):
    """An expression that reads what no record holds (a run, a field, a cell), said where it looked."""


class Text(str):
    """A record's text: `.number(k)` is its k-th number (from 1; 1,234 is 1234, a minus sign counts)."""

    def number(self, index):
        numbers = NUMBER.findall(self)
        if not 1 <= index <= len(numbers):
            raise RecordError(f"no number {index} in {self[:80]!r} (it has {len(numbers)})")
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
        if key.startswith("__"):  # Python's and Jinja's own protocol lookups are no record's fields
            raise AttributeError(key)
        return self[key]

    def __getitem__(self, key):
        if key not in self._value:
            raise RecordError(f"{self._where} has no {key!r} (it has {', '.join(map(str, self._value))[:300]})")
        return wrap(self._value[key], f"{self._where}.{key}")

    def __contains__(self, key):
        return key in self._value

    def keys(self):
        return list(self._value)

    def items(self):
        return [(key, wrap(value, f"{self._where}.{key}")) for key, value in self._value.items()]


class Many:
    """A JSON list: [index], iteration, and .at(field=value) for the one element with that value."""

    def __init__(self, values, where):
        self._values, self._where = values, where

    def __getitem__(self, index):
        if not -len(self._values) <= index < len(self._values):
            raise RecordError(f"{self._where} has {len(self._values)} elements, no [{index}]")
        return wrap(self._values[index], f"{self._where}[{index}]")

    def __iter__(self):
        return (wrap(value, f"{self._where}[{index}]") for index, value in enumerate(self._values))

    def __len__(self):
        return len(self._values)

    def at(self, **fields):
        found = [element for element in self._values
                 if isinstance(element, dict) and all(element.get(k) == v for k, v in fields.items())]
        if len(found) != 1:
            raise RecordError(f"{self._where}: {len(found)} elements with {fields}, not one")
        return wrap(found[0], f"{self._where}.at({fields})")


class Each:
    """The runs of a glob, and what is read from each: every field, [index], .at() and .number()
    is read from each of them; mean, sd, min and max take the values, len() counts them."""

    def __init__(self, values):
        self._values = values

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Each([getattr(value, name) for value in self._values])

    def __getitem__(self, index):
        return Each([value[index] for value in self._values])

    def __call__(self, *args, **kwargs):
        return Each([value(*args, **kwargs) for value in self._values])

    def __iter__(self):
        return iter(self._values)

    def __len__(self):
        return len(self._values)


class Records:
    """The committed results folders by name (`results`/NAME), each file read once."""

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
                raise RecordError(f"no record {folder}/{path}")
            self.cache[file] = json.loads(file.read_text(encoding="utf-8"))
        return self.cache[file]

    def claims(self, folder):
        """The claims rows of a folder's results.json as today's code judges them (`onmt-posenc claims`)."""
        key = ("claims", folder)
        if key not in self.cache:
            self.cache[key] = judged(self.results / folder / "results.json")[0]
        return self.cache[key]

    def markdown(self, folder, path):
        """A Markdown record's text: a rendered report, not a page of words about records."""
        file = self.results / folder / path
        if file.name in ("README.md", "COMMANDS.md") or not file.is_file():
            raise RecordError(f"{folder}/{path} is not a Markdown record (a README or COMMANDS.md is not one)")
        return file.read_text(encoding="utf-8")

    def section(self, folder, path, heading):
        parts = re.split(r"^#+ +(.*)$", self.markdown(folder, path), flags=re.M)
        found = [body for title, body in zip(parts[1::2], parts[2::2]) if title.strip() == heading]
        if len(found) != 1:
            raise RecordError(f"{folder}/{path} has {len(found)} sections {heading!r}")
        return found[0]

    def cells(self, folder, path):
        """{(heading, table number): [{column: cell}]} of a Markdown record's tables."""
        key = ("cells", folder, path)
        if key not in self.cache:
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
            self.cache[key] = tables
        return self.cache[key]


def over_values(function):
    """mean, sd, min, max of an Each (a glob's values) or of values given one by one."""
    def applied(*values):
        values = list(values[0]) if len(values) == 1 and isinstance(values[0], (Each, Many, list)) else list(values)
        return function(values)
    applied.__name__ = function.__name__
    return applied


def namespace(records, folder):
    """The functions a page's expressions call, reading `folder` (None: every name names its folder)."""
    def split(name):
        where, rest = records.folder_of(name)
        if where is None and folder is None:
            raise RecordError(f"{name!r}: name its results folder ('FOLDER:{name}'), this page is in none")
        return where or folder, rest

    def runs_of(folder_name):
        return records.json(folder_name, "results.json")["runs"]

    def run(name):
        where, id = split(name)
        found = [r for r in runs_of(where) if r["id"] == id]
        if len(found) != 1:
            raise RecordError(f"{where}/results.json has {len(found)} runs {id!r}")
        return Node(found[0], f"run({name!r})")

    def runs(name):
        where, pattern = split(name)
        found = [r for r in runs_of(where) if fnmatch.fnmatchcase(r["id"], pattern)]
        if not found:
            raise RecordError(f"{where}/results.json has no run {pattern!r}")
        return Each([Node(r, f"run({where}:{r['id']!r})") for r in found])

    def claim(name):
        where, start = split(name)
        found = [row for row in records.claims(where) if row["claim"].startswith(start)]
        if len(found) != 1:
            raise RecordError(f"{where}/results.json has {len(found)} claims starting {start!r}")
        return Node(found[0], f"claim({name!r})")

    def record(name):
        where, path = split(name)
        return wrap(records.json(where, path), f"record({name!r})")

    def cell(name, heading, row, column, table=1):
        where, path = split(name)
        rows = records.cells(where, path).get((heading, table))
        if rows is None:
            raise RecordError(f"{where}/{path} has no table {table} under the heading {heading!r}")
        leading = (row,) if isinstance(row, str) else tuple(row)  # a row's first cell, or its first cells
        found = [r for r in rows if tuple(r.values())[:len(leading)] == leading]
        if len(found) != 1 or column not in found[0]:
            raise RecordError(f"{where}/{path}, {heading!r} table {table}: {len(found)} rows {row!r}"
                              + ("" if not found else f", columns {list(found[0])}"))
        text = Text(found[0][column])
        numbers = NUMBER.findall(text)
        return text.number(1) if len(numbers) == 1 and numbers[0] == text.strip("*").strip() else text

    def section(name, heading):
        where, path = split(name)
        return Text(records.section(where, path, heading))

    return {"run": run, "runs": runs, "claim": claim, "record": record, "cell": cell, "section": section,
            "mean": over_values(statistics.mean), "sd": over_values(statistics.stdev),
            "min": over_values(min), "max": over_values(max)}
