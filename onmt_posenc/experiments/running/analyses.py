"""The analyses of one trained run, right after its evaluation (the report puts them side by
side): each reads the run's averaged model, evaluation files and translations."""
import traceback
from pathlib import Path

from onmt_posenc.core.text import read_lines
from onmt_posenc.experiments.file.spec import VARIANT_JOINT
from onmt_posenc.experiments.running.records import VARIANTS
from onmt_posenc.experiments.running.store import AVERAGED, write_json

# In the order they run
PER_RUN_ANALYSES = ("length_buckets", "shift_invariance", "position_ablation", "token_nll", "swapped")
# Those of an evaluation variant's translations (its scores by source length)
VARIANT_ANALYSES = ("length_buckets",)


class RunAnalyses:
    """The per-run analyses the experiment asks for, of the run in `run_dir`; `translate`
    translates a file with the run's model (for the swapped evaluation). With `variant` (an
    evaluation variant's name), of its translations, in its folder (variants/<name>/), the model
    loaded with those of its `translate_options` that change the model (rotary rescaling)."""

    def __init__(self, experiment, run, files, run_dir, progress, translate, longest_source, variant=None,
                 translate_options=None):
        self.experiment, self.run, self.files = experiment, run, files
        self.dir, self.progress, self.translate = Path(run_dir), progress, translate
        self.logs = self.dir / "logs"
        self.longest_source = longest_source
        self.variant, self.translate_options = variant, translate_options
        # where its results go, relative to the run's folder
        self.folder = "analyses" if variant is None else f"{VARIANTS}/{variant}/analyses"
        self._model = None
        self._gold_nlls = {}

    def run_all(self, hyps, names=PER_RUN_ANALYSES):
        """Every analysis of `names` asked for; one that fails is recorded with its log, and the run still
        counts. Returns ({name: its file, relative to the run's folder}, {name: its error})."""
        done, errors = {}, {}
        (self.dir / self.folder).mkdir(parents=True, exist_ok=True)
        suffix = "" if self.variant is None else VARIANT_JOINT + self.variant
        for name in names:
            if name not in self.experiment.analyses:
                continue
            options = self.experiment.analyses[name]  # its sets exist: loading.load checked them
            self.progress.say(f"analysis {name}" + ("" if self.variant is None else f" ({self.variant})"))
            try:
                result = getattr(self, name)(options, hyps)
            except Exception as error:  # an analysis that breaks must not cost the run's BLEU
                log = self.logs / f"analysis_{name}{suffix}.log"
                log.write_text(traceback.format_exc(), encoding="utf-8")
                errors[name] = f"{type(error).__name__}: {error} (see {log})"
                self.progress.say(f"analysis {name} failed: {errors[name]}")
                continue
            write_json(self.dir / self.folder / f"{name}.json", result)
            done[name] = f"{self.folder}/{name}.json"
        return done, errors

    def model(self):
        """The averaged model, loaded once for the analyses that run it in this process (a
        variant's: with its translate options that change the model)."""
        from onmt_posenc.analysis import models

        if self._model is None:
            self._model = models.load_model(self.dir / AVERAGED, self.translate_options)
        return self._model

    def gold_nlls(self, name):
        """The teacher-forced NLL of each gold token of evaluation set `name`, a list a sentence;
        computed once a set (length_buckets and token_nll both read the test set's)."""
        from onmt_posenc.analysis import models, token_nll

        if name not in self._gold_nlls:
            files = self.files["eval"][name]
            self._gold_nlls[name] = token_nll.token_nlls(self.model(), models.read_token_lines(files.src),
                                                         models.read_token_lines(files.tgt))
        return self._gold_nlls[name]

    def length_buckets(self, options, hyps):
        """Scores by source length on each set, with the teacher-forced NLL of the gold tokens."""
        from onmt_posenc.analysis import length_buckets

        results = {}
        for name in options["sets"]:
            files = self.files["eval"][name]
            results[name] = length_buckets.bucket_scores(read_lines(files.src), read_lines(files.ref), hyps[name],
                                                         options["width"], self.longest_source,
                                                         self.gold_nlls(name), options["split_at"],
                                                         options.get("relative"))
        return results

    def shift_invariance(self, options, hyps):
        from onmt_posenc.analysis import models, shift_invariance

        files = self.files["eval"][options["set"]]
        return shift_invariance.measure(self.model(), models.read_token_lines(files.src, options["sentences"]),
                                        options["offsets"])

    def position_ablation(self, options, hyps):
        from onmt_posenc.analysis import models, position_ablation

        files = self.files["eval"][options["set"]]
        return position_ablation.ablate(self.model(), models.read_token_lines(files.src, options["sentences"]),
                                        models.read_token_lines(files.tgt, options["sentences"]))

    def token_nll(self, options, hyps):
        """Per-sentence token NLLs and training frequencies, for the comparison across methods in the report."""
        from onmt_posenc.analysis import models, token_nll

        files = self.files["eval"][options["set"]]
        tgt = models.read_token_lines(files.tgt)
        nlls = self.gold_nlls(options["set"])
        counts = token_nll.training_frequencies(self.files["train"][1])
        return {"set": options["set"], "nll": [None if n is None else [round(x, 5) for x in n] for n in nlls],
                "frequency": token_nll.gold_frequencies(tgt, counts)}

    def swapped(self, options, hyps):
        """On the evaluation set `set` and, as the paper does, on the first `train_examples`
        joined examples of the training corpus as the model saw it (sample/)."""
        from onmt_posenc.analysis import swapped

        workdir, name, sep = self.dir / "analyses" / "swapped", options["set"], options["sep"]
        files = self.files["eval"][name]
        language = self.experiment.data[self.run.data].target_language
        results = {name: swapped.analyse(files.src, files.ref, workdir / name, self.translate, sep,
                                         original_hyp=self.dir / "hyp" / f"{name}.txt", language=language)}
        if options["train_examples"]:
            src = self.dir / "sample" / "train.sample.src"  # the joined corpus, not single_pairs's
            examples = swapped.training_examples(src, src.with_suffix(".tgt"), options["train_examples"],
                                                 workdir / "train", sep)
            results["train"] = (swapped.analyse(*examples, workdir / "train", self.translate, sep, language=language)
                                if examples else
                                {"applicable": False, "examples": 0,
                                 "why": "not applicable: the training corpus joins no sentences"})
        return results
