# Entry points a user needs; each builds .venv from nothing on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
RUN_ARGS ?=

.PHONY: run test test-fast test-gpu-torch lint bench clean-venv

$(VENV)/.installed: pyproject.toml lab/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# torch first and pinned: an unpinned request would pull a multi-GB CUDA build on a CPU machine.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]' -e ./lab
	touch $@

# The default run: the same settings as `clstm-ppo-train` with no flags, from any folder.
run: $(VENV)/.installed
	$(PY) -m clstm_ppo.train --config default $(RUN_ARGS)

# Two pytest-xdist workers, one per core of CI's machine; tests/conftest.py groups the tests that compile (one
# worker, so inductor's cache serves them all) and those that start several processes (never two at once).
TEST_WORKERS ?= 2
PYTEST := WANDB_MODE=offline $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

# CI's command: lint, then every test. PYTEST_ARGS adds pytest options, e.g. --junitxml=F for
# scripts/bench/suite_times.py.
test: lint
	$(PYTEST) --durations=25 $(PYTEST_ARGS)  # the slowest tests, where CI time goes

# Minutes less: skips the tests marked slow (several processes, torchrun, long training).
test-fast: $(VENV)/.installed
	$(PYTEST) -m "not slow"

# The suite under the torch of the lent GPU machines' image (2.11.0 there, 2.13.0 here), on this CPU, before a lease:
# their torch.compile differs from ours. Pulls that torch's CUDA build from PyPI (~5 GB, a few minutes); not in CI.
GPU_TORCH ?= 2.11.0
GPU_VENV := .venv-torch$(GPU_TORCH)
test-gpu-torch:
	test -x $(GPU_VENV)/bin/python || $(PYTHON) -m venv $(GPU_VENV)
	$(GPU_VENV)/bin/python -m pip install --quiet torch==$(GPU_TORCH)
	$(GPU_VENV)/bin/python -m pip install --quiet -e '.[dev]' -e ./lab
	TORCHINDUCTOR_CACHE_DIR=$(CURDIR)/$(GPU_VENV)/inductor WANDB_MODE=offline $(GPU_VENV)/bin/python -m pytest -q \
		-p no:cacheprovider -m "not slow" --ignore tests/test_install.py

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .

bench: $(VENV)/.installed
	$(PY) scripts/bench/bench_data.py

clean-venv:
	rm -rf $(VENV)
