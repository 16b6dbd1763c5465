# Cadence: two commands on a fresh machine.
#   make demo   create .venv, install everything, start the demo
#   make test   create or reuse .venv, install, lint, type-check and run the whole suite

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
		|| { echo "Cadence needs Python 3.11 or newer (PYTHON=$(PYTHON))"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(STAMP)

DEMO_CLIPS := tests/data/speech/wav16k/sb_spk2_snt4.wav tests/data/speech/wav8k/osr_us_0034_8k_s05.wav

# Until the browser demo lands, `demo` runs the most complete job that exists and says so:
# a two-turn conversation on real speech, in real time, with its latency report.
demo: $(STAMP)
	@echo "Cadence: the browser demo is not built yet; replaying a recorded caller instead."
	$(BIN)/cadence converse $(foreach clip,$(DEMO_CLIPS),--in $(clip)) --out runs/demo
	$(BIN)/cadence report runs/demo/traces.jsonl --out runs/demo/report
	@echo "The agent's audio: runs/demo/agent_*.wav; the latency report: runs/demo/report/report.md"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest

test: lint typecheck unit

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
