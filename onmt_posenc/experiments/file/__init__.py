"""The experiment file: its keys (schema), read and checked (loading), its grid expanded into runs."""
