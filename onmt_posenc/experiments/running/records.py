"""What a stored run record (result.json, failure.json) and a stored analysis must hold,
and reading them: a broken file is found when it is read, not in every use. Also each
evaluated set's translations, kept beside the record (TRANSLATIONS) so that any corpus metric
of any subset of its sentences can be computed again (core.significance resamples them)."""
import gzip
import hashlib
import json
from pathlib import Path
from typing import NamedTuple

from onmt_posenc.experiments.file.spec import VARIANT_JOINT
from onmt_posenc.experiments.running.store import FAILURE, INTERRUPTED, RESULT, file_digest, read_json

# Where a run keeps its translations of each evaluated set, in its folder and in a committed
# results folder: translations/<set>.json.gz in a run's folder; translations/<run id>/<set>.json.gz
# and translations/references/<sha256>.txt.gz beside results.json
TRANSLATIONS = "translations"
# Where a run keeps each evaluation variant's translations, scores' files and analyses: variants/<name>/
VARIANTS = "variants"


class Maybe(NamedTuple):
    """In a FORM: a key that may be absent (`null` too where `null` is true)."""
    form: object
    null: bool = False


class Each(NamedTuple):
    """In a FORM: a JSON object with any keys, every value of this form."""
    form: object


NUMBER = (int, float)
_NAMES = {str: "a string", int: "an integer", NUMBER: "a number", bool: "true or false", dict: "a JSON object",
          list: "a list"}
# What the report and the claims read of a stored file, to find a broken one when it is
# read rather than in every use: a type, {key: form} (a JSON object with these keys),
# [form] (a list of such), Each(form) or Maybe(form).
RECORD = {  # result.json, failure.json or interrupted.json
    "status": str, "error": Maybe(str), "log": Maybe(str, null=True),
    "bleu": Maybe(Each(NUMBER)), "length_ratio": Maybe(Each(NUMBER)), "chrf": Maybe(Each(NUMBER)),
    "bleu_details": Maybe(Each({"chrf": NUMBER, "brevity_penalty": NUMBER, "precisions": [NUMBER]})),
    "joined": Maybe(Each({"lines": int, "sentences": int, "bleu": NUMBER, "separator_mismatches": int})),
    "training_speed": Maybe({"tokens_per_second": NUMBER}, null=True),
    "train_seconds": Maybe(NUMBER), "seconds": Maybe(NUMBER),
    "machine": Maybe({"cpu": str, "cores": Maybe(int, null=True), "gpus": Maybe([str]), "torch": str}, null=True),
    "device_sharing": Maybe({"other_trainings": Maybe(int, null=True), "load_average": Maybe(NUMBER, null=True),
                             "cores": Maybe(int, null=True)}, null=True),
    "curve": Maybe({"valid": Maybe([{"step": int, "ppl": NUMBER, "bleu": Maybe(NUMBER)}])}, null=True),
    "convergence": Maybe({"converged": Maybe(bool, null=True), "why": str}, null=True),
    "analyses": Maybe(Each(str)), "analysis_errors": Maybe(Each(str)), "config": Maybe(dict, null=True),
    "step": Maybe(int, null=True), "command": Maybe(str), "runner": Maybe(str), "model_sha256": Maybe(str),
    "warm_start": Maybe({"source": str, "from": str, "sha256": str}, null=True),
    "longest_training_source": Maybe(int), "longest_training_example": Maybe({"source": int, "target": int}),
    "translations": Maybe(Each(str)),  # {set: its translations' file, relative to translations_root}
    # {name: an evaluation variant's translate options, scores, translations and analyses (their results
    # too, once read: analysis_results)}
    "variants": Maybe(Each({"translate": dict, "bleu": Each(NUMBER), "chrf": Each(NUMBER),
                            "length_ratio": Each(NUMBER), "translations": Each(str), "analyses": Each(str),
                            "analysis_errors": Maybe(Each(str)), "analysis_results": Maybe(dict)})),
}
FINISHED = {"bleu": Each(NUMBER), "bleu_signature": str, "config": dict}  # besides RECORD
ANALYSIS_FORMS = {
    # brevity_penalty to nll: records made since issue 59 (nll: None where no sentence was scored)
    "length_buckets": Each({"buckets": [str], "counts": [int], "max_train_length": Maybe(int, null=True),
                            "multiples": Maybe([str]),  # relative buckets
                            "bleu": [NUMBER], "length_ratio": [NUMBER], "brevity_penalty": Maybe([NUMBER]),
                            "precisions": Maybe([[NUMBER]]), "chrf": Maybe([NUMBER]),
                            "nll": Maybe([Maybe(NUMBER, null=True)]), "nll_all": Maybe(NUMBER, null=True),
                            "split": Maybe({"at": int,
                                            **dict.fromkeys(("up_to", "beyond"), Maybe({
                                                "count": int, "bleu": NUMBER, "length_ratio": NUMBER,
                                                "nll": Maybe(NUMBER, null=True)}))})}),
    "shift_invariance": {"offsets": [int], "matrix": [[NUMBER]], "mean_off_diagonal": NUMBER,
                         "absolute_positions": bool},
    "position_ablation": {"removed_from": [str], "encoder_cosine": NUMBER, "decoder_cosine": NUMBER,
                          "perplexity_kept": NUMBER, "perplexity_removed": NUMBER,
                          "conditions": Maybe(Each({"encoder_cosine": NUMBER, "decoder_cosine": NUMBER,
                                                    "perplexity": NUMBER})),
                          "yardsticks": Maybe({"random_mean": NUMBER, "random_std": NUMBER, "dim": int,
                                               "encoder_other_token": NUMBER, "decoder_other_token": NUMBER})},
    "token_nll": {"nll": [Maybe([NUMBER], null=True)], "frequency": Maybe([[int]])},
    # {set: result}
    "swapped": Each({"applicable": bool, "examples": int, "original": Maybe(NUMBER), "swapped": Maybe(NUMBER),
                     "drop": Maybe(NUMBER), "wrong_separators": Maybe(NUMBER),
                     "wrong_separators_swapped": Maybe(NUMBER), "why": Maybe(str),
                     "aligned": Maybe({"original": NUMBER, "swapped": NUMBER, "drop": NUMBER})}),
}


def form_problem(value, form, where=""):
    """Why `value` (read from JSON) does not have `form`, or None."""
    if isinstance(form, Maybe):
        return None if value is None and form.null else form_problem(value, form.form, where)
    container = dict if isinstance(form, (dict, Each)) else list if isinstance(form, list) else form
    if not isinstance(value, container):
        return f"{where + ': ' if where else ''}must be {_NAMES[container]}, got {shown(value)}"
    if isinstance(form, dict):
        missing = [key for key, inner in form.items() if key not in value and not isinstance(inner, Maybe)]
        if missing:
            return f"{_inside(where, missing[0])}: missing"
        inner = [(value[key], form[key], _inside(where, key)) for key in form if key in value]
    elif isinstance(form, Each):
        inner = [(item, form.form, _inside(where, key)) for key, item in value.items()]
    elif isinstance(form, list):
        inner = [(item, form[0], f"{where}[{i}]") for i, item in enumerate(value)]
    else:
        return None
    return next(filter(None, (form_problem(*each) for each in inner)), None)


def _inside(where, key):
    return f"{where}.{key}" if where else f"{key}"


def shown(value):
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:36] + " ..."


def record_problem(record):
    """Why a stored run record (result.json, failure.json) is of no use to the report, or None."""
    problem = form_problem(record, RECORD)
    if problem is None and record["status"] == "finished":
        problem = form_problem(record, FINISHED)
    if problem is not None:
        return problem
    if record["status"] not in ("finished", "failed", "interrupted"):
        return f"status: must be finished, failed or interrupted, got {shown(record['status'])}"
    unscored = set(record.get("joined") or {}) - set(record.get("bleu") or {})
    if unscored:
        return f"joined: names {sorted(unscored)}, which bleu does not"
    if record.get("training_speed") and "train_seconds" not in record:
        return "train_seconds: missing (training_speed needs it)"
    if (record.get("curve") or {}).get("valid") and not record.get("convergence"):
        return "convergence: missing (curve.valid needs it)"
    return None


def analysis_problem(name, stored):
    """Why a stored analysis is of no use to the report, or None."""
    problem = form_problem(stored, ANALYSIS_FORMS[name])
    if problem is not None:
        return problem
    if name == "swapped":
        for where, result in stored.items():
            needed = ("original", "swapped", "drop") if result["applicable"] else ("why",)
            missing = [key for key in needed if result.get(key) is None]
            if missing:
                return f"{where}.{missing[0]}: missing"
    if name == "length_buckets":
        for where, result in stored.items():
            per_bucket = [key for key in ("counts", "multiples", "bleu", "length_ratio", "brevity_penalty", "precisions",
                                          "chrf", "nll") if key in result]
            if any(len(result[key]) != len(result["buckets"]) for key in per_bucket):
                return f"{where}: {', '.join(per_bucket)} must have one value per bucket"
    if name == "shift_invariance":
        size = len(stored["offsets"])
        if not size or len(stored["matrix"]) != size or any(len(row) != size for row in stored["matrix"]):
            return "matrix: must have one row and one column per offset"
    return None


def read_stored(path, analysis=None):
    """A stored result (result.json, failure.json, an analysis): its value, or None and
    why it cannot be read (a write cut short, an edit gone wrong) or used. A run record
    (by its file name) is checked against RECORD, the analysis `analysis` against its
    ANALYSIS_FORMS form, so that one broken file leaves its run, or its analysis, out
    instead of stopping the report (or the runner) in the middle."""
    try:
        value = read_json(path)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        return None, f"{path} cannot be read ({type(error).__name__}: {error})"
    if Path(path).name in (RESULT, FAILURE, INTERRUPTED):
        problem = record_problem(value)
    else:
        problem = analysis_problem(analysis, value) if analysis in ANALYSIS_FORMS else None
    if problem is not None:
        return None, f"{path} cannot be used ({problem})"
    return value, None


def with_variants(records):
    """The records, each finished one followed by one record per evaluation variant it holds, as a
    run of its own: labelled <label>+<variant> (id likewise), with the variant's scores,
    translations and analyses in place of the run's, the rest (seed, curves, convergence, longest
    training example) the run's. The report's tables then set rotary+ntk beside the methods."""
    expanded = []
    for record in records:
        expanded.append(record)
        if record.get("status") != "finished":
            continue
        for name, variant in (record.get("variants") or {}).items():
            expanded.append({**{key: value for key, value in record.items() if key != "variants"},
                             "bleu_details": {}, "joined": {}, **variant,
                             "id": f"{record['id']}{VARIANT_JOINT}{name}",
                             "label": f"{record['label']}{VARIANT_JOINT}{name}", "variant": name,
                             "variant_of": record["id"]})
    return expanded


def read_analysis(record, name):
    """An analysis a run stored, as the report read it from the run's folder into the
    record's `analysis_results` (grid_records.collect), which results.json keeps."""
    return record["analysis_results"][name]


def where_its_log_is(record, text, markdown=False):
    """" (log: LOG)" for a record whose log `text` (its error, or a note on it) does not
    name already; "" otherwise. `markdown`: the path as code."""
    log = record.get("log")
    if not log or str(log) in text:
        return ""
    return f" (log: `{log}`)" if markdown else f" (log: {log})"


def write_translations(path, hypotheses, sources, reference):
    """A set's translations as the run scored them (onmt_translate's lines), each source's length
    in tokens (what the length analysis buckets by) and the reference file by its path and SHA-256."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    stored = {"hypotheses": list(hypotheses), "source_lengths": [len(line.split()) for line in sources],
              "reference": {"path": str(Path(reference).resolve()), "sha256": file_digest(reference)}}
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(stored, f)


def read_translations_file(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def copy_translations(record, folder):
    """The record's translations copied into a results `folder` (translations/<run id>/<set>.json.gz,
    each reference once as translations/references/<sha256>.txt.gz, named relative to the folder);
    returns {set: the copy, relative to the folder}."""
    folder, copied = Path(folder), {}
    for eval_set, name in record["translations"].items():
        source, target = Path(record["translations_root"]) / name, Path(TRANSLATIONS) / record["id"] / f"{eval_set}.json.gz"
        copied[eval_set] = target.as_posix()
        if source.resolve() == (folder / target).resolve():
            continue
        stored = read_translations_file(source)
        kept = Path(TRANSLATIONS) / "references" / f"{stored['reference']['sha256']}.txt.gz"
        if not (folder / kept).is_file():
            reference = Path(record["translations_root"]) / stored["reference"]["path"]
            data = reference.read_bytes()
            (folder / kept).parent.mkdir(parents=True, exist_ok=True)
            (folder / kept).write_bytes(data if reference.suffix == ".gz" else gzip.compress(data, mtime=0))
        stored["reference"]["path"] = kept.as_posix()
        (folder / target).parent.mkdir(parents=True, exist_ok=True)
        with gzip.GzipFile(folder / target, "wb", mtime=0) as f:
            f.write(json.dumps(stored).encode("utf-8"))
    return copied


def read_translations(record, eval_set):
    """((hypotheses, references, source lengths), None) of a record's set, or (None, why not): the
    record keeps none (made before runs kept them), or a file is gone or is not what was scored."""
    name = (record.get("translations") or {}).get(eval_set)
    if name is None:
        return None, "the runs kept no translations"
    path = Path(record["translations_root"]) / name
    try:
        stored = read_translations_file(path)
        reference = Path(record["translations_root"]) / stored["reference"]["path"]  # absolute: as it is
        data = gzip.decompress(reference.read_bytes()) if reference.suffix == ".gz" else reference.read_bytes()
        references = data.decode("utf-8").split("\n")
    except (OSError, ValueError, KeyError) as error:
        return None, f"{path} cannot be read ({type(error).__name__}: {error})"
    if hashlib.sha256(data).hexdigest() != stored["reference"]["sha256"]:
        return None, f"{reference} is not the reference the run was scored on"
    if references and references[-1] == "" and data.endswith(b"\n"):
        references.pop()  # read_lines' lines: the last line's end is not a line
    if not len(stored["hypotheses"]) == len(references) == len(stored["source_lengths"]):
        return None, f"{path} and {reference} differ in lines"
    return (stored["hypotheses"], references, stored["source_lengths"]), None
