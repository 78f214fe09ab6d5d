"""The model side: position schemes, self-attention variants, their options, checkpoints, export."""
