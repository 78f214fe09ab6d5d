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

    # three seeds each: 30.0 ± 1.0 vs 31.5 ± 1.0; the pooled variance has 4 degrees of freedom:
    # Student's t 2.776 x sqrt(2/3) = 2.27 > 1.5: no difference measured, which is not "the same"
    ape = [record("ape", s, b) for s, b in ((1, 29.0), (2, 30.0), (3, 31.0))]
    shape = [record("shape", s, b) for s, b in ((1, 30.5), (2, 31.5), (3, 32.5))]
    result = result_of_three = row(ape + shape)
    assert result["held"] == "no difference measured", result
    assert ("SHAPE 31.50 ± 1.00 (3 seeds) vs APE 30.00 ± 1.00 (3 seeds); SHAPE - APE +1.50 ± 2.27 (two-sided 95%, "
            "Student's t 2.776 at 4 df from SHAPE's 3 and APE's 3 seeds; test-set variance not measured (the runs kept no translations)), p 0.140: no difference measured (within ±2.27; "
            "a difference under 3.04 would not be seen)") in result["measured"]
    # the power: (t 2.776 + t(80%) 0.941) x the standard error 2.27 / 2.776
    assert result["figures"]["detectable"] == pytest.approx((2.776445 + 0.940965) * (2 / 3) ** 0.5, abs=1e-5)
    assert result["figures"]["df"] == 4 and result["figures"]["seeds"] == [3, 3]
    assert abs(result["figures"]["margin"] - 2.776445 * (2 / 3) ** 0.5) < 1e-5
    # the same difference with seeds that agree closely is a real difference
    tight = [record("ape", s, b) for s, b in ((1, 29.9), (2, 30.0), (3, 30.1))]
    found = row(tight + [record("shape", s, b + 1.5) for s, b in ((1, 29.9), (2, 30.0), (3, 30.1))])
    assert found["held"] == "no" and found["measured"].endswith("a difference measured"), found
    # one seed each, and no method of the batch with seeds: no fixed tolerance, no verdict
    alone = row([ape[1], record("shape", 1, 30.9)])
    assert alone["held"] == "not measured" and "no method of the batch has 3 seeds" in alone["measured"], alone
    # one seed each beside a method with seeds (RPE 31 ± 1.5, 3 seeds: 2 df): t 4.303 x 1.5 x sqrt(2) = 9.13
    rpe = [record("rpe", s, b) for s, b in ((1, 29.5), (2, 31.0), (3, 32.5))]
    near = row([ape[1], record("shape", 1, 39.0)] + rpe)
    assert near["held"] == "no difference measured" and "+9.00 ± 9.13" in near["measured"], near
    assert "at 2 df from the batch's spread: RPE's 3 seeds" in near["measured"], near
    assert row([ape[1], record("shape", 1, 39.5)] + rpe)["held"] == "no"
    # two seeds that happen to agree give no spread: 36.675 and 36.681 would call -1.10 "not the same"
    lucky = [record("ape", 1, 36.675), record("ape", 2, 36.681)]
    result = row(lucky + [record("shape", 1, 35.57)])
    assert result["held"] == "not measured" and "no method of the batch has 3 seeds" in result["measured"], result
    result = row(lucky + [record("ape", 3, 34.9), record("shape", 1, 35.57)])  # a third seed: a spread of 1.03
    assert result["held"] == "no difference measured" and "± 5.10 (two-sided 95%, Student's t 4.303 at 2 df from " \
        "APE's 3 seeds; test-set variance not measured (the runs kept no translations)" in result["measured"], result
    # a model that has not converged: no verdict, and the reason
    late = record("shape", 1, 30.2, {"converged": False, "why": "valid ppl 5.00 -> 4.50 (-10.0%)"})
    result = row([ape[1], late])
    assert result["held"] == "not measured" and "small/shape/seed1 (valid ppl 5.00 -> 4.50 (-10.0%))" in result["measured"]
    assert row([ape[1], {**late, "convergence": None}])["held"] == "not measured"  # results without a curve
    # a fourth seed replaces one that did not converge: the three converged seeds are compared,
    # the unconverged one is listed and in no comparison
    stuck = record("ape", 2, 10.0, {"converged": False, "why": "valid ppl 5.00 -> 4.90 (-2.0%)"})
    replaced = [ape[0], stuck, ape[2], record("ape", 4, 30.0)]
    batch = claims.Batch(loaded, replaced + shape)
    assert batch.left_out == ["small/ape/seed2 (valid ppl 5.00 -> 4.90 (-2.0%))"]
    assert [r["seed"] for r in batch.runs[("small", "APE")]] == [1, 3, 4]
    assert row(replaced + shape)["measured"] == result_of_three["measured"]


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
    assert "shape-K40 chosen on valid BLEU" in judged["measured"]
    assert "SHAPE 31.00 (1 seed) vs APE 30.00 (1 seed)" in judged["measured"]
    assert "not judged: no method of the batch has 3 seeds" in judged["measured"] and not batch.unchosen

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

    # APE 0.92 ± 0.01 over 3 seeds (2 df, one-sided t 2.920): SHAPE's one seed at least
    # 0.98 - 0.029 = 0.951, and above APE by at least 0.06 - 2.920 x 0.01 x sqrt(4/3) = 0.026
    held = judged(*ape(0.91, 0.92, 0.93), record("shape", 0.98))
    assert held["held"] == "yes" and "SHAPE at least 0.951" in held["measured"], held
    assert "SHAPE - APE +0.060, at least +0.026 (one-sided 95%, Student's t 2.920 at 2 df from APE's 3 seeds; test-set variance not measured)" in \
        held["measured"], held
    close = judged(*ape(0.91, 0.92, 0.93), record("shape", 0.95))  # above 0.9, but within APE's spread
    assert close["held"] == "no" and "+0.030, at least -0.004" in close["measured"], close
    assert judged(*ape(0.45, 0.46, 0.44), record("shape", 0.85))["held"] == "no"
    # SHAPE's mean 0.91 is above 0.9, its lower bound is not: 0.91 - 2.132 x 0.01 / sqrt(3) = 0.898
    low = judged(*ape(0.80, 0.81, 0.82), *(record("shape", v, seed=s) for s, v in ((1, 0.90), (2, 0.91), (3, 0.92))))
    assert low["held"] == "no" and "SHAPE at least 0.898 (one-sided 95%" in low["measured"], low
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
    assert "APE joined/ape/seed1: not applicable: 90% of the model's Original translations" in row["measured"]
    # every seed: SHAPE's drops minus half APE's, -3.50, at most -3.50 + 2.132 x 0.5 x sqrt(1/3 + 0.25/3)
    usable = [{**record("mixed", method, drop(value)), "id": f"mixed/{method}/seed{seed}", "seed": seed}
              for method, drops in (("ape", (9.0, 8.5, 9.5)), ("shape", (1.0, 1.5, 0.5)))
              for seed, value in enumerate(drops, 1)]
    row = claims.swapped(claims.Batch(loaded, failing + usable), "paper")
    assert row["held"] == "yes" and row["measured"].startswith("mixed (INTERPOLATE"), row
    assert "APE 30.00 -> 21.00, drop 9.00 ± 0.50 (3 seeds)" in row["measured"]
    assert "SHAPE - 0.5 x APE -3.50, at most -2.81 (one-sided 95%, Student's t 2.132 at 4 df" in row["measured"], row
    # one seed each: not judged, the figures shown
    row = claims.swapped(claims.Batch(loaded, failing + [usable[0], usable[3]]), "paper")
    assert row["held"] == "not measured" and row["measured"].endswith(
        "SHAPE - 0.5 x APE -3.50; one seed: not judged by spread"), row
    # wrong separators, but X1 found by alignment: judged on the aligned drops, and said so
    aligned = [record("joined-aligned", m, {**no_sep, "wrong_separators": share, "aligned": drop(value)})
               for m, share, value in (("ape", 0.9, 6.0), ("shape", 0.4, 5.0))]
    for r in aligned:
        r["data"] = "joined"
    row = claims.swapped(claims.Batch(loaded, aligned), "paper")
    assert row["held"] == "not measured"  # one seed each
    assert "X1 found by alignment (separators wrong on 90% of APE's and 40% of SHAPE's lines)" in row["measured"]
    assert "APE 30.00 -> 24.00, drop 6.00 (1 seed), SHAPE 30.00 -> 25.00, drop 5.00 (1 seed)" in row["measured"]


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
    # +0.50 with a spread of 0.4 per method: one-sided, at least 0.50 - 2.132 x 0.4 x sqrt(2/3) = -0.20
    assert improves["held"] == "no" and ("perSPE 10.50 ± 0.40 (3 seeds) vs APE 10.00 ± 0.40 (3 seeds); perSPE - APE "
                                         "+0.50, at least -0.20 (one-sided 95%") in improves["measured"], improves
    # 4.0 against 0.75 x 10.0, one-sided from APE's spread (2 df): at most -3.50 + 2.920 x 0.4 x sqrt(1 + 0.5625/3)
    collapse = rows["No positions in the encoder collapses BLEU"]
    assert collapse["held"] == "yes" and "none/SPE - 0.75 x APE -3.50, at most -2.23" in collapse["measured"], collapse
    assert rows["No positions in the decoder barely changes BLEU"]["held"] == "no difference measured"
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


def test_the_intervals_use_students_t_at_the_pooled_degrees_of_freedom():
    """Student's t quantiles against the published table (two-sided 95%: 12.706 at 1 df, 4.303
    at 2, 2.776 at 4, 2.306 at 8; one-sided: 2.920 at 2, 2.132 at 4), and the degrees of freedom
    of a pooled variance: the seeds of each method pooled, less one each."""
    from onmt_posenc.experiments.claims import batch

    for df, two_sided, one_sided in ((1, 12.706, 6.314), (2, 4.303, 2.920), (4, 2.776, 2.132), (8, 2.306, 1.860)):
        assert round(batch.t_quantile(df, 2), 3) == two_sided and round(batch.t_quantile(df, 1), 3) == one_sided
    five, three, one = [27.0, 27.2, 27.4, 26.3, 27.4], [36.7, 36.7, 36.2], [28.2]
    assert batch.seed_difference(("A", "B"), five, three).spread.df == 6
    assert batch.seed_difference(("A", "B"), one, five).spread.df == 4  # one run against five: the five's spread
    borrowed = batch.seed_difference(("A", "B"), one, [25.5], {"C": five, "D": three})
    assert borrowed.spread.df == 6 and borrowed.spread.source == "the batch's spread: C's 5 and D's 3 seeds"
    assert batch.seed_difference(("A", "B"), one, [25.5]).spread is None


def test_the_committed_verdicts_under_students_t():
    """Issue 58's table: the committed batches' comparisons whose tolerance two normal standard
    errors set too narrow, with Student's t at their degrees of freedom."""
    from onmt_posenc.experiments.report.claims_side_by_side import judged

    results = REPO / "recipes" / "experiments" / "results"
    expected = {("multi30k-scaled", "SHAPE's BLEU on VANILLA is about APE's"): (-0.61, 0.68, 4, "no difference measured"),
                ("small_enja-scaled", "RPE's BLEU on VANILLA is about APE's"): (1.09, 1.41, 4, "no difference measured"),
                ("small_enja", "RPE's BLEU on VANILLA is about APE's"): (2.77, 3.66, 4, "no difference measured"),
                ("small_enja", "SHAPE's BLEU on VANILLA is about APE's"): (-3.29, 3.66, 4, "no difference measured"),
                ("multi30k", "SHAPE's BLEU on VANILLA is about APE's"): (-2.42, 3.08, 4, "no difference measured")}
    for (folder, claim), (difference, margin, df, held) in expected.items():
        row = next(r for r in judged(results / folder / "results.json")[0] if r["claim"] == claim)
        figures = row["figures"]
        assert (round(figures["estimate"], 2), round(figures["margin"], 2), figures["df"], row["held"]) == (
            difference, margin, df, held), (folder, row)


def test_the_unseen_lengths_claim_reads_every_seed_one_sided(tmp_path):
    """The BLEU of the buckets longer than any training source, weighted by their sentences, a
    value a seed; RPE minus APE held unless below beyond the one-sided bound; one seed each: not
    judged, its figure shown."""
    from onmt_posenc.experiments.claims import shape_paper as claims

    loaded = experiments.load(experiment_file(tmp_path, data={"long": {"synthetic": {}, "extrapolate": 10}}))

    def record(method, seed, unseen_bleu):
        buckets = {"buckets": ["1-5", "6-10", "11-15", "16-20"], "counts": [10, 10, 3, 1], "max_train_length": 10,
                   "bleu": [50.0, 40.0, unseen_bleu, unseen_bleu - 4.0], "length_ratio": [1.0] * 4}
        return {"id": f"long/{method}/seed{seed}", "status": "finished", "data": "long", "method": method,
                "label": method, "seed": seed, "bleu": {}, "convergence": {"converged": True, "why": "test"},
                "config": {"position_encoding": False, "max_relative_positions": 16} if method == "rpe" else {},
                "analyses": {"length_buckets": "x.json"}, "analysis_results": {"length_buckets": {"test": buckets}}}

    def judged(records):
        return claims.unseen_lengths(claims.Batch(loaded, records), "RPE", "paper")

    one = judged([record("ape", 1, 20.0), record("rpe", 1, 24.0)])
    assert one["held"] == "not measured" and "4 sentences longer than any training example (> 10)" in one["measured"]
    assert one["measured"].endswith("RPE 23.00 (1 seed) vs APE 19.00 (1 seed); RPE - APE +4.00; one seed: not judged "
                                    "by spread"), one
    ape = [record("ape", seed, value) for seed, value in ((1, 20.0), (2, 21.0), (3, 22.0))]
    # RPE 1.5 below APE's mean, one seed: at most -1.50 + 2.920 x 1 x sqrt(1 + 1/3) = +1.87: no drop measured
    close = judged(ape + [record("rpe", 1, 19.5)])
    assert close["held"] == "no drop measured" and "RPE - APE -1.50, at most +1.87 (one-sided 95%" in close["measured"]
    assert judged(ape + [record("rpe", 1, 15.0)])["held"] == "no"


def test_a_run_that_failed_to_learn_is_left_out_of_the_claims_and_marked(tmp_path):
    """Far above its setting's baseline on validation perplexity while it fits its training data
    (the gap of validation over training perplexity wider than the baseline's): failed to learn.
    A model that fits neither (no positions on an ordering task) only learned less."""
    from onmt_posenc.experiments.claims import batch as claims_batch
    from onmt_posenc.experiments.report import command as report

    loaded = experiments.load(experiment_file(tmp_path, grid={"method": ["ape", "shape", "rpe"], "K": [10]},
                                              data={"small": {"synthetic": {}}}), output=tmp_path / "out")

    def record(method, valid, train, seed=1):
        curve = {"valid": [{"step": 100 * k, "ppl": valid} for k in range(1, 5)],
                 "train": [{"step": 50 * k, "ppl": train} for k in range(1, 9)]}
        return {"id": f"small/{method}/seed{seed}", "status": "finished", "data": "small", "method": method,
                "label": "shape-K10" if method == "shape" else method, "seed": seed,
                "bleu": {"valid": 30.0, "test": 30.0}, "length_ratio": {"valid": 1.0, "test": 1.0},
                "bleu_signature": "tok:13a", "curve": curve, "convergence": {"converged": True, "why": "test"},
                "dir": str(tmp_path / "gone"), "analyses": {},
                "config": {"shape_max_shift": 10} if method == "shape" else
                {"position_encoding": False, "max_relative_positions": 16} if method == "rpe" else {}}

    # APE: 20 against 12 (gap 1.67); SHAPE 60 against 24 (x3.0, gap 2.5: x1.5); RPE 45 against 40 (gap 1.1)
    records = [record("ape", 20.0, 12.0), record("shape", 60.0, 24.0), record("rpe", 45.0, 40.0)]
    failed = claims_batch.failed_to_learn(records, "ape")
    assert failed == {"small/shape/seed1": "valid ppl 60.00, x3.00 ape's 20.00; valid/train ppl 2.50, x1.50 ape's 1.67"}
    batch = claims_batch.Batch(loaded, records)
    assert ("small", "SHAPE") not in batch.runs and ("small", "RPE") in batch.runs
    text = report.write(loaded, records).read_text(encoding="utf-8")
    assert ("Left out of the claims, as they failed to learn (validation perplexity at least x2 the baseline's of "
            "their data setting, and validation over training perplexity at least x1.25 the baseline's): "
            "small/shape/seed1 (valid ppl 60.00") in text
    assert "| small/shape/seed1 | finished | valid 30.00, test 30.00 | – | failed to learn (valid ppl 60.00" in text


def test_of_the_committed_runs_only_the_interpolate_warm_shape_k500_failed_to_learn():
    """The thresholds against every committed run with both learning curves."""
    import json

    from onmt_posenc.experiments.claims.batch import failed_to_learn

    flagged = {}
    for path in sorted((REPO / "recipes" / "experiments" / "results").rglob("results.json")):
        stored = json.loads(path.read_text(encoding="utf-8"))
        for id in failed_to_learn(stored["runs"], stored["experiment_as_loaded"]["baseline"]):
            flagged.setdefault(path.parent.name, []).append(id)
    assert flagged == {"multi30k-scaled-swapped": ["interpolate-warm/shape-K500/seed1"]}


def test_a_table_is_one_family_judged_after_holms_correction():
    """Three comparisons judged together: one far from zero, one whose own interval clears zero
    (p 0.026) and one null; under Holm the second's p doubles (0.052) and it is no longer measured."""
    from onmt_posenc.experiments.claims.batch import SAME, Family, seed_difference

    clear = seed_difference(("A", "B"), [31.0, 31.1, 31.2], [30.0, 30.1, 30.2])
    near = seed_difference(("C", "B"), [30.5, 31.0, 31.5], [30.0, 30.0, 30.0])
    null = seed_difference(("D", "B"), [30.0, 30.5, 31.0], [30.0, 30.5, 31.0])
    family = Family()
    alone = [family.judge(SAME, difference) for difference in (clear, near, null)]
    assert [held for held, _, _ in alone] == ["no", "no", "no difference measured"]  # each judged alone
    family.close()
    judged = [family.judge(SAME, difference) for difference in (clear, near, null)]
    p = near.p_value()
    assert p == pytest.approx(0.026, abs=0.001)
    assert judged[1][2]["p_adjusted"] == pytest.approx(2 * p) and judged[1][2]["family"] == 3
    assert [held for held, _, _ in judged] == ["no", "no difference measured", "no difference measured"]
    assert judged[1][1].endswith(f"p {p:.3f}, Holm-adjusted {2 * p:.3f} over the 3 comparisons of its table: "
                                 "no difference measured after Holm's correction")
    assert "(within ±" in judged[2][1] and "would not be seen)" in judged[2][1]


def test_with_kept_translations_a_claim_adds_the_test_sets_component(tmp_path):
    """Three seeds a side whose translations were kept: the interval adds the paired bootstrap's
    variance (less the seed-by-sentence noise) to the seeds' at Welch-Satterthwaite's degrees of
    freedom, and the row names both; the same records without translations say "test-set variance
    not measured"."""
    import math

    import numpy as np

    from onmt_posenc.core import scoring, significance
    from onmt_posenc.experiments.claims import shape_paper as claims
    from onmt_posenc.experiments.running import records as stored

    loaded = experiments.load(experiment_file(tmp_path, grid={"method": ["ape", "shape"], "data": ["small"]}))
    rng = np.random.default_rng(7)
    words = [f"w{k}" for k in range(40)]
    refs = [" ".join(rng.choice(words, rng.integers(5, 15))) for _ in range(80)]
    reference = tmp_path / "test.ref"
    reference.write_text("\n".join(refs) + "\n", encoding="utf-8")

    def record(method, seed, keep):
        hyps = [" ".join(w if rng.random() < keep else rng.choice(words) for w in ref.split()) for ref in refs]
        folder = tmp_path / method / str(seed)
        stored.write_translations(folder / "translations" / "test.json.gz", hyps, refs, reference)
        bleu = scoring.corpus_bleu(hyps, refs)
        return {"id": f"small/{method}/seed{seed}", "status": "finished", "data": "small", "method": method,
                "label": method, "seed": seed, "bleu": {"test": bleu.score, "valid": bleu.score},
                "config": {"shape_max_shift": 40} if method == "shape" else {}, "bleu_signature": bleu.signature,
                "convergence": {"converged": True, "why": "test"}, "translations": {"test": "translations/test.json.gz"},
                "translations_root": str(folder), "hyps": hyps}

    runs = [record("ape", seed, 0.6) for seed in (1, 2, 3)] + [record("shape", seed, 0.65) for seed in (1, 2, 3)]
    row = claims.vanilla_bleu(claims.Batch(loaded, runs), "SHAPE", "paper")
    assert "and the test set's 80 sentences (± " in row["measured"] and "paired bootstrap of 1000 resamples" in row["measured"]
    # the same figures computed here from the sentences' statistics
    statistics_of = [scoring.sentence_statistics(r["hyps"], refs, "13a")["bleu"][1] for r in runs]
    component = significance.SentenceComponent(statistics_of[3:], statistics_of[:3],
                                               significance.metric_scorer(scoring.sentence_statistics(
                                                   runs[0]["hyps"], refs, "13a")["bleu"][0]))
    ape, shape = [r["bleu"]["test"] for r in runs[:3]], [r["bleu"]["test"] for r in runs[3:]]
    pooled = (np.var(ape, ddof=1) + np.var(shape, ddof=1)) / 2
    seeds = pooled * (2 / 3)
    total = seeds + component.variance
    df = total ** 2 / (seeds ** 2 / 4 + component.variance ** 2 / 79)
    figures = row["figures"]
    assert figures["seed_variance"] == pytest.approx(seeds) and figures["test_set_variance"] == pytest.approx(component.variance)
    assert figures["df"] == pytest.approx(df)
    assert figures["margin"] == pytest.approx(significance.t_quantile(df, 0.975) * math.sqrt(total))
    assert 0 < component.noise < component.total  # the seeds' own noise, taken out once
    without = claims.vanilla_bleu(claims.Batch(loaded, [{**r, "translations": None} for r in runs]), "SHAPE", "paper")
    assert "test-set variance not measured (the runs kept no translations)" in without["measured"]
