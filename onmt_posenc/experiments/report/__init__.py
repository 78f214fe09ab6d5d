"""The report (`onmt-posenc report`): report.md, results.json and results.csv from the runs' records alone."""
