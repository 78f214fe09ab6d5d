"""The report's sections on what every run measured: the claims, BLEU and its parts, lengths,
joined sets, BLEU by training data size, learning curves, training speed and the runs.
Each section is a function of the report (document.Report) that adds its lines."""
import datetime
import statistics

from onmt_posenc.analysis import plots
from onmt_posenc.experiments.claims import shape_paper
from onmt_posenc.experiments.running import curves
from onmt_posenc.experiments.claims.batch import (FAILED_GAP_RATIO, FAILED_VALID_RATIO, MIN_SEEDS_FOR_SPREAD, Batch,
                                                  claims_method,
                                                  compared_set, failed_to_learn, mean_cell, not_converged,
                                                  seed_difference)
from onmt_posenc.experiments.running.records import where_its_log_is
from onmt_posenc.experiments.claims.speeds import describe_machine, speed_machine, timed_runs
from onmt_posenc.experiments.report.runs import baseline_label


def header(report):
    finished = sum(r["status"] == "finished" for r in report.records)
    failed = [r for r in report.records if r["status"] == "failed"]
    stale = [r for r in report.records if r["status"] == "stale"]
    interrupted = [r for r in report.records if r["status"] == "interrupted"]
    missing = [r for r in report.records if r["status"] == "missing"]
    worked_on = [r for r in report.records if r.get("runner")]
    report.add(f"# {report.experiment.name}: position methods compared", "",
               f"Experiment file `{report.experiment.path}`, report written "
               f"{datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}. "
               f"{finished} of {len(report.records)} runs finished"
               + (f", {len(failed)} failed" if failed else "")
               + (f", {len(stale)} stale (made with other settings than the file's; left out)" if stale else "")
               + (f", {len(interrupted)} interrupted" if interrupted else "")
               + (f", {len(missing)} without a result yet" if missing else "")
               + (f", {len(worked_on)} being worked on by a runner now" if worked_on else "") + ".", "",
               "Data settings: " + "; ".join(f"{label}: {report.experiment.data[label].design}"
                                              for label in report.data_settings()) + ".", "")


def claims_table(report):
    rows = shape_paper.evaluate(report.experiment, report.records, report.batch["speed"])
    report.batch["claims"] = rows
    report.add("## The SHAPE paper's claims in this batch", "",
               "Each finding of Kiyono et al. (2021), the paper's figure, this batch's figure, and whether "
               "it held here (computed from the results below; see onmt_posenc/experiments/claims/ for each test).", "",
               *claims_method(rows), "")
    report.table(["claim", "paper", "this batch", "held?"],
                 [[row["claim"], row["paper"], row["measured"], row["held"]] for row in rows])
    batch = Batch(report.experiment, report.records)
    if batch.unchosen:
        report.add("Left out of the claims, as the paper chose K on its dev set: "
                   + "; ".join(batch.unchosen.values()) + ".", "")
    if batch.failed:
        report.add(f"Left out of the claims, as they failed to learn (validation perplexity at least "
                   f"x{FAILED_VALID_RATIO:g} the baseline's of their data setting, and validation over training "
                   f"perplexity at least x{FAILED_GAP_RATIO:g} the baseline's): "
                   + "; ".join(f"{id} ({why})" for id, why in batch.failed.items()) + ".", "")
    if batch.left_out:
        report.add(f"Left out of every comparison, as they did not converge ({curves.RULE}; each is replaced by "
                   "its method's next seed): " + "; ".join(batch.left_out) + ".", "")


def averaged(runs):
    """(the runs a table's means are of, the cell of their count): the converged ones, the others
    counted as left out; all of them, so marked, where none has converged."""
    converged = [r for r in runs if not not_converged([r])]
    if converged and len(converged) < len(runs):
        return converged, f"{len(converged)} (+{len(runs) - len(converged)} not converged, left out)"
    if runs and not converged:
        return runs, f"{len(runs)} (none converged)"
    return runs, len(runs)


def bleu_table(report):
    sets = report.experiment.eval_sets
    signature = next((r["bleu_signature"] for r in report.records if r["status"] == "finished"), "")
    report.add("## BLEU and relative training speed", "",
               f"sacreBLEU ({signature}) of the averaged checkpoints, on detokenized text with the `<sep>` "
               "separators removed; mean ± standard deviation over seeds where a method has several, of its "
               "converged runs (the others counted beside, left out). "
               f"Speed: training tokens/s relative to `{report.experiment.baseline}` (see Training speed).", "")
    rows = []
    for data in report.data_settings():
        for label in report.labels(data):
            runs, seeds = averaged(report.finished(data, label))
            cells = [mean_cell([r["bleu"][name] for r in runs if name in r["bleu"]]) for name in sets]
            rows.append([data, report.kind(data), label, seeds, *cells, speed_cell(report, data, label)])
    report.table(["data", "setting", "method", "seeds", *sets, "speed"], rows)


def length_ratio_table(report):
    sets = report.experiment.eval_sets
    rows = []
    for data in report.data_settings():
        for label in report.labels(data):
            runs, seeds = averaged(report.finished(data, label))
            rows.append([data, label, seeds, *(mean_cell([r["length_ratio"][name] for r in runs
                                                          if name in r.get("length_ratio", {})]) for name in sets)])
    report.add("## Hypothesis / reference length", "",
               "sacreBLEU's length ratio per set: below 1 the translations stop early, above 1 they run on "
               "(the converged runs' mean, as in the BLEU table).", "")
    report.table(["data", "method", "seeds", *sets], rows)


def score_parts_table(report):
    """chrF beside BLEU, and BLEU's parts: how much of a difference is length (the brevity
    penalty) and how much n-gram precision. Runs stored before these were kept have none."""
    rows, signature = [], None
    for r in report.records:
        if r["status"] != "finished" or not r.get("bleu_details"):
            continue
        signature = signature or r.get("chrf_signature")
        for name in report.experiment.eval_sets:
            parts = r["bleu_details"].get(name)
            if parts is not None:
                rows.append([r["id"], name, f"{r['bleu'][name]:.2f}", f"{parts['chrf']:.2f}",
                             f"{parts['brevity_penalty']:.3f}", f"{r['length_ratio'][name]:.3f}",
                             " / ".join(f"{p:.1f}" for p in parts["precisions"])])
    if not rows:
        return
    report.add("## chrF and BLEU's parts", "",
               f"chrF ({signature}), and BLEU = brevity penalty x the geometric mean of the 1- to 4-gram "
               "precisions: a BLEU difference with equal precisions is length, one with equal brevity "
               "penalties is wording.", "")
    report.table(["run", "set", "BLEU", "chrF", "brevity penalty", "length ratio", "n-gram precisions (%)"], rows)


def joined_table(report):
    rows = []
    for r in report.records:
        if r["status"] != "finished":  # a stale run's figures are left out, as everywhere
            continue
        for name, joined in r.get("joined", {}).items():
            rows.append([r["id"], name, joined["lines"], f"{r['bleu'][name]:.2f}", joined["sentences"],
                         f"{joined['bleu']:.2f}", joined["separator_mismatches"]])
    if not rows:
        return
    report.add("## Joined sets", "",
               "Sets whose lines join several sentences with `<sep>`: BLEU of the lines with the separators "
               "removed, BLEU of the sentences after splitting each translation at its separators "
               "(`onmt-posenc interpolate split`), and the lines whose translation has the wrong number of "
               "separators (split into the reference's number of sentences anyway).", "")
    report.table(["run", "set", "lines", "BLEU", "sentences", "BLEU split", "wrong separators"], rows)


def data_size_section(report):
    """SHAPE's test BLEU minus APE's against the training pairs, over the VANILLA settings
    that differ in size only (Batch's roles; SHAPE's K chosen per setting on valid)."""
    batch = Batch(report.experiment, report.records)
    eval_set = compared_set(report.experiment.eval_sets)
    points = []
    for data in batch.of_kind("VANILLA"):
        ape, shape = batch.bleu(data, "APE", eval_set), batch.bleu(data, "SHAPE", eval_set)
        pairs = report.experiment.training_pairs.get(data)
        if ape and shape and pairs:
            # the standard error of the claims' difference (their interval is Student's t of it)
            difference = seed_difference(("SHAPE", "APE"), shape, ape, batch.seeded(data, eval_set))
            spread = difference.standard_error if difference.spread is not None else None
            points.append((pairs, data, ape, shape, statistics.mean(shape) - statistics.mean(ape), spread))
    if len(points) < 2:
        return
    points.sort()
    report.add("## SHAPE's difference from APE by training data", "",
               f"{eval_set} BLEU of SHAPE (its K chosen on valid BLEU per setting) minus APE's, on VANILLA "
               "settings of different sizes; ± one standard error of the difference from the seeds' spread, "
               f"as the claims take it (none where no method of the setting has {MIN_SEEDS_FOR_SPREAD} seeds). "
               "Only the sizes measured: no line is drawn beyond them.", "")
    report.table(["data", "training pairs", "APE", "SHAPE", "SHAPE - APE"],
                 [[data, f"{pairs:,}", mean_cell(ape), mean_cell(shape),
                   f"{difference:+.2f}" + (f" ± {spread:.2f}" if spread is not None else "")]
                  for pairs, data, ape, shape, difference, spread in points])
    fig, ax = plots.figure()
    ax.errorbar([p[0] for p in points], [p[4] for p in points], yerr=[p[5] or 0 for p in points], marker="o",
                capsize=4)
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xticks([p[0] for p in points], [f"{p[0]:,}" for p in points])
    ax.set_xlabel("training pairs")
    ax.set_ylabel(f"SHAPE - APE, {eval_set} BLEU")
    ax.set_title("SHAPE's difference from APE by training data size", fontsize=10)
    report.image(plots.save(fig, report.plots / "data_size.png"), "SHAPE minus APE by training pairs")
    report.batch["data_size"] = [{"data": data, "training_pairs": pairs, "difference": difference, "spread": spread}
                                 for pairs, data, _, _, difference, spread in points]


def curves_section(report):
    """Validation perplexity (and BLEU, where the runs computed it) against updates, per data setting."""
    curved = [r for r in report.records if r["status"] == "finished" and (r.get("curve") or {}).get("valid")]
    if not curved:
        return
    annealed = sorted({r["id"] for r in curved if curves.anneals(r["config"])})
    report.add("## Learning curves", "",
               f"Validation perplexity against updates, from onmt_train's log. A run counts as converged "
               f"when its {curves.RULE}; BLEU claims rest only on converged runs."
               + (f" {len(annealed)} run(s) anneal the learning rate to the end of training (decay_method "
                  "noamwd, or start_decay_steps): for them a flat last quarter says that training ended on "
                  "its plateau within this budget, not that a longer schedule could not go lower."
                  if annealed else ""), "")
    for data in report.data_settings():
        runs = [r for r in curved if r["data"] == data]
        for field, name in (("ppl", "validation perplexity"), ("bleu", "validation BLEU")):
            lines = {f"{r['label']} seed {r['seed']}": [(p["step"], p[field]) for p in r["curve"]["valid"]
                                                         if field in p] for r in runs}
            lines = {label: points for label, points in lines.items() if points}
            if lines:
                path = plots.curves(lines, report.plots / f"curve_{field}_{data}.png",
                                    f"{data} ({report.kind(data)}): {name}", "updates", name, log=field == "ppl")
                report.image(path, f"{name}, {data}")
    rows = [[r["id"], r["curve"]["valid"][-1]["step"], f"{r['curve']['valid'][-1]['ppl']:.2f}",
             {True: "yes", False: "no", None: "–"}[r["convergence"]["converged"]], r["convergence"]["why"]]
            for r in curved]
    report.table(["run", "updates", "final valid ppl", "converged", "why"], rows)


def speed_cell(report, data, label):
    """The label's training speed relative to the baseline; the baseline's own is 1 by construction."""
    ratio = report.batch["speed"].get(data, {}).get(label)
    if ratio is None:
        return "–"
    compared = {l: report.finished(data, l)[0] for l in report.batch["speed"][data]}
    return f"x{ratio:.2f}" + (" (baseline)" if label == baseline_label(report.experiment, compared) else "")


def speed_table(report):
    numbers, rows = {}, []  # machine in words -> its number in the table
    for data in report.data_settings():
        timed = timed_runs(report.records, data)
        compared = speed_machine(report.experiment, timed)
        for label in report.labels(data):
            by_machine = {}
            for r in timed:
                if r["label"] == label:
                    by_machine.setdefault(describe_machine(r.get("machine")), []).append(r)
            if not by_machine:
                rows.append([data, "–", label, "–", "–", "–"])
            for machine, runs in by_machine.items():
                number = numbers.setdefault(machine, len(numbers) + 1)
                rows.append([data, number, label, mean_cell([r["training_speed"]["tokens_per_second"] for r in runs], 0),
                             speed_cell(report, data, label) if machine == compared else "–",
                             mean_cell([r["train_seconds"] / 60 for r in runs], 1)])
    if not numbers:
        return
    report.add("## Training speed", "",
               "Measured in each run while onmt_train trained it (forward, backward and optimizer step, "
               "dropout on, on the same training data and batch settings for every method of a data setting): "
               "source + target tokens per second, the median over OpenNMT-py's report intervals after the "
               "first (warm-up), mean over seeds. Machines: "
               + "; ".join(f"{number}: {machine}" for machine, number in numbers.items()) + ". "
               f"Ratios to `{report.experiment.baseline}` compare runs on one machine (of those the baseline "
               "trained on, the one that trained most runs); a run on another machine has no ratio, and the "
               "baseline's own is 1 by construction. Every finished run counts, converged or not: how fast "
               "it trained does not depend on where its curve ended. A busy machine slows whichever run it "
               "meets, so no difference of speed is measured from ratios near 1.", "")
    report.table(["data", "machine", "method", "tokens/s", f"vs {report.experiment.baseline}", "training minutes"],
                 rows)


def runs_table(report):
    report.add("## Runs", "")
    rows, failed = [], failed_to_learn(report.records, report.experiment.baseline)
    for r in report.records:
        shown = r["status"] != "stale"  # a stale run's figures are left out here too
        bleu = ", ".join(f"{k} {v:.2f}" for k, v in r.get("bleu", {}).items() if shown) or "–"
        note = r.get("error", "") if r["status"] != "finished" else "; ".join(
            ([f"failed to learn ({failed[r['id']]}): left out of the claims"] if r["id"] in failed else [])
            + [f"{k}: {v}" for k, v in r.get("analysis_errors", {}).items()])
        if r.get("runner"):
            note = f"being worked on now by a runner ({r['runner']})" + (f"; {note}" if note else "")
        log = where_its_log_is(r, note, markdown=True)
        minutes = f"{r['seconds'] / 60:.1f}" if "seconds" in r and shown else "–"
        rows.append([r["id"], r["status"], bleu, minutes, (note + log).replace("|", "/") or "–"])
    report.table(["run", "status", "BLEU", "minutes", "notes"], rows)
