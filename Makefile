# Set up a virtual environment and run the demo or the tests.
#   make demo              toy corpus -> train lstm_base, lstm_fact_bias, transformer_fact_bias -> BLEU / speaker-word table
#   make test              unit and integration tests (10-11 minutes on 2 cores)
#   make test-slow         the slow tier: trains on the toy corpus and checks that the biases learn
#   make test-browser      the service's page in a headless Chromium (installed with apt-get when missing and possible)
# torch is installed first, pinned, so that no CUDA build is pulled on a CPU machine;
# choose another with e.g. `make test TORCH="torch==2.6.0 --index-url https://download.pytorch.org/whl/cu124"`.

PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin
# one thread per process: the tests run two workers on two cores
TEST_ENV := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

.PHONY: install demo test test-slow test-browser clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip "setuptools>=64" wheel
	$(BIN)/pip install $(TORCH) cython numpy
	# fairseq builds C++/Cython extensions against the torch above (no isolated build, no second torch)
	$(BIN)/pip install --no-build-isolation -e ".[test]"
	touch $@

demo: install
	$(BIN)/fairseq-speaker-demo --workdir demo-work

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
