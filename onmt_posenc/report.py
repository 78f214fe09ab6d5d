"""`onmt-posenc report EXPERIMENT.yaml`: merge the finished runs of an experiment
(all shards) into results.json, results.csv and report.md with PNG plots.

The report holds the SHAPE paper's tables and figures: BLEU per evaluation set
with the relative training speed (Table 2's layout: data setting x method),
BLEU and gain over the baseline by source length, the swapped evaluation,
shift invariance of the encoder, token-level NLL comparison, and the position
ablation. Analyses that compare methods use each method's run with the lowest
seed; the BLEU table averages over seeds.
"""
import csv
import datetime
import statistics
import sys
from pathlib import Path

import torch

from onmt_posenc import experiment as experiments
from onmt_posenc import runner
from onmt_posenc.interpolate import read_lines
from onmt_posenc.analysis import length_buckets, models, position_ablation, shift_invariance, speed, token_nll


def collect(experiment):
    """One record per run of the grid: its result, its failure, or status 'missing'."""
    records = []
    for run in experiment.runs:
        directory = runner.run_dir(experiment, run)
        if (directory / runner.RESULT).is_file():
            record = runner.read_json(directory / runner.RESULT)
        elif (directory / runner.FAILURE).is_file():
            record = runner.read_json(directory / runner.FAILURE)
        else:
            record = {"id": run.id, "status": "missing"}
        record.update(runner.run_fields(run))
        record["dir"] = str(directory)
        records.append(record)
    return records


def first_seed_runs(records, data):
    """{label: record} of the finished runs of a data setting, lowest seed per label."""
    chosen = {}
    for record in sorted((r for r in records if r["data"] == data and r["status"] == "finished"),
                         key=lambda r: r["seed"]):
        chosen.setdefault(record["label"], record)
    return chosen


def baseline_label(experiment, chosen):
    """The label of the baseline method among `chosen` (its first K if the grid varies K)."""
    for label, record in chosen.items():
        if record["method"] == experiment.baseline:
            return label
    return None


def max_train_length(experiment, data, files):
    """Longest training source length, capped by filtertoolong's src_seq_length if the runs use it."""
    longest = length_buckets.max_length(files["train"][0])
    config = next(run.config for run in experiment.runs if run.data == data)
    if "filtertoolong" in (config.get("transforms") or []):
        longest = min(longest, config.get("src_seq_length", 192))
    return longest


class Report:
    def __init__(self, experiment, records):
        self.experiment, self.records = experiment, records
        self.out = Path(experiment.output)
        self.plots = self.out / "plots"
        self.plots.mkdir(parents=True, exist_ok=True)
        self.lines = []
        self.batch = {}  # results of the analyses across runs, for results.json
        self.prepared = {}  # data setting -> its files (runner.prepare_data), prepared once

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

    def files(self, data):
        if data not in self.prepared:
            self.prepared[data] = runner.prepare_data(self.experiment.data[data], runner.data_dir(self.experiment, data))
        return self.prepared[data]

    # --- sections -------------------------------------------------------------

    def header(self):
        finished = sum(r["status"] == "finished" for r in self.records)
        failed = [r for r in self.records if r["status"] == "failed"]
        missing = [r for r in self.records if r["status"] == "missing"]
        self.add(f"# {self.experiment.name}: position methods compared", "",
                 f"Experiment file `{self.experiment.path}`, report written "
                 f"{datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}. "
                 f"{finished} of {len(self.records)} runs finished"
                 + (f", {len(failed)} failed" if failed else "")
                 + (f", {len(missing)} not run yet" if missing else "") + ".", "")

    def bleu_table(self):
        sets = self.experiment.eval_sets
        signature = next((r["bleu_signature"] for r in self.records if r["status"] == "finished"), "")
        self.add("## BLEU and relative training speed", "",
                 f"sacreBLEU ({signature}) of the averaged checkpoints; mean ± standard deviation "
                 "over seeds where a method has several. Speed: training tokens/s relative to "
                 f"`{self.experiment.baseline}`, measured on the same batches (see Speed below).", "")
        rows = []
        for data in self.data_settings():
            ratios = self.batch.get("speed", {}).get(data, {}).get("relative", {})
            labels = dict.fromkeys(r["label"] for r in self.records if r["data"] == data)
            for label in labels:
                runs = [r for r in self.records if r["data"] == data and r["label"] == label
                        and r["status"] == "finished"]
                cells = []
                for name in sets:
                    scores = [r["bleu"][name] for r in runs if name in r["bleu"]]
                    if not scores:
                        cells.append("–")
                    elif len(scores) == 1:
                        cells.append(f"{scores[0]:.2f}")
                    else:
                        cells.append(f"{statistics.mean(scores):.2f} ± {statistics.stdev(scores):.2f}")
                speed_cell = f"x{ratios[label]:.2f}" if label in ratios else "–"
                rows.append([data, label, len(runs), *cells, speed_cell])
        self.table(["data", "method", "seeds", *sets, "speed"], rows)

    def runs_table(self):
        self.add("## Runs", "")
        rows = []
        for r in self.records:
            bleu = ", ".join(f"{k} {v:.2f}" for k, v in r.get("bleu", {}).items()) or "–"
            note = r.get("error", "") if r["status"] != "finished" else "; ".join(
                f"{k}: {v}" for k, v in r.get("analysis_errors", {}).items())
            log = f" (log: `{r['log']}`)" if r.get("log") and str(r["log"]) not in note else ""
            minutes = f"{r['seconds'] / 60:.1f}" if "seconds" in r else "–"
            rows.append([r["id"], r["status"], bleu, minutes, (note + log).replace("|", "/") or "–"])
        self.table(["run", "status", "BLEU", "minutes", "notes"], rows)

    def length_section(self, options):
        self.add("## BLEU by source length", "",
                 "Corpus BLEU per bucket of source length; shaded buckets (marked * in the table) "
                 "hold lengths longer than any training example.", "")
        results = {}
        for data in self.data_settings():
            chosen = first_seed_runs(self.records, data)
            if not chosen:
                continue
            files = self.files(data)
            longest = max_train_length(self.experiment, data, files)
            base = baseline_label(self.experiment, chosen)
            for name in options["sets"]:
                if name not in files["eval"]:
                    continue
                eval_set = files["eval"][name]
                hyps = {label: read_lines(Path(r["dir"]) / "hyp" / f"{name}.txt") for label, r in chosen.items()}
                result = length_buckets.bucket_bleu(read_lines(eval_set.src), read_lines(eval_set.ref),
                                                    hyps, options["width"], longest, base)
                results[f"{data}/{name}"] = result
                path = length_buckets.plot(result, self.plots / f"length_{data}_{name}.png",
                                           f"{data} / {name}: BLEU by source length (longest training source: {longest})")
                self.add(f"### {data} / {name}", "")
                self.image(path, f"BLEU by source length, {data} {name}")
                header = ["length", "sentences", *(f"{label} BLEU" for label in hyps)]
                header += [f"{label} gain" for label in result.get("gain", {})]
                rows = []
                for k, bucket in enumerate(result["buckets"]):
                    row = [bucket + (" *" if result["unseen"][k] else ""), result["counts"][k]]
                    row += [f"{scores[k]:.1f}" for scores in result["bleu"].values()]
                    row += [f"{gains[k]:+.1f}" for gains in result.get("gain", {}).values()]
                    rows.append(row)
                self.table(header, rows)
        self.batch["length_buckets"] = results

    def swapped_section(self):
        rows = [[r["id"], f"{a['original']:.2f}", f"{a['swapped']:.2f}", f"{a['drop']:.2f}", a["examples"]]
                for r, a in self.per_run("swapped")]
        if not rows:
            return
        self.add("## Swapped evaluation", "",
                 "BLEU of the first sentence X1 of each INTERPOLATE example, translated where it stands "
                 "(Original) and after moving it to the end (Swapped). A small drop means the model "
                 "translates a sentence the same wherever it stands.", "")
        self.table(["run", "Original", "Swapped", "drop", "examples"], rows)

    def shift_section(self):
        results = self.per_run("shift_invariance")
        if not results:
            return
        self.add("## Shift invariance of the encoder", "",
                 "Mean cosine similarity of encoder states when all positions are offset by k. "
                 "1.0 everywhere: the encoder does not depend on absolute positions.", "")
        rows, images = [], []
        for record, result in results:
            path = self.plots / f"shift_{record['id'].replace('/', '_')}.png"
            shift_invariance.plot(result, path, f"Encoder shift invariance: {record['id']}")
            images.append((path, f"shift invariance {record['id']}"))
            rows.append([record["id"], f"{result['mean_off_diagonal']:.3f}",
                         "yes" if result["absolute_positions"] else "no (relative only)"])
        self.table(["run", "mean similarity across offsets", "absolute positions"], rows)
        for path, alt in images:
            self.image(path, alt)

    def token_section(self, options):
        results, images = {}, []
        for data in self.data_settings():
            chosen = {label: r for label, r in first_seed_runs(self.records, data).items()
                      if "token_nll" in r.get("analyses", {})}
            base = baseline_label(self.experiment, chosen)
            if base is None or len(chosen) < 2:
                continue
            files = self.files(data)
            counts = token_nll.training_frequencies(files["train"][1])
            tgt = models.read_lines(files["eval"][options["set"]].tgt)
            nll = {label: runner.read_json(Path(r["dir"]) / r["analyses"]["token_nll"])["nll"]
                   for label, r in chosen.items()}
            for label in chosen:
                if label == base:
                    continue
                result = token_nll.compare(nll[label], nll[base], tgt, counts,
                                           options["position_width"], options["frequency_bins"])
                name = f"{data}/{label}-vs-{base}"
                results[name] = result
                path = self.plots / f"tokens_{data}_{label}_vs_{base}.png"
                token_nll.plot(result, path, label, base)
                images.append((path, f"token NLL {name}"))
        if not results:
            return
        self.add("## Token-level NLL", "",
                 f"Share of gold tokens of the `{options['set']}` set (teacher forcing) where a method "
                 "gives a lower NLL than the baseline, by decoder position and training frequency of "
                 "the token. Above 0.5: the method wins.", "")
        self.table(["comparison", "gold tokens", "share won"],
                    [[name, r["tokens"], f"{r['share']:.3f}"] for name, r in results.items()])
        for path, alt in images:
            self.image(path, alt)
        self.batch["token_nll"] = results

    def ablation_section(self):
        results = self.per_run("position_ablation")
        if not results:
            return
        self.add("## Position ablation", "",
                 "Teacher-forced features and perplexity of each trained model as trained and with its "
                 "absolute position encoding removed (both sides).", "")
        rows = [[r["id"], " + ".join(a["removed_from"]) or "none (no absolute PE)",
                 f"{a['encoder_cosine']:.3f}", f"{a['decoder_cosine']:.3f}",
                 f"{a['perplexity_kept']:.2f}", f"{a['perplexity_removed']:.2f}"] for r, a in results]
        self.table(["run", "removed from", "encoder cosine", "decoder cosine", "ppl kept", "ppl removed"], rows)
        config = next(r["config"] for r, _ in results)
        dim = config.get("word_vec_size") or config.get("hidden_size") or 512
        path = position_ablation.plot_sinusoids(
            dim, self.plots / "sinusoids.png", enc_type=config.get("position_encoding_type", "SinusoidalInterleaved"))
        self.image(path, "sinusoid matrix")

    def speed_section(self, options):
        results = {}
        for data in self.data_settings():
            chosen = first_seed_runs(self.records, data)
            base = baseline_label(self.experiment, chosen)
            if base is None:
                continue
            files = self.files(data)
            eval_set = files["eval"][options["set"]]
            cache = self.out / "analyses" / f"speed_{data}.json"
            key = {label: [r["id"], Path(r["dir"], "averaged.pt").stat().st_mtime] for label, r in chosen.items()}
            cached = runner.read_json(cache) if cache.is_file() else {}
            if cached.get("models") == key:
                results[data] = cached
                continue
            print(f"timing training steps of {', '.join(chosen)} on {data} / {options['set']}", file=sys.stderr)
            loaded = {label: models.load_model(Path(r["dir"]) / "averaged.pt") for label, r in chosen.items()}
            tokens_per_second = speed.throughput(loaded, models.read_lines(eval_set.src),
                                                 models.read_lines(eval_set.tgt), options["batches"], options["rounds"])
            results[data] = {"models": key, "baseline": base, "tokens_per_second": tokens_per_second,
                             "relative": speed.relative(tokens_per_second, base),
                             "torch_threads": torch.get_num_threads()}
            cache.parent.mkdir(exist_ok=True)
            runner.write_json(cache, results[data])
        self.batch["speed"] = results

    def speed_table(self, options):
        if not self.batch.get("speed"):
            return
        self.add("## Speed", "",
                 f"Training steps (forward, loss, backward; no optimizer update) of each method's "
                 f"model on the same {options['batches']} batches of the `{options['set']}` set, "
                 f"{options['rounds']} rounds, methods taking turns batch by batch.", "")
        rows = []
        for data, result in self.batch["speed"].items():
            for label, value in result["tokens_per_second"].items():
                rows.append([data, label, f"{value:.0f}", f"x{result['relative'][label]:.2f}",
                             result["torch_threads"]])
        self.table(["data", "method", "tokens/s", f"vs {self.experiment.baseline}", "torch threads"], rows)

    def per_run(self, name):
        """(record, result) of every finished run that has this analysis."""
        found = []
        for record in self.records:
            if record["status"] == "finished" and name in record.get("analyses", {}):
                found.append((record, runner.read_json(Path(record["dir"]) / record["analyses"][name])))
        return found

    def write(self):
        analyses = self.experiment.analyses
        if "speed" in analyses:
            self.speed_section(analyses["speed"])
        self.header()
        self.bleu_table()
        if "length_buckets" in analyses:
            self.length_section(analyses["length_buckets"])
        if "swapped" in analyses:
            self.swapped_section()
        if "shift_invariance" in analyses:
            self.shift_section()
        if "token_nll" in analyses:
            self.token_section(analyses["token_nll"])
        if "position_ablation" in analyses:
            self.ablation_section()
        if "speed" in analyses:
            self.speed_table(analyses["speed"])
        self.runs_table()
        path = self.out / "report.md"
        runner.write_text_atomically(path, "\n".join(self.lines) + "\n")
        return path


CSV_FIELDS = ["id", "data", "method", "K", "seed", "status"]


def write_results(experiment, records, batch):
    """results.json (every record and the cross-run analyses) and results.csv (one row per run)."""
    out = Path(experiment.output)
    runner.write_json(out / "results.json", {"experiment": str(experiment.path), "runs": records,
                                             "across_runs": batch})
    sets = list(dict.fromkeys(name for r in records for name in r.get("bleu", {})))
    with open(out / "results.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_FIELDS + [f"bleu_{name}" for name in sets] + ["speed", "train_seconds", "log"])
        for r in records:
            ratio = batch.get("speed", {}).get(r["data"], {}).get("relative", {}).get(r["label"])
            writer.writerow([r.get(k) for k in CSV_FIELDS]
                            + [f"{r['bleu'][n]:.2f}" if n in r.get("bleu", {}) else "" for n in sets]
                            + [f"{ratio:.3f}" if ratio is not None else "", r.get("train_seconds", ""),
                               r.get("log", "")])


def write(experiment):
    """Collect the runs, run the cross-run analyses, write results and report; returns report.md."""
    records = collect(experiment)
    report = Report(experiment, records)
    path = report.write()
    write_results(experiment, records, report.batch)
    return path


def add_arguments(parser):
    """The arguments given to `onmt-posenc run`, to find the same runs."""
    experiments.add_arguments(parser)


def main(args):
    try:
        experiment = experiments.from_arguments(args)
    except experiments.ExperimentError as error:
        print(f"onmt-posenc report: error: {error}", file=sys.stderr)
        return 2
    if not experiment.output.is_dir():
        print(f"onmt-posenc report: error: {experiment.output} does not exist; run the experiment first",
              file=sys.stderr)
        return 2
    print(f"report: {write(experiment)}", file=sys.stderr)
    return 0
