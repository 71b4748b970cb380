# The two commands of the README:  `make run`  and  `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := flock /tmp/pip.lock $(VENV)/bin/pip
# This machine's pip config names local package folders that may not exist; hide those warnings.
QUIET := 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }

.PHONY: run demo-cycle test test-slow setup setup-ml demo-model lint

$(VENV)/.core-installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip $(QUIET)
	$(PIP) install -q -e ".[dev]" $(QUIET)
	touch $@

setup: $(VENV)/.core-installed

setup-ml: setup
	bash infra/install_ml.sh $(VENV)

demo-model: setup-ml
	$(PY) infra/build_demo_model.py

## Set up everything and run the service (web + worker + local vLLM student) with demo data.
run: demo-model
	$(PY) manage.py serve

## With `make run` serving (another terminal): failing calls -> a cycle on the worker -> an admitted adapter.
demo-cycle: setup-ml
	$(PY) manage.py demo_cycle

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy .

## Set up everything and run lint, types and the default test suite (everything but the slow tests).
test: setup-ml lint
	$(VENV)/bin/pytest -m "not slow"

## The slow tests: every lab fault, vLLM servers, killed workers, browser runs on the lab (CI runs both).
test-slow: setup-ml
	$(VENV)/bin/pytest -m slow
