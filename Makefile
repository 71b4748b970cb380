# The two commands of the README:  `make run`  and  `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := flock /tmp/pip.lock $(VENV)/bin/pip
# This machine's pip config names local package folders that may not exist; hide those warnings.
QUIET := 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }

.PHONY: run lab-prometheus demo-cycle test test-slow test-services setup setup-ml demo-model lint docs

# Every install takes its versions from constraints.txt (the lock of the whole venv).
$(VENV)/.core-installed: pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade -c constraints.txt pip $(QUIET)
	$(PIP) install -q -c constraints.txt -e ".[dev,otel,bench]" $(QUIET)
	touch $@

# Code verifiers run untrusted code under bubblewrap and refuse to run it without (design.md, 8).
setup: $(VENV)/.core-installed
	@command -v bwrap >/dev/null 2>&1 || { \
		SUDO=""; [ "$$(id -u)" = 0 ] || SUDO="sudo -n"; export DEBIAN_FRONTEND=noninteractive; \
		$$SUDO apt-get install -y -q bubblewrap >/dev/null 2>&1 || \
		{ $$SUDO apt-get update -q >/dev/null && $$SUDO apt-get install -y -q bubblewrap >/dev/null; } || true; }
	@command -v bwrap >/dev/null 2>&1 || \
		echo "WARNING: bubblewrap (bwrap) is not installed: python_tests verifiers fail every answer." >&2

# bfcl-eval: BFCL's own checker, which tests/training/test_bfcl_checker.py compares ours with; --no-deps,
# since its requirements are every provider's SDK and only the checker is imported. Installed last: pip
# warns about its missing requirements at every later install.
setup-ml: setup
	bash infra/install_ml.sh $(VENV)
	$(PIP) install -q --no-deps -c constraints.txt bfcl-eval $(QUIET)

demo-model: setup-ml
	$(PY) infra/build_demo_model.py

## Set up everything and run the service (web + worker + local vLLM student) with demo data.
run: demo-model
	$(PY) manage.py serve

## A real Prometheus on the local lab (Debian: apt-get install -y prometheus), with the lab's alert rules;
## `make run` starts it too when it is installed. Point the agent at it: SKILLGATE_PROMETHEUS_URL.
lab-prometheus: setup
	$(PY) manage.py lab_prometheus

## With `make run` serving (another terminal): failing calls -> a cycle on the worker -> an admitted adapter.
demo-cycle: setup-ml
	$(PY) manage.py demo_cycle

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy .
	$(VENV)/bin/lint-imports --no-cache  # the dependency direction, between apps and inside routing (design.md 5)
	# The house's own rules: the endpoint table agrees with the ledger and the OpenAPI document, no module over
	# 450 lines, every model change has its migration, function-local project imports say why.
	$(VENV)/bin/pytest -q -p no:randomly -p no:cacheprovider tests/routing/test_endpoint_table.py \
		tests/core/test_module_size.py tests/core/test_migrations.py tests/core/test_local_imports.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet  # the docs site (mkdocs.yml): no broken link, page or include

## Serve the docs site (docs/, mkdocs.yml) with live reload on http://127.0.0.1:8002.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

## Set up everything and run lint, types and the default test suite (everything but the slow tests), on
## the embedded default or on the servers the environment names; one pytest-xdist worker per core.
test: setup-ml lint
	$(VENV)/bin/pytest -m "not slow" -n auto

## The slow tests: every lab fault, vLLM servers, killed workers, browser runs on the lab. They mostly wait
## on what they start, so two pytest-xdist workers whatever the cores (SLOW_WORKERS=0 runs them in one
## process), each taking a test module whole, the vLLM and training ones together on one of them
## (tests/support/xdist_groups.py). The 20 slowest are listed, to keep CI under its 45 minutes.
SLOW_WORKERS ?= 2
SLOW := $(VENV)/bin/pytest -m slow -n $(SLOW_WORKERS) --dist loadgroup --durations=20
test-slow: setup-ml
	$(SLOW)

## CI's second run, on PostgreSQL + Redis (.ci/run sets them): the slow tests, and the default tests
## marked `postgres` (what differs by database) again.
test-services: setup-ml
	$(VENV)/bin/pytest -m "postgres and not slow" -n auto
	$(SLOW)
