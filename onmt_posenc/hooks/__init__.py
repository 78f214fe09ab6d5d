"""The only code that patches OpenNMT-py (plugin) and runs its commands (stock), with the checks that stop its commands early (preflight)."""
