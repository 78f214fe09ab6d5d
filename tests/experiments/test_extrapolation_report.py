"""The report's length-extrapolation section on multi30k_extrapolate.yaml's design (capped
training, joined training, a size-matched control), from made-up records: each method's
difference from APE, from itself without joined training and from its control, with Student's
t interval at the pooled degrees of freedom (the records keep no translations: test-set variance
not measured), each table judged after Holm's correction. Nothing here trains a model."""
import json
import math
import statistics

from conftest import REPO
from scipy.stats import t as student_t

from onmt_posenc import experiments
from onmt_posenc.experiments.file.spec import FOLDER_FILES
from onmt_posenc.experiments.report import command as report
from onmt_posenc.experiments.running.store import run_fields

FILE = REPO / "recipes" / "experiments" / "multi30k_extrapolate.yaml"
BUCKETS = ["1-5", "6-10", "11-15", "16-20", "21-25"]


def loaded(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    for name in FOLDER_FILES:
        (folder / name).write_text("a b\n", encoding="utf-8")
    labels = ("extrapolate", "extrapolate-joined", "vanilla-matched")
    return experiments.load(FILE, [f"data.{label}.folder={folder}" for label in labels], output=tmp_path / "runs")


def unseen_bleu(run):
    """Made-up scores: RPE 3 above APE beyond the cap, joined training 5 above, the control 8."""
    return (20 + run.seed * 0.5 + {"rpe": 3, "rotary": 1}.get(run.method, 0)
            + {"extrapolate-joined": 5, "vanilla-matched": 8}.get(run.data, 0))


def nll_beyond(run):
    """Made-up: RPE writes better beyond the cap, its gold tokens' NLL 0.5 lower than APE's."""
    return 3.5 - (0.5 if run.method == "rpe" else 0) + run.seed * 0.01


def record(run):
    beyond, up_to = unseen_bleu(run), 37.0 + run.seed * 0.1
    longest = 37 if run.data == "vanilla-matched" else 15
    # joined training: its longest training example reaches 20 (its split still at the cap, 15)
    joined = {"longest_training_example": {"source": 20, "target": 21}} if run.data == "extrapolate-joined" else {}
    split = {"at": 15, "up_to": {"count": 700, "bleu": up_to, "length_ratio": 0.95, "nll": 2.0},
             "beyond": {"count": 300, "bleu": beyond, "length_ratio": 0.7 + run.seed * 0.01, "nll": nll_beyond(run)}}
    buckets = {"buckets": BUCKETS, "counts": [50, 300, 350, 200, 100], "max_train_length": longest,
               "unseen": [longest == 15 and b in ("16-20", "21-25") for b in BUCKETS],
               "bleu": [30, 40, 35, beyond + 2, beyond - 4], "length_ratio": [1.0] * 5, "split": split}
    return {**run_fields(run), "status": "finished", "config": run.config, "bleu_signature": "tok:13a",
            "bleu": {"valid": 30.0, "test": 30.0, "test-join2": 8.0 + run.seed, "test-join3": 3.0, "test-join4": 1.0},
            "convergence": {"converged": True, "why": "made up"}, "dir": "gone",
            "analyses": {"length_buckets": "analyses/length_buckets.json"},
            "analysis_results": {"length_buckets": {"test": buckets}}, **joined}


def margin(one, other):
    """Student's t margin, two-sided 95%, of mean(one) - mean(other), the variance pooled over both."""
    df = len(one) + len(other) - 2
    pooled = (statistics.variance(one) * (len(one) - 1) + statistics.variance(other) * (len(other) - 1)) / df
    return student_t.ppf(0.975, df) * math.sqrt(pooled * (1 / len(one) + 1 / len(other))), df


def test_every_method_against_ape_joined_training_and_the_control(tmp_path):
    experiment = loaded(tmp_path)
    wanted = {("extrapolate", "ape"), ("extrapolate", "rpe"), ("extrapolate", "rotary"),
              ("extrapolate-joined", "ape"), ("vanilla-matched", "ape")}
    # the design's three seeds each (APE's seed 4, the grid's replacement for an unconverged run, not needed here)
    runs = [run for run in experiment.runs if (run.data, run.method) in wanted and run.seed <= 3]
    written = report.write(experiment, [record(run) for run in runs]).read_text(encoding="utf-8")
    lines = written.splitlines()
    assert "## Length extrapolation" in lines

    # RPE minus APE beyond the cap: +3, its interval from both methods' 3 seeds (4 df)
    ape = [unseen_bleu(r) for r in runs if (r.data, r.method) == ("extrapolate", "ape")]
    rpe = [unseen_bleu(r) for r in runs if (r.data, r.method) == ("extrapolate", "rpe")]
    half, df = margin(rpe, ape)
    row = next(line for line in lines if line.startswith("| rpe (3 vs 3) |")).split(" | ")
    assert row[2].startswith(f"+3.00 ± {half:.2f} ({df} df; p ")  # unseen BLEU, the second column
    # rotary's 2 seeds against APE's 3: the spread of APE's alone (2 df), rotary's not being enough
    rotary = next(line for line in lines if line.startswith("| rotary (2 vs 3) |"))
    assert "(2 df; p " in rotary
    # the verdict: better beyond the cap, and it is the writing (the NLL's rise), not where it stops,
    # after Holm's correction over the table's judged cells (2 methods x 8 columns)
    nll = [nll_beyond(r) - 2.0 for r in runs if (r.data, r.method) == ("extrapolate", "rpe")]
    nll_half, _ = margin(nll, [nll_beyond(r) - 2.0 for r in runs if (r.data, r.method) == ("extrapolate", "ape")])
    verdict = next(line for line in lines if line.startswith("- rpe, against ape: "))
    assert verdict.startswith(f"- rpe, against ape: translates unseen lengths better (+3.00 ± {half:.2f}, p "), verdict
    ratio_half = margin([0.71, 0.72, 0.73], [0.71, 0.72, 0.73])[0]
    assert f"no difference in length ratio beyond 15 measured (+0.00 ± {ratio_half:.2f}, p 1.000, Holm-adjusted 1.000: " \
           f"within ±{ratio_half:.2f}; a difference under " in verdict
    assert f"writes better beyond 15 (gold-token NLL) (-0.50 ± {nll_half:.2f}, p " in verdict
    assert "Each method minus ape (a family of 16):" in lines
    assert any(line.startswith("Test-set variance not measured in 16 of the 16 judged cells") for line in lines)

    # joined training against the same method without: +5 beyond the cap, all of it within the joined
    # runs' training lengths (16-20) and past them (21-25) alike; a method against itself on another
    # setting: two samples, both sides' seeds pooled (4 df)
    section = written.split("### extrapolate-joined against extrapolate: what joining the training pairs changes")[1]
    header = next(line for line in section.splitlines() if line.startswith("| method |")).split(" | ")
    assert header[1:5] == ["BLEU up to the cap (<= 15)", "BLEU beyond the cap (> 15)",
                           "BLEU beyond the cap, within the joined training lengths (16-20)",
                           "BLEU beyond the joined training lengths (> 20)"]
    row = next(line for line in section.splitlines() if line.startswith("| ape (3 vs 3) |")).split(" | ")
    assert row[1].startswith("+0.00 ± 0.00 (4 df; ") and all(cell.startswith("+5.00 ± ") for cell in row[2:5])

    # the penalty by bucket: capped minus the control of the same method, the buckets beyond 15 starred
    section = written.split("### extrapolate against vanilla-matched: the extrapolation penalty by source length")[1]
    assert "| method | 1-5 | 6-10 | 11-15 | 16-20 * | 21-25 * | unseen BLEU (> 15) |" in section
    row = next(line for line in section.splitlines() if line.startswith("| ape (3 vs 3) |"))
    half, df = margin(ape, [value + 8 for value in ape])
    assert row.count(f"-8.00 ± {half:.2f} (4 df;") == 3  # two buckets beyond the cap, and their sentences pooled

    stored = json.loads((tmp_path / "runs" / "results.json").read_text(encoding="utf-8"))["across_runs"]
    figures = stored["extrapolation"]["extrapolate"]["minus_baseline"]["rpe"]["unseen BLEU"]
    assert figures["estimate"] == 3.0 and figures["df"] == 4 and math.isclose(figures["margin"], half)
    assert stored["extrapolation"]["extrapolate"]["means"]["ape"]["unseen BLEU"] == statistics.mean(ape)


def test_a_run_that_failed_to_learn_is_left_out(tmp_path):
    experiment = loaded(tmp_path)
    runs = [run for run in experiment.runs if run.data == "extrapolate" and run.method in ("ape", "rpe")
            and run.seed <= 3]
    records = [record(run) for run in runs]
    for each in records:  # learning curves: RPE seed 3 far above APE on held-out text while it fits its data
        failed = each["id"] == "extrapolate/rpe/seed3"
        each["curve"] = {"valid": [{"step": 2500, "ppl": 90.0 if failed else 40.0}],
                         "train": [{"step": 2500, "ppl": 10.0}], "train_seconds": 1}
    written = report.write(experiment, records).read_text(encoding="utf-8")
    assert "| rpe (2 vs 3) |" in written


def test_a_run_that_did_not_converge_is_left_out_and_listed_and_its_next_seed_counts(tmp_path):
    """APE seed 2 did not converge: replaced by seed 4, it stays listed and enters no mean or comparison."""
    experiment = loaded(tmp_path)
    runs = [run for run in experiment.runs if run.data == "extrapolate" and run.method in ("ape", "rpe")]
    records = [record(run) for run in runs]
    stuck = next(r for r in records if r["id"] == "extrapolate/ape/seed2")
    stuck["convergence"] = {"converged": False, "why": "valid ppl 40.48 -> 40.02 (-1.2%)"}
    assert "extrapolate/ape/seed4" in [r["id"] for r in records]  # the grid's replacement
    written = report.write(experiment, records).read_text(encoding="utf-8")
    assert ("Left out of every mean and comparison of this section, as they did not converge (each is replaced by "
            "its method's next seed): extrapolate/ape/seed2 (valid ppl 40.48 -> 40.02 (-1.2%)).") in written
    assert "| ape (3) |" in written and "| rpe (3 vs 3) |" in written


def test_a_rotary_scaling_variant_is_a_method_of_its_own_against_ape(tmp_path):
    """Each rotary run's NTK-aware variant (its record's `variants`, as the runner stores it):
    its own row of means and of differences from APE, and its own verdict; the run's own scores
    stay the method's."""
    experiment = loaded(tmp_path)
    runs = [run for run in experiment.runs if run.data == "extrapolate" and run.method in ("ape", "rotary")
            and run.seed <= 3]
    records = [record(run) for run in runs]
    for each in records:
        if each["method"] == "rotary":  # made up: the rescaled rotation 2 BLEU above rotary's own beyond the cap
            buckets = {**each["analysis_results"]["length_buckets"]["test"]}
            buckets["bleu"] = buckets["bleu"][:3] + [value + 2 for value in buckets["bleu"][3:]]
            each["variants"] = {"ntk": {"translate": {"rotary_scaling": "ntk"}, "bleu": each["bleu"],
                                        "chrf": {}, "length_ratio": {}, "translations": {},
                                        "analyses": {"length_buckets": "variants/ntk/analyses/length_buckets.json"},
                                        "analysis_results": {"length_buckets": {"test": buckets}}}}
    lines = report.write(experiment, records).read_text(encoding="utf-8").splitlines()
    section = lines[lines.index("## Length extrapolation"):]
    means = {line.split(" | ")[0]: line.split(" | ") for line in section if line.startswith("| rotary")}
    # the grid's two rotary seeds (multi30k_extrapolate.yaml), each with its variant
    assert list(means) == ["| rotary (2)", "| rotary+ntk (2)", "| rotary (2 vs 3)", "| rotary+ntk (2 vs 3)"]
    rotary = statistics.mean(unseen_bleu(r) for r in runs if r.method == "rotary")
    assert means["| rotary (2)"][2].startswith(f"{rotary:.2f} ± ")  # unseen BLEU: the run's own
    assert means["| rotary+ntk (2)"][2].startswith(f"{rotary + 2:.2f} ± ")
    ape = statistics.mean(unseen_bleu(r) for r in runs if r.method == "ape")
    assert means["| rotary+ntk (2 vs 3)"][2].startswith(f"{rotary + 2 - ape:+.2f} ± ")
    assert any(line.startswith("- rotary+ntk, against ape: ") for line in section)
