"""The papers' claims judged on a batch's run records: the SHAPE paper's, the perSPE paper's and seed 003's."""
