"""Running the grid: the runner, the runs' state and records on disk, checkpoints, progress, the launcher."""
