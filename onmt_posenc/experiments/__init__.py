"""Experiment files and what is made of them: the grid of OpenNMT-py runs that compare
position methods (spec: what a file holds; loading: reading and checking it, through
experiment_file, values, owned_keys, data_settings, data_folder and grid; checks: every
run's options through OpenNMT-py's parsers), the runs on disk (store, records, state,
opennmt_config, data_preparation), running them (runner, launcher, run_command), and the
report (report and its report_* modules, claims, curves).

The experiment file's API, for the commands and the analyses of a batch:"""
from onmt_posenc.experiments.checks import check_options
from onmt_posenc.experiments.data_folder import folder_data
from onmt_posenc.experiments.loading import add_arguments, from_arguments, load
from onmt_posenc.experiments.spec import (ANALYSES, FOLDER_FILES, ExperimentError, needs_target_phrases, parse_shard,
                                          shard, uses_shape, warm_start_source)

__all__ = ["ANALYSES", "FOLDER_FILES", "ExperimentError", "add_arguments", "check_options", "folder_data",
           "from_arguments", "load", "needs_target_phrases", "parse_shard", "shard", "uses_shape", "warm_start_source"]
