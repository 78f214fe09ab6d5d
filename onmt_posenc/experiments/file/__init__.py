"""The experiment file: what it declares (spec), read and checked into runs (loading), each run's options checked by OpenNMT-py (opennmt_checks)."""
