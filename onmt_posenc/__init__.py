"""onmt-posenc: position representations for OpenNMT-py Transformers.

Importing this package is cheap on purpose: the start-up hook
(`onmt_posenc.startup`) imports it in every Python process. The extension
itself is activated by `onmt_posenc.hooks.plugin.activate()` when `onmt` is imported.
"""

__version__ = "0.1.0"
