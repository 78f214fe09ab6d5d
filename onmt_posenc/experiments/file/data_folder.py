"""A folder in OpenNMT-py's layout as a data setting: the folder of a data setting's
`folder` key, or of `--data FOLDER`, which replaces the file's data."""
import re
from pathlib import Path

from onmt_posenc.data.prepare_corpus import LANGUAGES_FILE
from onmt_posenc.experiments.file.spec import FOLDER_FILES, FOLDER_TEST_LINES, FOLDER_VALID_LINES, ExperimentError


def folder_data(folder, interpolate=None, path=None):
    """The files of a folder in OpenNMT-py's layout (FOLDER_FILES), as a data setting's
    mapping: training on train, validation on the first 500 val lines, evaluation on
    `valid` (the same), `test` (the first 1000 test lines) and `concat` (those test
    lines joined in pairs with <sep>, the swapped evaluation's input; under
    INTERPOLATE every set is joined N per line, `concat` too). BLEU is computed
    against `ref-val.txt` / `ref-test.txt` where the folder has them (raw text, as
    `onmt-posenc prepare` writes them), else against the target files. Document ids
    (`docid-train.txt`, ...), where the folder has them, keep joined lines within
    documents. The target language is the second word of `languages.txt`."""
    folder = Path(folder).resolve()
    where = f"{path}: " if path else ""
    if not folder.is_dir():
        raise ExperimentError(f"{where}data folder {folder} {'is a file' if folder.exists() else 'does not exist'}; "
                              "name a folder in OpenNMT-py's layout, as `onmt-posenc prepare` writes it")
    missing = [name for name in FOLDER_FILES if not (folder / name).is_file()]
    if missing:
        raise ExperimentError(f"{where}data folder {folder}: missing {', '.join(missing)}; it needs "
                              f"OpenNMT-py's layout ({', '.join(FOLDER_FILES)}), as `onmt-posenc prepare` writes it")

    def pair(part, **cut):
        files = {"src": str(folder / f"src-{part}.txt"), "tgt": str(folder / f"tgt-{part}.txt"), **cut}
        for key, prefix in (("ref", "ref"), ("docids", "docid")):
            if (folder / f"{prefix}-{part}.txt").is_file():
                files[key] = str(folder / f"{prefix}-{part}.txt")
        return files

    def first(part, most):  # at most `most` lines: a shorter file is taken whole
        with open(folder / f"src-{part}.txt", "rb") as f:
            count = sum(1 for _ in f)
        if count == 0:
            raise ExperimentError(f"{where}data folder {folder}: src-{part}.txt is empty")
        return min(most, count)

    valid = pair("val", lines=first("val", FOLDER_VALID_LINES))
    test = pair("test", lines=first("test", FOLDER_TEST_LINES))
    languages = folder / LANGUAGES_FILE
    language = languages.read_text(encoding="utf-8").split()[1:2] if languages.is_file() else []
    return {"train": pair("train"), "valid": valid, "target_language": language[0] if language else None,
            "eval": {"valid": valid, "test": test, "concat": {**test, "join": interpolate or 2}}}


def label_by_folder(mapping, folder_name):
    """With `--data FOLDER`, a data setting of the generated task reads the folder instead:
    its label (in `data` and the grid) becomes the folder's name, so that runs, progress
    and report do not call real files "synthetic"."""
    data = mapping.get("data")
    if not isinstance(data, dict):
        return
    label = re.sub(r"[^\w.-]+", "-", folder_name) or "data"
    generated = [key for key, spec in data.items() if isinstance(spec, dict) and "synthetic" in spec]
    renames = {key: (label if len(generated) == 1 and label not in data else f"{label}-{key}") for key in generated}
    mapping["data"] = {renames.get(key, key): spec for key, spec in data.items()}
    for spec in mapping["data"].values():
        if isinstance(spec, dict) and spec.get("warm_start") in renames:
            spec["warm_start"] = renames[spec["warm_start"]]
    grids = mapping.get("grid")
    for grid in grids if isinstance(grids, list) else [grids]:
        if isinstance(grid, dict) and isinstance(grid.get("data"), list):
            grid["data"] = [renames.get(name, name) for name in grid["data"]]
