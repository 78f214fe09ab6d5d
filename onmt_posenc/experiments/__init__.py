"""Experiment files, their runs on disk, the runner, the launcher, the report and the claims."""
