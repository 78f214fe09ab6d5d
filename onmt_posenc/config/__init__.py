"""OpenNMT-py configuration files: `include:`, unknown keys, and option checks through its parsers."""
