"""Experiments: grids of OpenNMT-py runs that compare position methods, in four stages in the
order data flows, each a package that imports only the ones before it (an import-linter
contract): the experiment file (file: declared, read, checked, its grid expanded into runs),
running the grid (running: the runner, the runs' state and records on disk, checkpoints,
progress, analyses, the launcher), the papers' claims judged on the runs' records (claims),
and the report (report). `onmt-posenc run` (run) goes through all four.

The experiment file's API, for the commands and the analyses of a batch:"""
from onmt_posenc.experiments.file.opennmt_checks import check_options
from onmt_posenc.experiments.file.data_folder import folder_data
from onmt_posenc.experiments.file.loading import add_arguments, from_arguments, load
from onmt_posenc.experiments.file.schema import ANALYSES
from onmt_posenc.experiments.file.spec import (FOLDER_FILES, ExperimentError, needs_target_phrases, parse_shard, shard,
                                               uses_shape, warm_start_source)

__all__ = ["ANALYSES", "FOLDER_FILES", "ExperimentError", "add_arguments", "check_options", "folder_data",
           "from_arguments", "load", "needs_target_phrases", "parse_shard", "shard", "uses_shape", "warm_start_source"]
