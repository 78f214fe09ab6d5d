# Two commands on a fresh machine: `make demo` (set up, run the main job) and
# `make test` (set up, run the tests). Everything goes into $(VENV).
VENV ?= .venv
PYTHON ?= python3
# The CPU build on local disk here; elsewhere any torch >= 2.6 works, e.g. TORCH=torch==2.6.0
TORCH ?= torch==2.13.0
BIN = $(VENV)/bin

.PHONY: setup demo test test-fast
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	# OpenNMT-py 3.5.1 pins torch<2.3: install it without its pins; pyproject.toml
	# lists its run-time dependencies.
	$(BIN)/python -m pip install -q --no-deps opennmt-py==3.5.1
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $@

# PYTEST_ARGS: e.g. one test file, `make test PYTEST_ARGS=tests/test_preflight.py`.
# Two workers, each file on one of them (a file's trained fixtures are made once), the
# longest files first (tests/conftest.py orders them).
test: setup
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# The tests that neither train nor run a command (marked by tests/conftest.py): a few
# minutes' work less than one, for the edit-test loop.
test-fast: setup
	$(BIN)/python -m pytest -q -n 2 -m "not commands" $(PYTEST_ARGS)

# `make demo DATA=DIR`: the same batch on a folder of real files (OpenNMT-py layout)
demo: setup
	$(BIN)/onmt-posenc run recipes/experiments/demo.yaml $(if $(DATA),--data $(DATA))
