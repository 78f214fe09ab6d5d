"""Evaluation variants (evaluation.variants: a rotary model also translated with each inference-time
rescaling) and length buckets relative to each run's longest training source, as a user runs them:
the scaled-down demo with one rotary run, its variant translated, kept, scored by length and set
beside the method in the report; a variant added later is translated without training; what the
file may not ask is refused, naming the file, line and key."""
import json
import re
import shutil

import pytest
import yaml
from conftest import REPO, command, run
from runner_helpers import DEMO, LONG, SCALED_DOWN, experiment_file, overrides

from onmt_posenc import experiments
from onmt_posenc.core import scoring
from onmt_posenc.experiments.running import records

ROTARY = [*SCALED_DOWN, "methods.rotary={position_encoding: false, max_relative_positions: -1}",
          "grid={method: [rotary]}", "evaluation.sets=[test]",
          "analyses={length_buckets: {sets: [test], relative: [1, 1.5, 2]}}",
          "evaluation.variants={ntk: {methods: [rotary], translate: {rotary_scaling: ntk}}}"]
RUN_ID = "synthetic/rotary/seed1"


@pytest.fixture(scope="module")
def rotary(tmp_path_factory):
    """The scaled-down demo's one rotary run with the NTK-aware variant, run once for the module."""
    output = tmp_path_factory.mktemp("variants") / "out"
    result = run([command("onmt-posenc"), "run", DEMO, "--output", output, *overrides(ROTARY)], cwd=REPO,
                 timeout=LONG)
    return output, result


def test_a_variant_is_translated_kept_and_scored_by_relative_length(rotary):
    output, _ = rotary
    folder = output / RUN_ID
    record = json.loads((folder / "result.json").read_text(encoding="utf-8"))
    longest = record["longest_training_example"]["source"]
    variant = record["variants"]["ntk"]
    # its options over the evaluation's, L_train the run's longest training source
    assert variant["translate"]["rotary_scaling"] == "ntk" and variant["translate"]["rotary_training_length"] == longest
    assert yaml.safe_load((folder / "variants/ntk/translate.yaml").read_text()) == variant["translate"]
    log = (folder / "logs" / "translate_test+ntk.log").read_text(encoding="utf-8")
    assert f"rotary positions rescaled (ntk) for sources longer than {longest} tokens" in log
    assert "rotary positions rescaled" not in (folder / "logs" / "translate_test.log").read_text(encoding="utf-8")
    # its translations kept like the run's, and they give its scores again
    (pseudo,) = [r for r in records.with_variants([{**record, "translations_root": str(folder)}]) if r.get("variant")]
    assert pseudo["label"] == "rotary+ntk" and pseudo["id"] == f"{RUN_ID}+ntk"
    (hyps, refs, _), why = records.read_translations(pseudo, "test")
    assert why is None and hyps == (folder / "variants/ntk/hyp/test.txt").read_text(encoding="utf-8").splitlines()
    bleu = scoring.corpus_bleu(hyps, refs)
    assert bleu.score == pytest.approx(variant["bleu"]["test"], abs=0.01)
    assert bleu.length_ratio == pytest.approx(variant["length_ratio"]["test"], abs=1e-6)
    # its length analysis, in multiples of the longest training source; the gold-token NLL under its
    # rescaled rotation differs from the model's own where a batch's source is longer than that
    own = json.loads((folder / record["analyses"]["length_buckets"]).read_text())["test"]
    scaled = json.loads((folder / variant["analyses"]["length_buckets"]).read_text())["test"]
    assert own["buckets"] == scaled["buckets"] and own["multiples"] == scaled["multiples"]
    assert own["multiples"][0] == "0-1x" and own["buckets"][0] == f"1-{longest}"
    assert own["split"]["at"] == longest
    beyond = [k for k, unseen in enumerate(own["unseen"]) if unseen]
    assert beyond and any(scaled["nll"][k] != own["nll"][k] for k in beyond)


def test_the_report_sets_the_variant_beside_the_method(rotary, tmp_path):
    """In the length section (the extrapolation section leaves out runs that did not converge, as
    this one of 16 updates has not: test_extrapolation_report sets variants there), from the run
    folders and from results.json alone, the run folders gone."""
    output, _ = rotary
    text = (output / "report.md").read_text(encoding="utf-8")
    lengths = text.split("## BLEU and length by source length")[1].split("\n## ")[0]
    assert "| rotary+ntk |" in lengths and "| BLEU, by source length | 0-1x: 1-" in lengths
    assert "length_seeds_synthetic_test.png" in lengths  # the line plot, relative buckets: from one seed
    copy = tmp_path / "out"
    shutil.copytree(output, copy)
    shutil.rmtree(copy / "synthetic")
    run([command("onmt-posenc"), "report", "--results", copy / "results.json"], cwd=tmp_path)
    assert (copy / "translations" / f"{RUN_ID}+ntk" / "test.json.gz").is_file()
    stored = json.loads((copy / "results.json").read_text(encoding="utf-8"))["runs"][0]["variants"]["ntk"]
    assert stored["translations"] == {"test": f"translations/{RUN_ID}+ntk/test.json.gz"}
    again = (copy / "report.md").read_text(encoding="utf-8")
    assert again.split("## BLEU and length by source length")[1].split("\n## ")[0] == lengths


def test_a_variant_added_later_is_translated_without_training(rotary, tmp_path):
    output = tmp_path / "out"
    shutil.copytree(rotary[0], output)
    folder = output / RUN_ID
    train_log = (folder / "logs" / "train.log").read_text(encoding="utf-8")
    both = "evaluation.variants={ntk: {translate: {rotary_scaling: ntk}}, yarn: {translate: {rotary_scaling: yarn}}}"
    again = run([command("onmt-posenc"), "run", DEMO, "--output", output, *overrides([*ROTARY, both])], cwd=REPO,
                timeout=LONG)
    assert "holds a run evaluated with other evaluation settings" in again.stderr
    assert "train step" not in again.stderr and (folder / "logs" / "train.log").read_text() == train_log
    record = json.loads((folder / "result.json").read_text(encoding="utf-8"))
    assert sorted(record["variants"]) == ["ntk", "yarn"] and "test" in record["variants"]["yarn"]["bleu"]
    assert "rotary positions rescaled (yarn)" in (folder / "logs" / "translate_test+yarn.log").read_text()
    assert "| rotary+yarn |" in (output / "report.md").read_text(encoding="utf-8")


def loaded(tmp_path, variants, **changes):
    methods = {"ape": {}, "rotary": {"position_encoding": False, "max_relative_positions": -1}}
    path = experiment_file(tmp_path, methods=methods, grid={"method": ["ape", "rotary"]},
                           evaluation={"variants": variants}, **changes)
    return path, experiments.load(path)


def test_a_variant_applies_to_the_methods_whose_models_take_it(tmp_path):
    _, experiment = loaded(tmp_path, {"ntk": {"translate": {"rotary_scaling": "ntk"}},
                                      "beam": {"translate": {"beam_size": 2}}})
    assert experiment.variants["ntk"].methods == ("rotary",)
    assert experiment.variants["beam"].methods == ("ape", "rotary")
    ape, rotary = (next(r for r in experiment.runs if r.method == m) for m in ("ape", "rotary"))
    assert list(experiment.variants_of(rotary)) == ["ntk", "beam"] and list(experiment.variants_of(ape)) == ["beam"]


@pytest.mark.parametrize("variants, where, message", [
    ({"ntk": {"methods": ["ape", "rotary"], "translate": {"rotary_scaling": "ntk"}}}, "evaluation.variants.ntk",
     "evaluation.variants.ntk.methods: the models of ['ape'] cannot take ['rotary_scaling']"),
    ({"ntk": {"methods": ["rope"], "translate": {"rotary_scaling": "ntk"}}}, "evaluation.variants.ntk",
     "evaluation.variants.ntk.methods names ['rope'], which are not under methods"),
    ({"ntk": {"translate": {"src": "other.txt"}}}, "evaluation.variants.ntk.translate",
     "evaluation.variants.ntk.translate sets ['src'], which the runner sets for every translation"),
])
def test_a_variant_the_runs_cannot_take_is_refused_at_its_line(tmp_path, variants, where, message):
    methods = {"ape": {}, "rotary": {"position_encoding": False, "max_relative_positions": -1}}
    path = experiment_file(tmp_path, methods=methods, grid={"method": ["ape", "rotary"]},
                           evaluation={"variants": variants})
    with pytest.raises(experiments.ExperimentError) as error:
        experiments.load(path)
    assert re.match(rf"{re.escape(str(path))}:\d+: ", str(error.value)), str(error.value)
    assert message in str(error.value)


def test_a_variant_option_onmt_translate_does_not_know_is_refused(tmp_path):
    for translate, message in (({"rotary_scaling": "longrope"}, "invalid choice: 'longrope'"),
                               ({"rotary_scalling": "ntk"}, "unknown option; did you mean 'rotary_scaling'?")):
        folder = tmp_path / str(len(message))
        folder.mkdir()
        path, experiment = loaded(folder, {"ntk": {"methods": ["rotary"], "translate": translate}})
        with pytest.raises(experiments.ExperimentError) as error:
            experiments.check_options(experiment)
        key = next(iter(translate))
        assert re.match(rf"{re.escape(str(path))}:\d+: evaluation\.variants\.ntk\.translate\.{key}: ", str(error.value))
        assert message in str(error.value), str(error.value)


@pytest.mark.parametrize("options, message", [
    ({"relative": [1, 2], "width": 5}, "analyses.length_buckets.width: relative buckets end at multiples"),
    ({"relative": [1.5, 2]}, "analyses.length_buckets.relative: must be a list of increasing numbers > 0, 1 among"),
    ({"relative": [2, 1]}, "must be a list of increasing numbers > 0"),
])
def test_relative_buckets_are_checked_when_the_file_loads(tmp_path, options, message):
    path = experiment_file(tmp_path, analyses={"length_buckets": options})
    with pytest.raises(experiments.ExperimentError, match=re.escape(message)):
        experiments.load(path)


def test_an_unset_relative_option_leaves_the_recorded_analysis_options_as_they_were(tmp_path):
    """Runs recorded before `relative` existed hold length_buckets' options without it: loading
    the same file must not add it, or every finished run would be evaluated again."""
    experiment = experiments.load(experiment_file(tmp_path, analyses={"length_buckets": {"width": 5}}))
    assert list(experiment.analyses["length_buckets"]) == ["sets", "width", "split_at"]


def test_a_variant_changes_the_evaluation_of_the_runs_it_applies_to_only(tmp_path):
    """A variant added to the file: the rotary run's recorded evaluation is no longer the file's (it
    is evaluated again), the APE run's is as it was (nothing to do); without the variant's scores
    the rotary record is not evaluated as the file asks either."""
    from onmt_posenc.experiments.running import state

    (tmp_path / "plain").mkdir()
    (tmp_path / "ntk").mkdir()
    _, plain = loaded(tmp_path / "plain", {})
    _, ntk = loaded(tmp_path / "ntk", {"ntk": {"translate": {"rotary_scaling": "ntk"}}})
    ape, rotary = (next(r for r in plain.runs if r.method == m and r.data == "small") for m in ("ape", "rotary"))
    scores = dict.fromkeys(plain.translated_sets, 20.0)
    for run in (ape, rotary):
        record = {"bleu": scores, "evaluation": state.evaluation_of(plain, run)}
        assert state.evaluated_otherwise(record, ntk, run) == (run is rotary)
    record = {"bleu": scores, "evaluation": state.evaluation_of(ntk, rotary)}
    assert record["evaluation"]["variants"] == {"ntk": {"rotary_scaling": "ntk"}}
    assert state.evaluated_otherwise(record, ntk, rotary)  # the variant's scores missing
    record["variants"] = {"ntk": {"bleu": scores}}
    assert not state.evaluated_otherwise(record, ntk, rotary)
