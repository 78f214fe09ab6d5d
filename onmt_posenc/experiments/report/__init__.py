"""The report of an experiment (`onmt-posenc report`, command): report.md, results.json and results.csv from the runs' records, never from a model."""
