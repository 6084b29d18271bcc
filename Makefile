# meshplan: `make serve` runs the service on SQLite; `make test` runs everything CI runs.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install serve test lint typecheck imports pytest bench clean system-deps

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch is pinned to the CPU build that lies on this machine's disk (a looser pin can pull
# a multi-GB CUDA build); it is only needed by the profiler extra and the tests, and is
# pinned on the same line as the frameworks extra (torchtitan, DeepSpeed, megatron-core).
$(STAMP): pyproject.toml setup.py planner/schedules/_kernel.c planner/cost/_sums.c | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,profiler,frameworks]' torch==2.13.0
	touch $(STAMP)

install: $(STAMP)

# Debian's chromium, for the tests that load the plan pages in a headless browser.
system-deps:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

serve: $(STAMP)
	$(BIN)/meshplan serve --dev-open

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check planner

typecheck: $(STAMP)
	$(BIN)/mypy planner api profiler

imports: $(STAMP)
	$(BIN)/lint-imports

pytest: $(STAMP) system-deps
	$(BIN)/pytest -q

test: lint typecheck imports pytest

bench: $(STAMP)
	$(BIN)/python bench/megatron_table1.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
