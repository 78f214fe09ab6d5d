"""The pyonmttok tokenizers of the data the project prepares (WMT16, Multi30k, KFTT).

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


def learn_joint_sentencepiece(files, vocab_size, model_path):
    """One SentencePiece model (unigram) on the raw text of `files` (both languages) into
    `model_path`; the tokenizer it gives marks joiners as `tokenizer` does. Text is
    taken as it is (no NFKC normalization), so that translations detokenize to the
    references' characters, full-width brackets included."""
    learner = pyonmttok.SentencePieceLearner(vocab_size=vocab_size, character_coverage=0.9995,
                                             normalization_rule_name="identity", input_sentence_size=2_000_000,
                                             shuffle_input_sentence=True)
    for path in files:
        learner.ingest_file(str(path))
    learner.learn(str(model_path))
    return sentencepiece_tokenizer(model_path)


def sentencepiece_tokenizer(model_path):
    return pyonmttok.Tokenizer("none", sp_model_path=str(model_path), joiner_annotate=True)
