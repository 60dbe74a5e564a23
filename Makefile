# Two entry points a user needs; each builds .venv from nothing on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
RUN_ARGS ?=

.PHONY: run test bench clean-venv

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# torch first and pinned: an unpinned request would pull a multi-GB CUDA build on a CPU machine.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

run: $(VENV)/.installed
	$(PY) -m clstm_ppo.train $(RUN_ARGS)

test: $(VENV)/.installed
	WANDB_MODE=offline $(PY) -m pytest -q

bench: $(VENV)/.installed
	$(PY) scripts/bench_data.py

clean-venv:
	rm -rf $(VENV)
