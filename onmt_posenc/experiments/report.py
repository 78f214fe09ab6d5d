"""`onmt-posenc report EXPERIMENT.yaml`: merge the finished runs of an experiment
(all shards) into results.json, results.csv and report.md with PNG plots.

The report only reads what the runs measured and stored (result.json and
analyses/*.json); it loads no model and times nothing. It opens with the SHAPE
paper's claims and whether this batch reproduces them (see claims.py), then
holds the paper's tables and figures: BLEU per evaluation set with the relative
training speed (Table 2's layout: data setting x method), hypothesis/reference
length, joined-set scores, BLEU, gain and length by source length, the swapped
evaluation, shift invariance of the encoder, token-level NLL, and the position
ablation. Analyses that compare methods use each method's run with the lowest
seed; the BLEU table averages over seeds.

A stored result that cannot be read or used (see runs.read_stored) is a failed run
in the Runs table, named with its file, and left out of the other tables; an analysis
file likewise, as a note on its run. When no run has finished yet, the report is
written all the same (its Runs table says what happened to each run) and a warning
says so on stderr; the exit status is still 0.
"""
import csv
import datetime
import math
import statistics
import sys
from pathlib import Path

from onmt_posenc.experiments import claims
from onmt_posenc.experiments import curves
from onmt_posenc import experiments
from onmt_posenc.analysis import length_buckets, plots, position_ablation, shift_invariance, token_nll
from onmt_posenc.analysis.swapped import WRONG_SEPARATORS_AT_MOST
from onmt_posenc.experiments.state import STALE, run_state
from onmt_posenc.experiments.store import (corpus_files, data_dir, read_analysis, read_stored, run_config, run_dir,
                                           run_fields, write_json, write_text_atomically)


def collect(experiment):
    """One record per run of the grid: its result, its failure, or status 'missing';
    a result that is not what the experiment file makes now is 'stale' (state.STALE;
    like a failure, left out of every table but the Runs table), with the reason the
    runner gives too."""
    records = []
    for run in experiment.runs:
        directory = run_dir(experiment, run)
        setting = experiment.data[run.data]
        config = run_config(experiment, run, corpus_files(setting, data_dir(experiment, run.data)))
        state = run_state(directory, config, experiment, setting)
        if state.kind == "missing":
            record = {"status": "missing"}
        elif state.kind == "unreadable":
            record = {"status": "failed", "error": state.why}
        else:
            record = state.record
            if state.kind in STALE:
                record.update(status="stale", error=f"stale: {state.why}")
            if record.get("curve"):  # the rule of today's code, also for results stored under an older one
                record["convergence"] = curves.convergence(record["curve"]["valid"])
            if record["status"] != "failed":
                _drop_unreadable_analyses(record, directory)
        record.update(run_fields(run))
        record["dir"] = str(directory)
        records.append(record)
    return records


def _drop_unreadable_analyses(record, directory):
    """An analysis file that cannot be read or used leaves the tables, with a note in the Runs table."""
    for name, path in list(record.get("analyses", {}).items()):
        _, unreadable = read_stored(directory / path, name)
        if unreadable:
            del record["analyses"][name]
            record.setdefault("analysis_errors", {})[name] = unreadable


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


def relative_speeds(experiment, records):
    """{data: {label: training tokens/s relative to the baseline}}, means over seeds; only
    runs on the machine the baseline ran on count (shards may run on several)."""
    speeds = {}
    for data in dict.fromkeys(r["data"] for r in records):
        timed = [r for r in records if r["data"] == data and r["status"] == "finished" and r.get("training_speed")]
        baseline = [r for r in timed if r["method"] == experiment.baseline]
        if not baseline:
            continue
        same_machine = [r for r in timed if r.get("machine") == baseline[0].get("machine")]
        mean = {label: statistics.mean(r["training_speed"]["tokens_per_second"] for r in same_machine
                                       if r["label"] == label)
                for label in dict.fromkeys(r["label"] for r in same_machine)}
        speeds[data] = {label: value / mean[baseline[0]["label"]] for label, value in mean.items()}
    return speeds


def per_run(records, name):
    """(record, result) of every finished run that has this analysis."""
    return [(r, read_analysis(r, name)) for r in records
            if r["status"] == "finished" and name in r.get("analyses", {})]


def mean_cell(values, digits=2):
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


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

    # --- sections -------------------------------------------------------------

    def header(self):
        finished = sum(r["status"] == "finished" for r in self.records)
        failed = [r for r in self.records if r["status"] == "failed"]
        stale = [r for r in self.records if r["status"] == "stale"]
        missing = [r for r in self.records if r["status"] == "missing"]
        self.add(f"# {self.experiment.name}: position methods compared", "",
                 f"Experiment file `{self.experiment.path}`, report written "
                 f"{datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}. "
                 f"{finished} of {len(self.records)} runs finished"
                 + (f", {len(failed)} failed" if failed else "")
                 + (f", {len(stale)} stale (made with other settings than the file's; left out)" if stale else "")
                 + (f", {len(missing)} not run yet" if missing else "") + ".", "",
                 "Data settings: " + "; ".join(f"{label}: {self.experiment.data[label].design}"
                                                for label in self.data_settings()) + ".", "")

    def claims_table(self):
        rows = claims.evaluate(self.experiment, self.records, self.batch["speed"])
        self.batch["claims"] = rows
        self.add("## The SHAPE paper's claims in this batch", "",
                 "Each finding of Kiyono et al. (2021), the paper's figure, this batch's figure, and whether "
                 "it held here (computed from the results below; see onmt_posenc/experiments/claims.py for each test).", "")
        self.table(["claim", "paper", "this batch", "held?"],
                   [[row["claim"], row["paper"], row["measured"], row["held"]] for row in rows])

    def bleu_table(self):
        sets = self.experiment.eval_sets
        signature = next((r["bleu_signature"] for r in self.records if r["status"] == "finished"), "")
        self.add("## BLEU and relative training speed", "",
                 f"sacreBLEU ({signature}) of the averaged checkpoints, on detokenized text with the `<sep>` "
                 "separators removed; mean ± standard deviation over seeds where a method has several. "
                 f"Speed: training tokens/s relative to `{self.experiment.baseline}` (see Training speed).", "")
        rows = []
        for data in self.data_settings():
            for label in self.labels(data):
                runs = self.finished(data, label)
                cells = [mean_cell([r["bleu"][name] for r in runs if name in r["bleu"]]) for name in sets]
                ratio = self.batch["speed"].get(data, {}).get(label)
                rows.append([data, self.kind(data), label, len(runs), *cells, f"x{ratio:.2f}" if ratio else "–"])
        self.table(["data", "setting", "method", "seeds", *sets, "speed"], rows)

    def length_ratio_table(self):
        sets = self.experiment.eval_sets
        rows = [[data, label, *(mean_cell([r["length_ratio"][name] for r in self.finished(data, label)
                                           if name in r.get("length_ratio", {})]) for name in sets)]
                for data in self.data_settings() for label in self.labels(data)]
        self.add("## Hypothesis / reference length", "",
                 "sacreBLEU's length ratio per set: below 1 the translations stop early, above 1 they run on.", "")
        self.table(["data", "method", *sets], rows)

    def score_parts_table(self):
        """chrF beside BLEU, and BLEU's parts: how much of a difference is length (the brevity
        penalty) and how much n-gram precision. Runs stored before these were kept have none."""
        rows, signature = [], None
        for r in self.records:
            if r["status"] != "finished" or not r.get("bleu_details"):
                continue
            signature = signature or r.get("chrf_signature")
            for name in self.experiment.eval_sets:
                parts = r["bleu_details"].get(name)
                if parts is not None:
                    rows.append([r["id"], name, f"{r['bleu'][name]:.2f}", f"{parts['chrf']:.2f}",
                                 f"{parts['brevity_penalty']:.3f}", f"{r['length_ratio'][name]:.3f}",
                                 " / ".join(f"{p:.1f}" for p in parts["precisions"])])
        if not rows:
            return
        self.add("## chrF and BLEU's parts", "",
                 f"chrF ({signature}), and BLEU = brevity penalty x the geometric mean of the 1- to 4-gram "
                 "precisions: a BLEU difference with equal precisions is length, one with equal brevity "
                 "penalties is wording.", "")
        self.table(["run", "set", "BLEU", "chrF", "brevity penalty", "length ratio", "n-gram precisions (%)"], rows)

    def joined_table(self):
        rows = []
        for r in self.records:
            if r["status"] != "finished":  # a stale run's figures are left out, as everywhere
                continue
            for name, joined in r.get("joined", {}).items():
                rows.append([r["id"], name, joined["lines"], f"{r['bleu'][name]:.2f}", joined["sentences"],
                             f"{joined['bleu']:.2f}", joined["separator_mismatches"]])
        if not rows:
            return
        self.add("## Joined sets", "",
                 "Sets whose lines join several sentences with `<sep>`: BLEU of the lines with the separators "
                 "removed, BLEU of the sentences after splitting each translation at its separators "
                 "(`onmt-posenc interpolate split`), and the lines whose translation has the wrong number of "
                 "separators (split into the reference's number of sentences anyway).", "")
        self.table(["run", "set", "lines", "BLEU", "sentences", "BLEU split", "wrong separators"], rows)

    def length_section(self, options):
        self.add("## BLEU and length by source length", "",
                 "Corpus BLEU and hypothesis/reference length per bucket of source length; shaded buckets "
                 "(marked * in the tables) hold lengths longer than any training source.", "")
        results = {}
        for data in self.data_settings():
            chosen = {label: r for label, r in first_seed_runs(self.records, data).items()
                      if "length_buckets" in r.get("analyses", {})}
            if not chosen:
                continue
            stored = {label: read_analysis(r, "length_buckets") for label, r in chosen.items()}
            base = baseline_label(self.experiment, chosen)
            for name in options["sets"]:
                if not all(name in s for s in stored.values()):  # runs made before `sets` named it
                    self.add(f"### {data} / {name}", "", "Not in every run's stored analysis; run them again.", "")
                    continue
                result = length_buckets.compare({label: s[name] for label, s in stored.items()}, base)
                results[f"{data}/{name}"] = result
                longest = result["max_train_length"]
                path = length_buckets.plot(result, self.plots / f"length_{data}_{name}.png",
                                           f"{data} / {name}: by source length (longest training source: {longest})")
                self.add(f"### {data} / {name}", "")
                self.image(path, f"BLEU by source length, {data} {name}")
                # one row per method, one column per bucket: narrow however many methods
                buckets = [b + (" *" if unseen else "") for b, unseen in zip(result["buckets"], result["unseen"])]
                for title, values, form in (("BLEU", result["bleu"], "{:.1f}"),
                                            (f"BLEU gain over {base}", result.get("gain", {}), "{:+.1f}"),
                                            ("hypothesis/reference length", result["length_ratio"], "{:.2f}")):
                    if values:
                        self.table([f"{title}, by source length", *buckets],
                                   [["sentences", *result["counts"]]]
                                   + [[label, *(form.format(v) for v in row)] for label, row in values.items()])
        self.batch["length_buckets"] = results

    def data_size_section(self):
        """SHAPE's test BLEU minus APE's against the training pairs, over the VANILLA settings
        that differ in size only (claims.Batch's roles; SHAPE's K chosen per setting on valid)."""
        batch = claims.Batch(self.experiment, self.records)
        eval_set = "test" if "test" in self.experiment.eval_sets else self.experiment.eval_sets[-1]
        points = []
        for data in batch.of_kind("VANILLA"):
            ape, shape = batch.bleu(data, "APE", eval_set), batch.bleu(data, "SHAPE", eval_set)
            pairs = training_pairs(self.experiment.data[data])
            if ape and shape and pairs:
                spread = math.sqrt(sum(statistics.variance(v) / len(v) for v in (ape, shape) if len(v) > 1))
                points.append((pairs, data, ape, shape, statistics.mean(shape) - statistics.mean(ape), spread))
        if len(points) < 2:
            return
        points.sort()
        self.add("## SHAPE's difference from APE by training data", "",
                 f"{eval_set} BLEU of SHAPE (its K chosen on valid BLEU per setting) minus APE's, on VANILLA "
                 "settings of different sizes; ± one standard error of the difference from the seeds' spread "
                 "(none with one seed each). Only the sizes measured: no line is drawn beyond them.", "")
        self.table(["data", "training pairs", "APE", "SHAPE", "SHAPE - APE"],
                   [[data, f"{pairs:,}", mean_cell(ape), mean_cell(shape),
                     f"{difference:+.2f}" + (f" ± {spread:.2f}" if spread else "")]
                    for pairs, data, ape, shape, difference, spread in points])
        fig, ax = plots.figure()
        ax.errorbar([p[0] for p in points], [p[4] for p in points], yerr=[p[5] for p in points], marker="o",
                    capsize=4)
        ax.axhline(0, color="grey", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_xticks([p[0] for p in points], [f"{p[0]:,}" for p in points])
        ax.set_xlabel("training pairs")
        ax.set_ylabel(f"SHAPE - APE, {eval_set} BLEU")
        ax.set_title("SHAPE's difference from APE by training data size", fontsize=10)
        self.image(plots.save(fig, self.plots / "data_size.png"), "SHAPE minus APE by training pairs")
        self.batch["data_size"] = [{"data": data, "training_pairs": pairs, "difference": difference, "spread": spread}
                                   for pairs, data, _, _, difference, spread in points]

    def swapped_section(self):
        rows = []
        for r, stored in per_run(self.records, "swapped"):
            for name, a in stored.items():
                where = "training examples" if name == "train" else name
                by_separators = ([f"{a['original']:.2f}", f"{a['swapped']:.2f}", f"{a['drop']:.2f}"]
                                 if a["applicable"] else ["–", "–", "not measured"])
                aligned = a.get("aligned")
                by_alignment = ([f"{aligned['original']:.2f}", f"{aligned['swapped']:.2f}", f"{aligned['drop']:.2f}"]
                                if aligned else ["–", "–", "–"])
                wrong = f"{a['wrong_separators']:.0%}" if a.get("wrong_separators") is not None else a.get("why", "–")
                rows.append([r["id"], where, *by_separators, *by_alignment, a["examples"], wrong])
        if not rows:
            return
        self.add("## Swapped evaluation", "",
                 "BLEU of the first sentence X1 of each joined example, translated where it stands "
                 "(Original) and after moving it to the end (Swapped). A small drop means the model "
                 "translates a sentence the same wherever it stands. As in the paper, on joined examples of "
                 "the training corpus as the model saw it (training examples), and on a joined evaluation set. "
                 "X1's translation is found by the separators, where the model writes them right (at most "
                 f"{WRONG_SEPARATORS_AT_MOST:.0%} of its Original lines with another number than the reference), "
                 "and by alignment, always: each translation cut into one segment per reference sentence by "
                 "minimum edit distance (as IWSLT scores unsegmented output), on the tokens BLEU counts.", "")
        self.table(["run", "examples from", "Original (sep.)", "Swapped (sep.)", "drop (sep.)", "Original (aligned)",
                    "Swapped (aligned)", "drop (aligned)", "examples", "wrong separators"], rows)

    def curves_section(self):
        """Validation perplexity (and BLEU, where the runs computed it) against updates, per data setting."""
        curved = [r for r in self.records if r["status"] == "finished" and (r.get("curve") or {}).get("valid")]
        if not curved:
            return
        annealed = sorted({r["id"] for r in curved if curves.anneals(r["config"])})
        self.add("## Learning curves", "",
                 f"Validation perplexity against updates, from onmt_train's log. A run counts as converged "
                 f"when its {curves.RULE}; BLEU claims rest only on converged runs."
                 + (f" {len(annealed)} run(s) anneal the learning rate to the end of training (decay_method "
                    "noamwd, or start_decay_steps): for them a flat last quarter says that training ended on "
                    "its plateau within this budget, not that a longer schedule could not go lower."
                    if annealed else ""), "")
        for data in self.data_settings():
            runs = [r for r in curved if r["data"] == data]
            for field, name in (("ppl", "validation perplexity"), ("bleu", "validation BLEU")):
                lines = {f"{r['label']} seed {r['seed']}": [(p["step"], p[field]) for p in r["curve"]["valid"]
                                                             if field in p] for r in runs}
                lines = {label: points for label, points in lines.items() if points}
                if lines:
                    path = plots.curves(lines, self.plots / f"curve_{field}_{data}.png",
                                        f"{data} ({self.kind(data)}): {name}", "updates", name, log=field == "ppl")
                    self.image(path, f"{name}, {data}")
        rows = [[r["id"], r["curve"]["valid"][-1]["step"], f"{r['curve']['valid'][-1]['ppl']:.2f}",
                 {True: "yes", False: "no", None: "–"}[r["convergence"]["converged"]], r["convergence"]["why"]]
                for r in curved]
        self.table(["run", "updates", "final valid ppl", "converged", "why"], rows)

    def shift_section(self):
        results = per_run(self.records, "shift_invariance")
        if not results:
            return
        self.add("## Shift invariance of the encoder", "",
                 "Mean cosine similarity of encoder states when all positions are offset by k. "
                 "An encoder without absolute positions (relative positions in its attention, or "
                 "none at all) is 1.0 by construction (nothing to shift): that row is no measurement.", "")
        rows, images = [], []
        for record, result in results:
            path = self.plots / f"shift_{record['id'].replace('/', '_')}.png"
            shift_invariance.plot(result, path, f"Encoder shift invariance: {record['id']}")
            images.append((path, f"shift invariance {record['id']}"))
            value = f"{result['mean_off_diagonal']:.3f}"
            rows.append([record["id"], value if result["absolute_positions"] else f"{value} (by construction)",
                         ", ".join(str(k) for k in result["offsets"]),
                         "yes" if result["absolute_positions"] else "no"])
        self.table(["run", "mean similarity across offsets", "offsets", "absolute positions"], rows)
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
            stored = {label: read_analysis(r, "token_nll") for label, r in chosen.items()}
            if "frequency" not in stored[base]:  # stored by a version that kept no token frequencies
                continue
            for label in chosen:
                if label == base:
                    continue
                result = token_nll.compare(stored[label]["nll"], stored[base]["nll"], stored[base]["frequency"],
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
        results = per_run(self.records, "position_ablation")
        if not results:
            return
        self.add("## Position ablation", "",
                 "Teacher-forced features and perplexity of each trained model as trained and with its "
                 "absolute position encoding removed (seed 003's checks): from the encoder, the decoder, the "
                 "decoder with the decaying mask in its self-attention (no training), or both sides. Cosine: "
                 "of each token's encoder and decoder features with those of the model as trained. Yardsticks, "
                 "measured: the cosine of two N(0, I) vectors of the model's dimension (the slides' baseline), "
                 "and that of two different tokens' features of the model as trained.", "")
        rows, sticks = [], []
        for record, result in results:
            if not result["removed_from"]:  # unchanged by construction: no measurement
                rows.append([record["id"], "nothing (no absolute positions)", "–", "–",
                             f"{result['perplexity_kept']:.2f}", "–"])
                continue
            conditions = result.get("conditions") or {" + ".join(result["removed_from"]): {
                "encoder_cosine": result["encoder_cosine"], "decoder_cosine": result["decoder_cosine"],
                "perplexity": result["perplexity_removed"]}}
            for name, row in conditions.items():
                rows.append([record["id"], name, f"{row['encoder_cosine']:.3f}", f"{row['decoder_cosine']:.3f}",
                             f"{result['perplexity_kept']:.2f}", f"{row['perplexity']:.2f}"])
            if result.get("yardsticks"):
                y = result["yardsticks"]
                sticks.append([record["id"], f"{y['random_mean']:.3f} ± {y['random_std']:.3f} (d = {y['dim']})",
                               f"{y['encoder_other_token']:.3f}", f"{y['decoder_other_token']:.3f}"])
        self.table(["run", "positions removed from", "encoder cosine", "decoder cosine", "ppl as trained",
                    "ppl removed"], rows)
        if sticks:
            self.table(["run", "N(0, I) vectors", "two tokens, encoder", "two tokens, decoder"], sticks)
        config = next(r["config"] for r, _ in results)
        dim = config.get("word_vec_size") or config.get("hidden_size") or 512
        path = position_ablation.plot_sinusoids(
            dim, self.plots / "sinusoids.png", enc_type=config.get("position_encoding_type", "SinusoidalInterleaved"))
        self.image(path, "sinusoid matrix")

    def speed_table(self):
        rows, machines = [], set()
        for data in self.data_settings():
            for label in self.labels(data):
                runs = [r for r in self.finished(data, label) if r.get("training_speed")]
                machines.update(describe_machine(r["machine"]) for r in runs if r.get("machine"))
                ratio = self.batch["speed"].get(data, {}).get(label)
                rows.append([data, label, mean_cell([r["training_speed"]["tokens_per_second"] for r in runs], 0),
                             f"x{ratio:.2f}" if ratio else "–", mean_cell([r["train_seconds"] / 60 for r in runs], 1)])
        if not rows:
            return
        self.add("## Training speed", "",
                 "Measured in each run while onmt_train trained it (forward, backward and optimizer step, "
                 "dropout on, on the same training data and batch settings for every method of a data setting): "
                 "source + target tokens per second, the median over OpenNMT-py's report intervals after the "
                 "first (warm-up). Runs ran one after another on "
                 + ("; ".join(sorted(machines)) or "an unrecorded machine")
                 + "; a busy machine slows whichever run it meets, so read ratios near 1 as equal.", "")
        self.table(["data", "method", "tokens/s", f"vs {self.experiment.baseline}", "training minutes"], rows)

    def runs_table(self):
        self.add("## Runs", "")
        rows = []
        for r in self.records:
            shown = r["status"] != "stale"  # a stale run's figures are left out here too
            bleu = ", ".join(f"{k} {v:.2f}" for k, v in r.get("bleu", {}).items() if shown) or "–"
            note = r.get("error", "") if r["status"] != "finished" else "; ".join(
                f"{k}: {v}" for k, v in r.get("analysis_errors", {}).items())
            log = f" (log: `{r['log']}`)" if r.get("log") and str(r["log"]) not in note else ""
            minutes = f"{r['seconds'] / 60:.1f}" if "seconds" in r and shown else "–"
            rows.append([r["id"], r["status"], bleu, minutes, (note + log).replace("|", "/") or "–"])
        self.table(["run", "status", "BLEU", "minutes", "notes"], rows)

    def write(self):
        analyses = self.experiment.analyses
        self.header()
        self.claims_table()
        self.bleu_table()
        self.length_ratio_table()
        self.score_parts_table()
        self.joined_table()
        self.data_size_section()
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
        self.curves_section()
        self.speed_table()
        self.runs_table()
        path = self.out / "report.md"
        write_text_atomically(path, "\n".join(self.lines) + "\n")
        return path


def training_pairs(setting):
    """How many training pairs a data setting reads: its cut (`train_pairs`, `lines`), else its
    training file's lines where the file is at hand; None otherwise (a synthetic task)."""
    if setting.train is None:
        return None
    if setting.train.lines:
        return setting.train.lines
    if setting.train.src.is_file():
        with open(setting.train.src, "rb") as f:
            return sum(1 for _ in f)
    return None


def describe_machine(machine):
    gpus = f", GPU {', '.join(machine['gpus'])}" if machine.get("gpus") else ""
    return f"{machine['cpu']} ({machine['cores']} cores{gpus}), torch {machine['torch']}"


CSV_FIELDS = ["id", "data", "method", "K", "seed", "status"]


def write_results(experiment, records, batch):
    """results.json (every record and the cross-run results) and results.csv (one row per run)."""
    out = Path(experiment.output)
    write_json(out / "results.json", {"experiment": str(experiment.path), "runs": records, "across_runs": batch})
    sets = list(dict.fromkeys(name for r in records for name in r.get("bleu", {})))
    with open(out / "results.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_FIELDS + [f"bleu_{name}" for name in sets]
                        + ["final_valid_ppl", "converged", "training_tokens_per_second", "speed", "train_seconds",
                           "log"])
        for r in records:
            ratio = batch["speed"].get(r["data"], {}).get(r["label"])
            valid = (r.get("curve") or {}).get("valid")
            writer.writerow([r.get(k) for k in CSV_FIELDS]
                            + [f"{r['bleu'][n]:.2f}" if n in r.get("bleu", {}) else "" for n in sets]
                            + [f"{valid[-1]['ppl']:.3f}" if valid else "",
                               (r.get("convergence") or {}).get("converged", ""),
                               f"{r['training_speed']['tokens_per_second']:.0f}" if r.get("training_speed") else "",
                               f"{ratio:.3f}" if ratio is not None else "", r.get("train_seconds", ""),
                               r.get("log", "")])


def write(experiment, records=None):
    """Collect the runs (unless given their `records`) and write results and report; returns report.md."""
    records = collect(experiment) if records is None else records
    report = Report(experiment, records)
    path = report.write()
    write_results(experiment, records, report.batch)
    return path


def add_arguments(parser):
    """The arguments given to `onmt-posenc run`, to find the same runs."""
    experiments.add_arguments(parser, reporting=True)


def main(args):
    experiment = experiments.from_arguments(args)
    if not experiment.output.is_dir():
        what = "is not a folder" if experiment.output.exists() else "does not exist; run the experiment first"
        print(f"onmt-posenc report: error: the output {experiment.output} {what}", file=sys.stderr)
        return 2
    records = collect(experiment)
    if not any(r["status"] == "finished" for r in records):
        stale = sum(r["status"] == "stale" for r in records)
        why = (f"{stale} of {len(records)} runs are stale (made with other settings than the file's)" if stale
               else f"no run has finished yet (0 of {len(records)})")
        print(f"onmt-posenc report: warning: {why}; the report has no results, only what happened to each run",
              file=sys.stderr)
    print(f"report: {write(experiment, records)}", file=sys.stderr)
    return 0
