"""Text files, separators, document ids, BLEU, errors: no torch, no OpenNMT-py."""
