# Entry points a user needs; each builds .venv from nothing on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
RUN_ARGS ?=

.PHONY: run test test-fast lint bench clean-venv

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# torch first and pinned: an unpinned request would pull a multi-GB CUDA build on a CPU machine.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

# The default run: the same settings as `clstm-ppo-train` with no flags, from any folder.
run: $(VENV)/.installed
	$(PY) -m clstm_ppo.train --config default $(RUN_ARGS)

# CI's command: lint, then every test.
test: lint
	WANDB_MODE=offline $(PY) -m pytest -q --durations=25  # the slowest tests, where CI time goes

# Minutes less: skips the tests marked slow (several processes, torchrun, long training).
test-fast: $(VENV)/.installed
	WANDB_MODE=offline $(PY) -m pytest -q -m "not slow"

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .

bench: $(VENV)/.installed
	$(PY) scripts/bench_data.py

clean-venv:
	rm -rf $(VENV)
