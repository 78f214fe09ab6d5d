"""What the runner's tests share: the demo experiment scaled down to a few updates on a small
synthetic corpus, a tiny experiment file that loads without training, and --set pairs."""
from conftest import REPO, write_yaml

DEMO = REPO / "recipes" / "experiments" / "demo.yaml"
# The demo, scaled down: a few updates on a small synthetic corpus, short outputs. The
# swapped evaluation on the eval set only: its training-examples part (two more translations
# of every run evaluated here) runs in tests/corpora/test_kftt.py's En->Ja experiment.
SCALED_DOWN = [
    "settings.train_steps=16", "settings.save_checkpoint_steps=8", "settings.valid_steps=16",
    "settings.report_every=4", "settings.warmup_steps=8",
    "data.synthetic.synthetic.train_examples=600", "data.synthetic.synthetic.eval_examples=12",
    "evaluation.translate.max_length=30", "analyses.swapped.train_examples=0",
]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LONG = 1800  # seconds: three small trainings and their evaluation, on a slow machine


def overrides(pairs):
    return [arg for pair in pairs for arg in ("--set", pair)]


def experiment_file(tmp_path, **changes):
    """A tiny experiment file (no training needed to load it)."""
    mapping = {
        "recipe": str(REPO / "recipes" / "base.yaml"),
        "settings": {"train_steps": 10, "hidden_size": 64, "word_vec_size": 64},
        "methods": {"ape": {}, "shape": {"src_position_encoding": "shape", "tgt_position_encoding": "shape"},
                    "rpe": {"position_encoding": False, "max_relative_positions": 16}},
        "data": {"small": {"synthetic": {"train_examples": 50}},
                 "long": {"synthetic": {"seed": 2}, "settings": {"hidden_size": 128, "word_vec_size": 128}}},
        "grid": {"method": ["ape", "shape", "rpe"], "K": [10, 40], "seed": [1, 2]},
    }
    mapping.update(changes)
    return write_yaml(tmp_path / "experiment.yaml", mapping)
