"""The pyonmttok tokenizer of the data the project prepares (WMT16, Multi30k).

Its joiner marks (￭) let a translation be detokenized exactly, which also
undoes BPE, so BLEU is computed on plain text against raw references.
"""
import pyonmttok


def tokenizer(bpe_codes=None):
    """Conservative tokenization with joiner marks; with `bpe_codes`, BPE on top."""
    subwords = {"bpe_model_path": str(bpe_codes)} if bpe_codes else {}
    return pyonmttok.Tokenizer("conservative", joiner_annotate=True, **subwords)


def learn_joint_bpe(files, merges, codes_path):
    """Learn one BPE model on the tokenized text of `files` (both languages) into `codes_path`."""
    learner = pyonmttok.BPELearner(tokenizer=tokenizer(), symbols=merges)
    for path in files:
        learner.ingest_file(str(path))
    learner.learn(str(codes_path))
    return tokenizer(codes_path)
