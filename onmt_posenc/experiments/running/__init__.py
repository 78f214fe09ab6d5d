"""Running an experiment's grid: each run's commands (runner), its state and records on disk, its checkpoints, progress and analyses, and the grid as scheduler jobs (launcher)."""
