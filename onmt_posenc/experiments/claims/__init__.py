"""The papers' claims judged on a batch's run records: the SHAPE paper's (shape_paper), the perSPE paper's and seed 003's (perspe_paper)."""
