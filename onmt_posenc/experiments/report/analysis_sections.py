"""The report's sections on the analyses the runs stored (analyses/*.json): BLEU and length
by source length, the swapped evaluation, shift invariance, token-level NLL and the position
ablation. Each section is a function of the report (document.Report) that adds its
lines; methods are compared on each one's run with the lowest seed."""
from onmt_posenc.analysis import length_buckets, position_ablation, shift_invariance, token_nll
from onmt_posenc.analysis.swapped import WRONG_SEPARATORS_AT_MOST
from onmt_posenc.experiments.running.records import read_analysis, with_variants
from onmt_posenc.experiments.report.runs import baseline_label, first_seed_runs, per_run


def not_held_section(report, not_held):
    """In place of the analyses' sections a results.json cannot render: it was written before
    records held their analyses' results, and names only files in the run folders."""
    report.add("## Analyses not in results.json", "",
               "This report was rendered from results.json alone, written before results.json held the runs' "
               "analyses: it names only their files in the run folders, which are not read here. These "
               "analyses' sections are left out, and the claims that rest on them read \"not in this batch\".", "")
    report.table(["analysis", "runs"], [[name, len(ids)] for name, ids in not_held.items()])


def length_section(report, options):
    """Each method's (and each evaluation variant's: rotary+ntk) lowest seed by source length."""
    records = with_variants(report.records)
    chosen_by_data = {data: {label: r for label, r in first_seed_runs(records, data).items()
                             if "length_buckets" in r.get("analyses", {})} for data in report.data_settings()}
    if not any(chosen_by_data.values()):
        return
    report.add("## BLEU and length by source length", "",
               "Corpus BLEU and hypothesis/reference length per bucket of source length; shaded buckets "
               "(marked * in the tables) hold lengths longer than any training source.", "")
    results = {}
    for data, chosen in chosen_by_data.items():
        if not chosen:
            continue
        stored = {label: read_analysis(r, "length_buckets") for label, r in chosen.items()}
        base = baseline_label(report.experiment, chosen)
        for name in options["sets"]:
            if not all(name in s for s in stored.values()):  # runs made before `sets` named it
                report.add(f"### {data} / {name}", "", "Not in every run's stored analysis; run them again.", "")
                continue
            result = length_buckets.compare({label: s[name] for label, s in stored.items()}, base)
            results[f"{data}/{name}"] = result
            longest = result["max_train_length"]
            path = length_buckets.plot(result, report.plots / f"length_{data}_{name}.png",
                                       f"{data} / {name}: by source length (longest training source: {longest})")
            report.add(f"### {data} / {name}", "")
            report.image(path, f"BLEU by source length, {data} {name}")
            seeds = seeds_by_label(records, data, name)
            # with one seed each the figure above says it, but against the length relative to the training maximum
            if any(len(results) > 1 for results in seeds.values()) or "multiples" in result:
                report.image(length_buckets.plot_seeds(seeds, report.plots / f"length_seeds_{data}_{name}.png",
                                                       f"{data} / {name}: mean of the seeds, lowest to highest "
                                                       "shaded"), f"BLEU and length by source length over seeds, "
                                                                  f"{data} {name}")
            # one row per method, one column per bucket: narrow however many methods
            buckets = [b + (" *" if unseen else "") for b, unseen in zip(length_buckets.bucket_names(result),
                                                                          result["unseen"])]
            tables = [("BLEU", result["bleu"], "{:.1f}"),
                      (f"BLEU gain over {base}", result.get("gain", {}), "{:+.1f}"),
                      *((length_buckets.PER_BUCKET_SCORES[key], result.get(key, {}), form)
                        for key, form in (("brevity_penalty", "{:.2f}"), ("chrf", "{:.1f}"),
                                          ("length_ratio", "{:.2f}"), ("nll", "{:.2f}")))]
            for title, values, form in tables:
                if values:
                    report.table([f"{title}, by source length", *buckets],
                                 [["sentences", *result["counts"]]]
                                 + [[label, *("-" if v is None else form.format(v) for v in row)]
                                    for label, row in values.items()])
    report.batch["length_buckets"] = results


def seeds_by_label(records, data, name):
    """{label: [the stored length_buckets result on set `name` of each seed]} of a data setting."""
    seeds = {}
    for record, stored in per_run([r for r in records if r["data"] == data], "length_buckets"):
        if name in stored:
            seeds.setdefault(record["label"], []).append(stored[name])
    return seeds


def swapped_section(report):
    rows = []
    for r, stored in per_run(report.records, "swapped"):
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
    report.add("## Swapped evaluation", "",
               "BLEU of the first sentence X1 of each joined example, translated where it stands "
               "(Original) and after moving it to the end (Swapped). A small drop means the model "
               "translates a sentence the same wherever it stands. As in the paper, on joined examples of "
               "the training corpus as the model saw it (training examples), and on a joined evaluation set. "
               "X1's translation is found by the separators, where the model writes them right (at most "
               f"{WRONG_SEPARATORS_AT_MOST:.0%} of its Original lines with another number than the reference), "
               "and by alignment, always: each translation cut into one segment per reference sentence by "
               "minimum edit distance (as IWSLT scores unsegmented output), on the tokens BLEU counts.", "")
    report.table(["run", "examples from", "Original (sep.)", "Swapped (sep.)", "drop (sep.)", "Original (aligned)",
                  "Swapped (aligned)", "drop (aligned)", "examples", "wrong separators"], rows)


def shift_section(report):
    results = per_run(report.records, "shift_invariance")
    if not results:
        return
    report.add("## Shift invariance of the encoder", "",
               "Mean cosine similarity of encoder states when all positions are offset by k. "
               "An encoder without absolute positions (relative positions in its attention, or "
               "none at all) is 1.0 by construction (nothing to shift): that row is no measurement.", "")
    rows, images = [], []
    for record, result in results:
        path = report.plots / f"shift_{record['id'].replace('/', '_')}.png"
        shift_invariance.plot(result, path, f"Encoder shift invariance: {record['id']}")
        images.append((path, f"shift invariance {record['id']}"))
        value = f"{result['mean_off_diagonal']:.3f}"
        rows.append([record["id"], value if result["absolute_positions"] else f"{value} (by construction)",
                     ", ".join(str(k) for k in result["offsets"]),
                     "yes" if result["absolute_positions"] else "no"])
    report.table(["run", "mean similarity across offsets", "offsets", "absolute positions"], rows)
    for path, alt in images:
        report.image(path, alt)


def token_section(report, options, stored=None):
    """Token-level NLL of each method's first seed against the baseline's, computed from the
    runs' per-token values; a report rendered from results.json, which keeps only these
    comparisons (`stored`, its across_runs.token_nll), draws them from there."""
    results = _token_comparisons(report, options) or dict(stored or {})
    if not results:
        return
    report.add("## Token-level NLL", "",
               f"Share of gold tokens of the `{options['set']}` set (teacher forcing) where a method "
               "gives a lower NLL than the baseline, by decoder position and training frequency of "
               "the token. Above 0.5: the method wins.", "")
    report.table(["comparison", "gold tokens", "share won"],
                 [[name, r["tokens"], f"{r['share']:.3f}"] for name, r in results.items()])
    for name, result in results.items():
        data = name.split("/", 1)[0]
        path = report.plots / f"tokens_{data}_{result['method']}_vs_{result['baseline']}.png"
        token_nll.plot(result, path, result["method"], result["baseline"])
        report.image(path, f"token NLL {name}")
    report.batch["token_nll"] = results


def _token_comparisons(report, options):
    results = {}
    for data in report.data_settings():
        chosen = {label: r for label, r in first_seed_runs(report.records, data).items()
                  if "token_nll" in r.get("analysis_results", {})}
        base = baseline_label(report.experiment, chosen)
        if base is None or len(chosen) < 2:
            continue
        stored = {label: read_analysis(r, "token_nll") for label, r in chosen.items()}
        if "frequency" not in stored[base]:  # stored by a version that kept no token frequencies
            continue
        for label in chosen:
            if label != base:
                result = token_nll.compare(stored[label]["nll"], stored[base]["nll"], stored[base]["frequency"],
                                           options["position_width"], options["frequency_bins"])
                results[f"{data}/{label}-vs-{base}"] = {**result, "method": label, "baseline": base}
    return results


def ablation_section(report):
    results = per_run(report.records, "position_ablation")
    if not results:
        return
    report.add("## Position ablation", "",
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
    report.table(["run", "positions removed from", "encoder cosine", "decoder cosine", "ppl as trained",
                  "ppl removed"], rows)
    if sticks:
        report.table(["run", "N(0, I) vectors", "two tokens, encoder", "two tokens, decoder"], sticks)
    config = next(r["config"] for r, _ in results)
    dim = config.get("word_vec_size") or config.get("hidden_size") or 512
    path = position_ablation.plot_sinusoids(
        dim, report.plots / "sinusoids.png", enc_type=config.get("position_encoding_type", "SinusoidalInterleaved"))
    report.image(path, "sinusoid matrix")
