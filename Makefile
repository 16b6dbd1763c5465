# Cadence: two commands on a fresh machine.
#   make demo   create .venv, install everything, serve the browser demo (prints its URL)
#   make test   create or reuse .venv, install, lint (ruff, the import contract), type-check and
#               run the whole suite

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit clean chromium

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
		|| { echo "Cadence needs Python 3.11 or newer (PYTHON=$(PYTHON))"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
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
