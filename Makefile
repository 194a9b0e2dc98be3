# Set up a virtual environment and run the demo or the tests. Nothing needs activating: every target runs
# the programs of .venv/bin (use them the same way: .venv/bin/fairseq-train ..., .venv/bin/fairseq-speaker-demo ...).
#   make install           .venv with torch, fairseq (its C/Cython extensions built) and this package
#   make doctor            what was installed and whether it works: versions, CUDA and GPUs, threads, fairseq's
#                          extensions, the plugin's registration (fairseq-speaker-doctor)
#   make demo              toy corpus -> train lstm_base, lstm_fact_bias, transformer_fact_bias -> BLEU / speaker-word table
#   make lint              ruff (pyflakes, pycodestyle, import order) and mypy on the package, as configured in
#                          pyproject.toml; installs the two into .venv if missing
#   make test              unit and integration tests (about 11 minutes on 2 cores)
#   make test-slow         the slow tier: trains on the toy corpus and checks that the biases learn
#   make test-browser      the service's page in a headless Chromium (installed with apt-get when missing and possible)
#   make clean             remove .venv and what the demo and the build wrote
#
# Which torch: torch is installed first, pinned (TORCH_VERSION), then fairseq is built against it.
#   make install               torch==2.13.0 from the index pip is configured with. From PyPI that is the
#                              CUDA build on Linux x86_64 (several GB with its nvidia-* packages) and the CPU build on
#                              macOS and Windows; a mirror gives what it holds.
#   make install TORCH=cpu     the CPU-only build, from https://download.pytorch.org/whl/cpu (for torch only)
#   make install TORCH=cuda    the CUDA build on Linux x86_64: torch==2.13.0 with PyPI (https://pypi.org/simple)
#                              as its index, which holds that build
#   make install TORCH="torch==2.6.0 --index-url https://download.pytorch.org/whl/cu124"   any other pip requirement
# The choice is made when .venv is made: to change it, `make clean install TORCH=...`.

PYTHON ?= python3
VENV ?= .venv
TORCH ?= default
TORCH_VERSION ?= 2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_CUDA_INDEX ?= https://pypi.org/simple
BIN := $(VENV)/bin
# one thread per process: the tests run two workers on two cores
TEST_ENV := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
# the linters, as the test extra of pyproject.toml names them
LINT_TOOLS := "ruff>=0.17,<0.18" "mypy>=2.4,<2.5"

ifeq ($(TORCH),default)
TORCH_REQUIREMENT := torch==$(TORCH_VERSION)
else ifeq ($(TORCH),cpu)
TORCH_REQUIREMENT := torch==$(TORCH_VERSION) --index-url $(TORCH_CPU_INDEX)
else ifeq ($(TORCH),cuda)
TORCH_REQUIREMENT := torch==$(TORCH_VERSION) --index-url $(TORCH_CUDA_INDEX)
else
TORCH_REQUIREMENT := $(TORCH)
endif
# TORCH given on the command line or in the environment: refused if .venv was made with another torch
TORCH_GIVEN := $(filter command line environment,$(origin TORCH))

.PHONY: install check-torch doctor demo lint test test-slow test-browser clean

install: check-torch $(VENV)/.installed

check-torch:
	@if [ -n "$(TORCH_GIVEN)" ] && [ -f $(VENV)/.torch ] && [ "$$(cat $(VENV)/.torch)" != "$(TORCH_REQUIREMENT)" ]; then \
		echo "$(VENV) was made with pip install $$(cat $(VENV)/.torch); to install $(TORCH_REQUIREMENT) instead: make clean install TORCH='$(TORCH)'"; \
		exit 2; \
	fi

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip "setuptools>=64" wheel
	$(BIN)/pip install $(TORCH_REQUIREMENT)
	$(BIN)/pip install cython numpy
	# fairseq builds C++/Cython extensions against the torch above (no isolated build, no second torch)
	$(BIN)/pip install --no-build-isolation -e ".[test]"
	echo "$(TORCH_REQUIREMENT)" > $(VENV)/.torch
	touch $@

doctor: install
	$(BIN)/fairseq-speaker-doctor

demo: install
	$(BIN)/fairseq-speaker-demo --workdir demo-work

lint: install
	@if [ ! -x $(BIN)/ruff ] || [ ! -x $(BIN)/mypy ]; then $(BIN)/pip install $(LINT_TOOLS); fi
	$(BIN)/ruff check fairseq_speaker
	$(BIN)/mypy

test: install
	$(TEST_ENV) $(BIN)/python -m pytest -n 2 --dist worksteal tests

test-slow: install
	$(BIN)/python -m pytest -m slow tests

# without Chromium the test fails and says how to install it
test-browser: install
	@if ! command -v chromedriver >/dev/null || ! (command -v chromium || command -v chromium-browser) >/dev/null; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium chromium-driver; \
		else \
			echo "Chromium is missing and cannot be installed here: sudo apt-get install -y chromium chromium-driver"; \
		fi; \
	fi
	$(TEST_ENV) $(BIN)/python -m pytest -m browser tests

clean:
	rm -rf $(VENV) demo-work build *.egg-info
