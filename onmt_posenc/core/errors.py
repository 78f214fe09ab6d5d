"""The root of every error a user can cause: a file, an option or a value to fix.

Modules raise a subclass of `UserError` that says what is wrong and where (the
file, the line, the option); they never print it. The entry points catch the root
once and print one line: `onmt-posenc` (cli.py) as `onmt-posenc COMMAND: error: ...`,
the stock `onmt_*` commands through the start-up hook (hooks/commands.py) as
`onmt_train: error: ...`. Anything else is a bug, and keeps its traceback.
"""


class UserError(Exception):
    """An error the user can cause and fix."""
