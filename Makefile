# longca: install, test, benchmark. torch is installed first (a CPU build where none is present)
# so that no dependency range pulls a multi-GB CUDA build on a machine without a GPU.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
TORCH ?= torch==2.13.0
PLUGINS := $(sort $(dir $(wildcard plugins/*/pyproject.toml)))

.PHONY: install test test-gpu bench lint

install:
	$(PYTHON) -c "import torch" 2>/dev/null || $(PIP) install $(TORCH)
	$(PIP) install setuptools pytest
	$(PIP) install -e core -e longca_cli $(foreach p,$(PLUGINS),-e $(p))

test:
	OMP_NUM_THREADS=1 $(PYTHON) -m pytest -q

lint:  # ruff and mypy at the versions CI pins (.ci/run); both must report nothing
	$(PYTHON) -m ruff check .
	$(PYTHON) -m mypy  # the paths in pyproject.toml's [tool.mypy]; about 40 s on 2 cores, seconds when cached

test-gpu:
	$(PYTHON) -m pytest -q -m "longca_gpu or gpu"

bench: install  # a second run resumes results/default: its cases are skipped, the report rewritten
	longca bench --resume
