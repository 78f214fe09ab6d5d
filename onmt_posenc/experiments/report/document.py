"""report.md as it is made: its lines, Markdown tables and plots, and the questions the
sections ask of the records (data settings, methods, finished runs)."""
from pathlib import Path

from onmt_posenc.experiments.report.runs import relative_speeds
from onmt_posenc.experiments.running.store import write_text_atomically


class Report:
    def __init__(self, experiment, records):
        self.experiment, self.records = experiment, records
        self.out = Path(experiment.output)
        self.plots = self.out / "plots"
        self.plots.mkdir(parents=True, exist_ok=True)
        self.lines = []
        self.batch = {"speed": relative_speeds(experiment, records)}  # cross-run results, for results.json

    def add(self, *lines):
        self.lines.extend(lines)

    def image(self, path, alt):
        self.add(f"![{alt}]({Path(path).relative_to(self.out).as_posix()})", "")

    def table(self, header, rows):
        self.add("| " + " | ".join(header) + " |", "|" + "---|" * len(header))
        self.add(*("| " + " | ".join(str(cell) for cell in row) + " |" for row in rows))
        self.add("")

    def data_settings(self):
        return list(dict.fromkeys(r["data"] for r in self.records))

    def kind(self, data):
        return self.experiment.data[data].kind

    def finished(self, data, label):
        return [r for r in self.records if r["data"] == data and r["label"] == label and r["status"] == "finished"]

    def labels(self, data):
        return list(dict.fromkeys(r["label"] for r in self.records if r["data"] == data))

    def save(self):
        path = self.out / "report.md"
        write_text_atomically(path, "\n".join(self.lines) + "\n")
        return path
