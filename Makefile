# longca: install, test, benchmark. torch is installed first, and only where none is present, so
# that no dependency range of a plugin pulls another torch build. Which build pip picks is pip's
# configuration: on a plain Linux pip that is a CUDA build (multi-GB). For a CPU build pass
# TORCH_INDEX=<PyTorch's CPU index> (make then checks that the torch it installed is CPU-only).
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
# pytest-xdist processes for `make test` (on two cores: 9 min 21 s, against 17 min 22 s in one)
TEST_WORKERS ?= 2
PLUGINS := $(sort $(dir $(wildcard plugins/*/pyproject.toml)))

.PHONY: install test test-gpu bench lint wheels

install:
	$(PYTHON) -c "import torch" 2>/dev/null || $(PIP) install $(TORCH) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	@if [ -n "$(TORCH_INDEX)" ]; then $(PYTHON) -c "import sys, torch; sys.exit('a CPU build was asked for (TORCH_INDEX) but torch ' + torch.__version__ + ' is a CUDA build' if torch.version.cuda else 0)"; fi
	$(PIP) install "setuptools>=77" pytest pytest-xdist
	# core, runner and testing as path entries (compat): their regular packages then win over a folder of
	# the same name in the current directory (a checkout named longca; the checkout's own longca_runner/,
	# longca_testing/), which Python would otherwise import as a namespace without running its __init__
	# bottom up, so that no dependency is looked up on an index: core, then flashplan and cp (core
	# only), then runner and testing, then sim, cli and the plugins
	$(PIP) install --config-settings editable_mode=compat -e core
	$(PIP) install -e longca_flashplan -e longca_cp
	$(PIP) install --config-settings editable_mode=compat -e longca_runner -e longca_testing
	$(PIP) install -e longca_sim -e longca_cli $(foreach p,$(PLUGINS),-e $(p))

test:
	OMP_NUM_THREADS=1 $(PYTHON) -m pytest -q -n $(TEST_WORKERS)

lint:  # ruff, mypy and import-linter at the versions CI pins (.ci/run); each must report nothing broken
	$(PYTHON) -m ruff check .
	$(PYTHON) -m mypy  # the paths in pyproject.toml's [tool.mypy]; about 40 s on 2 cores, seconds when cached
	# the layering contract (.importlinter), run from core/: at the checkout root the folders
	# longca_cp/, longca_sim/, ... would be imported as namespace packages instead of the installed ones
	cd core && lint-imports --config ../.importlinter --no-cache

wheels:  # every distribution's wheel into dist/ (for pip install --find-links dist ...)
	$(PIP) wheel --no-deps --no-build-isolation --wheel-dir dist ./core ./longca_runner ./longca_testing ./longca_flashplan ./longca_cp ./longca_sim ./longca_cli $(addprefix ./,$(PLUGINS))

test-gpu:
	$(PYTHON) -m pytest -q -m "longca_gpu or gpu"

# a second run resumes results/default: its cases are skipped, the report rewritten; the distributions
# are installed only when longca is not importable yet (`make install` refreshes them)
bench:
	@$(PYTHON) -c "import longca_cli.main" 2>/dev/null || $(MAKE) install PYTHON="$(PYTHON)"
	$(PYTHON) -m longca_cli bench --resume
