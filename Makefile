# Everything runs from the virtual environment at .venv/, created on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: setup test lint typecheck unit crd bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	rm -f $(VENV)/.installed-* && touch $@

## test: lint, type-check and run every test suite
test: lint typecheck unit

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: setup
	$(BIN)/mypy runtime/specinfer_runtime operator/specinfer_operator tests

unit: setup
	$(BIN)/pytest tests/unit

## crd: regenerate crds/ from the API models
crd: setup
	$(BIN)/specinfer crd > crds/speculativeinference.yaml

## bench: validation and rendering throughput
bench: setup
	$(BIN)/python bench/validate_render.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
