# The two commands: `make run` starts everything, `make test` runs the whole suite.
# Both install into .venv first; the install is a no-op while nothing it depends on changed.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.stamp-install
# The dashboard's htmx, from the npm registry at install time (never committed).
HTMX_VERSION := 2.0.11
HTMX_STAMP := static/vendor/.stamp-htmx-$(HTMX_VERSION)
# Its idiomorph extension: polls morph what changed, keeping focus and scroll.
IDIOMORPH_VERSION := 0.8.0
IDIOMORPH_STAMP := static/vendor/.stamp-idiomorph-$(IDIOMORPH_VERSION)
# axe-core, for the browser tests only (never served): Playwright injects it into every
# dashboard page and the tests assert it finds no accessibility violation.
AXE_VERSION := 4.14.1
AXE_STAMP := tests/browser/vendor/.stamp-axe-$(AXE_VERSION)

.PHONY: run test chaos install assets lint services browser faketime clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Reinstall only when the dependency list changes: a running test imports from .venv.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

$(HTMX_STAMP):
	@bash scripts/fetch-htmx $(HTMX_VERSION)

$(IDIOMORPH_STAMP):
	@bash scripts/fetch-idiomorph $(IDIOMORPH_VERSION)

$(AXE_STAMP):
	@bash scripts/fetch-axe $(AXE_VERSION)

assets: $(HTMX_STAMP) $(IDIOMORPH_STAMP) $(AXE_STAMP)

run: install assets
	$(BIN)/python -m app.launcher

services:
	@bash scripts/ensure-services

browser:
	@bash scripts/ensure-browser

faketime:
	@bash scripts/ensure-faketime

test: install assets services browser faketime
	@bash scripts/run-tests

# The fault run at scale (tests/jobs/test_chaos_scale.py, the run in tests/chaos/run.py):
# 10,000 messages, 20 kills and every other fault; `make test` runs it at 1,000.
chaos: install services
	$(BIN)/pytest -p no:xdist -m chaos -s tests/jobs/test_chaos_scale.py

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) instance static/vendor tests/browser/vendor
