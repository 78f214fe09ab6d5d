"""A run's checkpoints: which it saved, which load, which to keep, and where an unfinished
run goes on from."""
from onmt_posenc.experiments.running.state import start_again_why
from onmt_posenc.experiments.running.store import saved_checkpoints
from onmt_posenc.model.checkpoints import is_complete


def newest_complete_checkpoint(run_dir, say):
    """The newest checkpoint that loads; newer ones that do not (a save cut short by a
    kill) are removed, so that averaging never picks them up."""
    for path in reversed(saved_checkpoints(run_dir)):
        if is_complete(path):
            return path
        say(f"{path.name} is not a complete checkpoint; removed")
        path.unlink()
    return None


def keep_newest(saved, keep):
    """Remove all but the `keep` newest of the checkpoints `saved` (oldest first; keep <= 0:
    all stay), as onmt_train's keep_checkpoint would have in one invocation: a resumed
    onmt_train removes only the checkpoints it saved itself. Returns those kept."""
    if keep <= 0 or len(saved) <= keep:
        return saved
    for path in saved[:-keep]:
        path.unlink()
    return saved[-keep:]


def resume_point(directory, config, say):
    """Where an unfinished run goes on from: its newest complete checkpoint, if the run
    was made with this config (or one with fewer updates); None (start clean) otherwise."""
    if not saved_checkpoints(directory):  # nothing to go on from: a new run's folder holds only
        return None  # the runner's lock, and an attempt killed before its first save left none
    why = start_again_why(directory, config)
    if why:
        say(f"an unfinished attempt {why}; starting again")
        return None
    return newest_complete_checkpoint(directory, say)
