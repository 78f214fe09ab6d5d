"""The report's claims table and its figures across runs: speed ratios and speed claims,
the SHAPE paper's BLEU and swapped claims, the perSPE paper's claims on kftt.yaml's methods,
SHAPE's difference from APE by training data."""
import pytest
from conftest import REPO, TEST_DATA, command, run
from runner_helpers import DEMO, PNG_MAGIC, experiment_file

from onmt_posenc import experiments
from onmt_posenc.experiments.running import runner


@pytest.fixture(scope="module")
def kftt_folder(tmp_path_factory):
    """The committed KFTT excerpt as `prepare kftt` writes it: kftt.yaml's folder (its data
    settings keep their sizes and designs with --data)."""
    folder = tmp_path_factory.mktemp("kftt") / "kftt"
    run([command("onmt-posenc"), "prepare", "kftt", folder, "--from", TEST_DATA / "kftt", "--vocab-size", "3000"])
    return folder


def test_speed_claims_only_from_runs_that_trained_alone(tmp_path):
    """Several shards on one GPU, or a loaded CPU: the ratio depends on what ran beside. Only
    the runs the ratio compares count: not a baseline seed on another machine."""
    from onmt_posenc.experiments.claims import shape_paper as claims

    loaded = experiments.load(experiment_file(tmp_path, grid={"method": ["ape", "shape"], "K": [10]},
                                              data={"small": {"synthetic": {}}}))

    def record(method, sharing, seed=1, machine="A"):
        return {"id": f"small/{method}/seed{seed}", "data": "small", "method": method, "seed": seed,
                "status": "finished", "label": "shape-K10" if method == "shape" else method, "bleu": {},
                "device_sharing": sharing, "config": {"shape_max_shift": 10} if method == "shape" else {},
                "machine": {"cpu": machine, "cores": 2, "torch": "2.13"}, "training_speed": {"tokens_per_second": 1.0}}

    alone = {"other_trainings": 0, "load_average": 1.1, "cores": 2}
    speeds = {"small": {"ape": 1.0, "shape-K10": 1.02}}
    for ape, shape, held, said in [
        (alone, alone, "yes", None),
        (alone, {**alone, "other_trainings": 15}, "not measured", "small/shape/seed1 trained beside 15 other"),
        ({**alone, "load_average": 3.9}, alone, "not measured", "loaded machine (load average 3.9 on 2 cores)"),
        (None, alone, "not measured", "small/ape/seed1: whether it shared its machine was not recorded"),
    ]:
        row = claims.speed(claims.Batch(loaded, [record("ape", ape), record("shape", shape)]), speeds, "SHAPE",
                           "paper", lambda ratio: abs(ratio - 1) <= claims.SAME_SPEED)
        assert row["held"] == held and (said is None or said in row["measured"]), row
    elsewhere = [record("ape", {**alone, "other_trainings": 3}, machine="B"),
                 record("ape", alone, seed=2), record("shape", alone)]
    row = claims.speed(claims.Batch(loaded, elsewhere), speeds, "SHAPE", "paper", lambda ratio: True)
    assert row["held"] == "yes", row


def test_a_resumed_runs_load_average_weighs_each_invocation_by_its_samples():
    """500 reports on a loaded machine, then 3 after a resume on an idle one: the run's load
    is that of its 503 samples, not the mean of the two invocations' means."""
    from onmt_posenc.experiments.running.progress import DeviceWatch

    earlier = {"other_trainings": 15, "load_average": 9.0, "cores": 16, "samples": 500}
    watch = DeviceWatch()
    watch.loads, watch.others = [2.0, 2.0, 2.0], [0, 0, 0]
    merged = watch.summary(earlier)
    assert merged["samples"] == 503 and merged["other_trainings"] == 15
    assert merged["load_average"] == round((9.0 * 500 + 2.0 * 3) / 503, 2)  # 8.96
    assert watch.summary()["load_average"] == 2.0 and watch.summary()["samples"] == 3


def test_speed_ratios_only_between_runs_on_one_machine(tmp_path):
    """The baseline trained on both machines; the ratios are those of the machine that trained
    most runs, never a ratio between machines."""
    from onmt_posenc.experiments.report.runs import relative_speeds

    loaded = experiments.load(experiment_file(tmp_path))
    cpu, gpu = {"cpu": "A", "cores": 2, "torch": "2.13"}, {"cpu": "B", "cores": 16, "gpus": ["H100"], "torch": "2.11"}
    records = [{"data": "small", "method": method, "label": method, "status": "finished", "machine": machine,
                "training_speed": {"tokens_per_second": speed}}
               for method, machine, speed in (("ape", cpu, 1000.0), ("rpe", cpu, 900.0), ("ape", gpu, 50000.0),
                                              ("shape", gpu, 45000.0), ("rpe", gpu, 40000.0))]
    assert relative_speeds(loaded, records) == {"small": {"ape": 1.0, "shape": 0.9, "rpe": 0.8}}
    assert relative_speeds(loaded, records[:2] + records[3:]) == {"small": {"ape": 1.0, "rpe": 0.9}}


def test_vanilla_bleu_claim_uses_the_seed_spread_and_only_converged_runs(tmp_path):
    from onmt_posenc.experiments.claims import shape_paper as claims

    loaded = experiments.load(experiment_file(tmp_path, grid={"method": ["ape", "shape"], "data": ["small"]}))
    converged = {"converged": True, "why": "test"}

    def record(method, seed, bleu, convergence=converged):
        config = {"shape_max_shift": 40} if method == "shape" else {}
        if method == "rpe":
            config = {"position_encoding": False, "max_relative_positions": 16}
        return {"id": f"small/{method}/seed{seed}", "status": "finished", "data": "small", "method": method,
                "label": method, "seed": seed, "bleu": {"test": bleu, "valid": bleu}, "config": config,
                "convergence": convergence}

    def row(records):
        return claims.vanilla_bleu(claims.Batch(loaded, records), "SHAPE", "paper")

    # three seeds each: 30.0 ± 1.0 vs 31.5 ± 1.0; 2 standard errors = 2 * sqrt(2/3) = 1.63 > 1.5
    ape = [record("ape", s, b) for s, b in ((1, 29.0), (2, 30.0), (3, 31.0))]
    shape = [record("shape", s, b) for s, b in ((1, 30.5), (2, 31.5), (3, 32.5))]
    result = row(ape + shape)
    assert result["held"] == "yes" and "SHAPE 31.50 ± 1.00 (3 seeds) vs APE 30.00 ± 1.00 (3 seeds) (+1.50" in result["measured"]
    assert "the same if within ±1.63, 2 standard errors of the difference from the seeds' spread" in result["measured"]
    # the same difference with seeds that agree closely is a real difference
    tight = [record("ape", s, b) for s, b in ((1, 29.9), (2, 30.0), (3, 30.1))]
    assert row(tight + [record("shape", s, b + 1.5) for s, b in ((1, 29.9), (2, 30.0), (3, 30.1))])["held"] == "no"
    # one seed each, and no method of the batch with seeds: no fixed tolerance, no verdict
    alone = row([ape[1], record("shape", 1, 30.9)])
    assert alone["held"] == "not measured" and "cannot be judged" in alone["measured"], alone
    # one seed each beside a method with seeds (RPE 31 ± 1.5, 3 seeds): 2 standard errors of a
    # one-against-one difference from that spread, 2 * 1.5 * sqrt(2) = 4.24
    rpe = [record("rpe", s, b) for s, b in ((1, 29.5), (2, 31.0), (3, 32.5))]
    near = row([ape[1], record("shape", 1, 34.0)] + rpe)
    assert near["held"] == "yes" and "within ±4.24" in near["measured"] and "RPE's 3 seeds" in near["measured"], near
    assert row([ape[1], record("shape", 1, 34.5)] + rpe)["held"] == "no"
    # two seeds that happen to agree give no spread: 36.675 and 36.681 would call -1.10 "not the same"
    lucky = [record("ape", 1, 36.675), record("ape", 2, 36.681)]
    result = row(lucky + [record("shape", 1, 35.57)])
    assert result["held"] == "not measured" and "no method of the batch has 3 seeds" in result["measured"], result
    result = row(lucky + [record("ape", 3, 34.9), record("shape", 1, 35.57)])  # a third seed: a spread of 1.03
    assert result["held"] == "yes" and "within ±2.37" in result["measured"], result
    # a model that has not converged: no verdict, and the reason
    late = record("shape", 1, 30.2, {"converged": False, "why": "valid ppl 5.00 -> 4.50 (-10.0%)"})
    result = row([ape[1], late])
    assert result["held"] == "not measured" and "small/shape/seed1 (valid ppl 5.00 -> 4.50 (-10.0%))" in result["measured"]
    assert row([ape[1], {**late, "convergence": None}])["held"] == "not measured"  # results without a curve


def test_k_is_chosen_on_valid_bleu_and_not_without_it(tmp_path):
    """SHAPE with K = 10 and 40: the K with the better valid BLEU plays SHAPE. Without valid
    BLEU (evaluation.sets: [test]) no K is chosen, not the grid's first: SHAPE's claims are
    not measured, and the report says why."""
    from onmt_posenc.experiments.claims import shape_paper as claims
    from onmt_posenc.experiments.report import tables as report_tables
    from onmt_posenc.experiments.report.document import Report
    from onmt_posenc.experiments.report.experiment import reported

    loaded = experiments.load(experiment_file(tmp_path, grid={"method": ["ape", "shape"], "K": [10, 40],
                                                              "data": ["small"]}))

    def record(label, bleu):
        config = {"shape_max_shift": int(label[7:])} if label.startswith("shape") else {}
        return {"id": f"small/{label}/seed1", "status": "finished", "data": "small", "method": label[:5].rstrip("-"),
                "label": label, "seed": 1, "bleu": bleu, "config": config, "length_ratio": {"test": 1.0},
                "convergence": {"converged": True, "why": "test"}}

    scored = [record("ape", {"valid": 30.0, "test": 30.0}), record("shape-K10", {"valid": 25.0, "test": 22.0}),
              record("shape-K40", {"valid": 31.0, "test": 31.0})]
    batch = claims.Batch(loaded, scored)
    assert batch.choices[("small", "SHAPE")] == "shape-K40 chosen on valid BLEU (shape-K10 25.00, shape-K40 31.00)"
    judged = claims.vanilla_bleu(batch, "SHAPE", "paper")  # K = 40's 31.00 against APE's 30.00, one seed each
    assert "shape-K40 chosen on valid BLEU" in judged["measured"] and "SHAPE 31.00 vs APE 30.00" in judged["measured"]
    assert "cannot be judged" in judged["measured"] and not batch.unchosen

    test_only = [{**r, "bleu": {"test": r["bleu"]["test"]}} for r in scored]
    batch = claims.Batch(loaded, test_only)
    assert batch.unchosen == {("small", "SHAPE"): "SHAPE in small: no label chosen among shape-K10, shape-K40 "
                                                   "(no valid BLEU for shape-K10, shape-K40)"}
    assert claims.vanilla_bleu(batch, "SHAPE", "paper")["held"] == "not measured"
    document = Report(reported(loaded), test_only)
    report_tables.claims_table(document)
    assert ("Left out of the claims, as the paper chose K on its dev set: SHAPE in small: no label chosen among "
            "shape-K10, shape-K40 (no valid BLEU for shape-K10, shape-K40).") in document.lines


def test_shift_invariance_claim_only_on_converged_models(tmp_path):
    from onmt_posenc.experiments.claims import shape_paper as claims

    loaded = experiments.load(experiment_file(tmp_path, grid={"method": ["ape", "shape"], "K": [10], "data": ["small"]}))

    def record(method, similarity, converged=True, seed=1):
        shift = {"offsets": [0, 5], "matrix": [[1.0, similarity], [similarity, 1.0]],
                 "mean_off_diagonal": similarity, "absolute_positions": True}
        return {"id": f"small/{method}/seed{seed}", "status": "finished", "data": "small", "method": method,
                "label": "shape-K10" if method == "shape" else method, "seed": seed, "bleu": {"valid": 1.0},
                "config": {"shape_max_shift": 10} if method == "shape" else {},
                "convergence": {"converged": converged, "why": "valid ppl 5.00 -> 4.50 (-10.0%)"},
                "analyses": {"shift_invariance": "analyses/shift_invariance.json"},
                "analysis_results": {"shift_invariance": shift}}

    def judged(*records):
        return claims.shift_invariance(claims.Batch(loaded, list(records)), "paper")

    def ape(*similarities):
        return [record("ape", value, seed=seed) for seed, value in enumerate(similarities, 1)]

    # APE 0.93 ± 0.02 over 3 seeds: 2 standard errors of SHAPE's one seed against them,
    # 2 * 0.02 * sqrt(1 + 1/3) = 0.046
    assert judged(*ape(0.91, 0.93, 0.95), record("shape", 0.98))["held"] == "yes"
    close = judged(*ape(0.91, 0.93, 0.95), record("shape", 0.97))  # above 0.9, but within APE's spread
    assert close["held"] == "no" and "within ±0.046" in close["measured"], close
    assert judged(*ape(0.45, 0.46, 0.44), record("shape", 0.85))["held"] == "no"
    # one APE seed: its spread unknown, no verdict
    assert judged(record("ape", 0.45), record("shape", 0.95))["held"] == "not measured"
    late = judged(*ape(0.45, 0.46, 0.44), record("shape", 0.95, converged=False))
    assert late["held"] == "not measured" and "not converged: small/shape/seed1" in late["measured"]


def test_only_shaw_plays_the_papers_rpe_in_the_claims():
    """The claims compare SHAPE with the paper's baselines; the position lab's other
    relative methods (Music, T5 buckets, rotary, ALiBi) are not Shaw's RPE."""
    from onmt_posenc.experiments.claims import batch as claims_batch

    def role(config):
        return claims_batch.role_of({"method": "m", "config": config}, baseline="ape")

    assert role({"max_relative_positions": 16}) == role({"max_relative_positions": 16, "relative_attention": "shaw"}) == "RPE"
    assert role({"max_relative_positions": 16, "relative_attention": "music"}) is None
    assert role({"max_relative_positions": 128, "relative_positions_buckets": 32}) is None
    assert role({"max_relative_positions": -1}) is role({"max_relative_positions": -2}) is None
    assert role({"shape_max_shift": 20}) == "SHAPE"
    # SHAPE on one side is not the paper's SHAPE
    assert role({"shape_max_shift": 20, "src_position_encoding": "sinusoidal", "position_encoding": True}) is None


def test_the_swapped_claim_uses_the_joined_setting_whose_models_write_separators(tmp_path):
    """Of two settings trained on joined sentences, one whose models do not write <sep>
    (the paper's joined-only training on a small corpus) does not hide the other."""
    from onmt_posenc.experiments.claims import shape_paper as claims

    single = {"max_sentences": 1, "test_sentences": 1, "concat_sentences": 1}
    loaded = experiments.load(experiment_file(tmp_path, data={
        "joined": {"synthetic": single, "interpolate": 4},
        "mixed": {"synthetic": single, "interpolate": 4, "single_pairs": 4}}, grid={"method": ["ape", "shape"]}))
    from onmt_posenc.analysis.swapped import separators_why

    no_sep = {"applicable": False, "examples": 10, "wrong_separators": 0.9, "why": separators_why(0.9)}

    def record(data, method, swapped):
        return {"id": f"{data}/{method}/seed1", "data": data, "method": method, "label": method, "seed": 1,
                "status": "finished", "bleu": {}, "dir": str(tmp_path / data / method),
                "analyses": {"swapped": "swapped.json"}, "analysis_results": {"swapped": {"train": swapped}},
                "convergence": {"converged": True, "why": "test"},
                "config": {"shape_max_shift": 10} if method == "shape" else {}}

    def drop(value):
        return {"applicable": True, "original": 30.0, "swapped": 30.0 - value, "drop": value, "examples": 10}

    failing = [record("joined", "ape", no_sep), record("joined", "shape", no_sep)]
    row = claims.swapped(claims.Batch(loaded, failing), "paper")
    assert row["held"] == "not measured" and "joined (INTERPOLATE" in row["measured"]
    assert "APE: not applicable: 90% of the model's Original translations" in row["measured"]
    usable = [record("mixed", "ape", drop(9.0)), record("mixed", "shape", drop(1.0))]
    row = claims.swapped(claims.Batch(loaded, failing + usable), "paper")
    assert row["held"] == "yes" and row["measured"].startswith("mixed (INTERPOLATE")
    # wrong separators, but X1 found by alignment: judged on the aligned drops, and said so
    aligned = [record("joined-aligned", m, {**no_sep, "wrong_separators": share, "aligned": drop(value)})
               for m, share, value in (("ape", 0.9, 6.0), ("shape", 0.4, 5.0))]
    for r in aligned:
        r["data"] = "joined"
    row = claims.swapped(claims.Batch(loaded, aligned), "paper")
    assert row["held"] == "no"  # 5.0 is more than half of 6.0
    assert "X1 found by alignment (separators wrong on 90% of APE's and 40% of SHAPE's lines)" in row["measured"]
    assert "APE 30.00 -> 24.00 (drop 6.00), SHAPE 30.00 -> 25.00 (drop 5.00)" in row["measured"]


def test_the_perspe_papers_tables_name_the_methods_of_kftt_yaml(kftt_folder):
    """Each method of recipes/experiments/kftt.yaml plays the role its name says."""
    from onmt_posenc.experiments.claims import batch as claims_batch

    loaded = experiments.load(REPO / "recipes" / "experiments" / "kftt.yaml", data_folder=kftt_folder)
    roles = {run.label: claims_batch.role_of({"method": run.method, "config": run.config}, loaded.baseline)
             for run in loaded.runs if run.data == "vanilla"}
    assert roles == {"ape": "APE", "perspe": "perSPE", "perspe-token-dec": "SPE/perSPE-token",
                     "perspe-token-enc": "perSPE-token/SPE", "perspe-token-both": "perSPE-token/perSPE-token",
                     "nope-enc": "none/SPE", "nope-dec": "SPE/none", "nope": "none/none", "decay-dec": "SPE/decay",
                     "rpe": "RPE", "rpe-enc": "RPE/none", "rpe-dec": "none/RPE", "shape-K10": "SHAPE",
                     "shape-K40": "SHAPE", "shape-enc-K10": None, "shape-dec-K10": None}


def test_perspe_claims_judged_on_trained_models_with_the_seeds_spread(kftt_folder):
    from onmt_posenc.experiments.claims import shape_paper as claims

    loaded = experiments.load(REPO / "recipes" / "experiments" / "kftt.yaml", data_folder=kftt_folder)
    configs = {run.label: run.config for run in loaded.runs if run.data == "vanilla"}
    converged = {"converged": True, "why": "test"}

    def record(label, seed, test):
        return {"id": f"vanilla/{label}/seed{seed}", "data": "vanilla", "method": label, "label": label,
                "seed": seed, "status": "finished", "bleu": {"valid": test, "test": test}, "convergence": converged,
                "config": configs[label]}

    records = [record("ape", seed, bleu) for seed, bleu in ((1, 10.0), (2, 10.4), (3, 9.6))]
    records += [record("perspe", seed, bleu) for seed, bleu in ((1, 10.5), (2, 10.1), (3, 10.9))]
    records += [record("nope-enc", 1, 4.0), record("nope-dec", 1, 9.9), record("decay-dec", 1, 9.7)]
    rows = {row["claim"]: row for row in claims.evaluate(loaded, records, {})}
    improves = rows["perSPE (target phrases, [-1, 1]) improves BLEU over SPE"]
    # +0.50 with a spread of 0.4 per method: within 2 standard errors (0.65), so not shown
    assert improves["held"] == "no" and "perSPE 10.50 ± 0.40 (3 seeds) vs APE 10.00 ± 0.40 (3 seeds)" in improves[
        "measured"]
    assert rows["No positions in the encoder collapses BLEU"]["held"] == "yes"
    assert rows["No positions in the decoder barely changes BLEU"]["held"] == "yes"
    assert rows["The decaying mask beats no positions in the decoder (trained)"]["held"] == "no"
    assert rows["Perturbing the encoder's positions hurts"]["held"] == "not measured"  # no such run
    records[3:6] = [record("perspe", seed, bleu) for seed, bleu in ((1, 11.5), (2, 11.1), (3, 11.9))]
    rows = {row["claim"]: row for row in claims.evaluate(loaded, records, {})}
    assert rows["perSPE (target phrases, [-1, 1]) improves BLEU over SPE"]["held"] == "yes"
    # a batch without these methods (the demo's) has none of these rows
    demo = experiments.load(DEMO)
    assert not any("perSPE" in row["claim"] for row in claims.evaluate(demo, [], {}))


def test_report_plots_shapes_difference_by_training_pairs(tmp_path, kftt_folder):
    """Over VANILLA settings that differ in size: SHAPE minus APE, ± the standard error the claims
    take from the seeds (none from two seeds each: too few for a spread)."""
    from onmt_posenc.experiments.report import command as report

    loaded = experiments.load(REPO / "recipes" / "experiments" / "kftt.yaml", output=tmp_path / "out",
                              data_folder=kftt_folder)
    wanted = {"vanilla-30k": {"ape": [5.0, 5.4], "shape-K10": [3.0, 3.2]},
              "vanilla": {"ape": [8.0, 8.4, 8.2], "shape-K10": [7.5, 7.7]},
              "vanilla-120k": {"ape": [11.0], "shape-K10": [10.9]}}
    records = []
    for run in loaded.runs:
        scores = wanted.get(run.data, {}).get(run.label)
        if scores and run.seed <= len(scores):
            bleu = scores[run.seed - 1]
            records.append({**runner.run_fields(run), "status": "finished", "bleu": {"valid": bleu, "test": bleu},
                            "bleu_signature": "tok:ja-mecab", "length_ratio": {"valid": 1.0, "test": 1.0},
                            "config": run.config, "convergence": {"converged": True, "why": "test"},
                            "dir": str(tmp_path / run.id), "analyses": {}})
        else:
            records.append({**runner.run_fields(run), "status": "missing", "dir": str(tmp_path / run.id)})
    text = report.write(loaded, records).read_text(encoding="utf-8")
    assert "## SHAPE's difference from APE by training data" in text
    section = text[text.index("## SHAPE's difference from APE by training data"):]
    rows = [line for line in section.splitlines() if line.startswith("| vanilla")]
    # smallest first; 60k: -0.60 ± sqrt(APE's variance 0.04 x (1/3 + 1/2)) = 0.18 (SHAPE's two
    # seeds are too few for a spread)
    assert rows[:3] == ["| vanilla-30k | 30,000 | 5.20 ± 0.28 | 3.10 ± 0.14 | -2.10 |",
                        "| vanilla | 60,000 | 8.20 ± 0.20 | 7.60 ± 0.14 | -0.60 ± 0.18 |",
                        "| vanilla-120k | 120,000 | 11.00 | 10.90 | -0.10 |"]
    assert (tmp_path / "out" / "plots" / "data_size.png").read_bytes()[:8] == PNG_MAGIC
