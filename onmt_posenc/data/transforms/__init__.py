"""OpenNMT-py data transforms of the extension.

Importing this package registers them with OpenNMT-py's transform registry
(`@register_transform`); `onmt_posenc.hooks.plugin.activate()` does so before any
option parser is built, so `transforms: [...]` in YAML finds them.
"""
from onmt_posenc.data.transforms import concat_pairs  # noqa: F401  (INTERPOLATE)
from onmt_posenc.data.transforms import join_adjacent  # noqa: F401  (long examples from short pairs)
from onmt_posenc.data.transforms import phrase_boundaries  # noqa: F401  (perSPE: tgt_phrases)
