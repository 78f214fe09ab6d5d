"""The experiment file: declared (spec), read and checked (loading), its grid expanded into runs."""
