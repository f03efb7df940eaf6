# factgate — `make` alone lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-10s %s\n", $$1, $$2}'

# The install uses uv because it resolves and links the ~90 packages in a few seconds where pip takes over a
# minute on this machine, and the install is part of every CI run from a fresh clone. The venv is made
# without pip (ensurepip alone took 2.5 s) and the Python that makes it installs uv into it (`pip --python`,
# pip 22.3 or later); add packages to it with `.venv/bin/uv pip install`. If uv cannot be had, pip does the
# same install in a venv with pip (INSTALLER=pip forces that). Installers and the build backend talk a lot;
# the whole log is kept in $(VENV)/install.log and printed only when it fails.
INSTALLER ?= uv
# Bytecode: an environment with PYTHONDONTWRITEBYTECODE set (this machine's has it) makes every Python
# process compile every module it imports from source, every time — `import workers.app` took 3.5-4.3 s
# here instead of 1.4 s, and the suite starts dozens of workers, CLIs and servers. So the install compiles
# the installed packages (`--compile-bytecode`; pip compiles by default), and make's own commands may write
# the bytecode of this project's modules and pytest's rewritten tests (__pycache__/, ignored by git).
unexport PYTHONDONTWRITEBYTECODE
$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || if [ "$(INSTALLER)" = uv ]; then $(PYTHON) -m venv --without-pip $(VENV); \
		else $(PYTHON) -m venv $(VENV); fi
	@echo "installing factgate and its dev tools into $(VENV) with $(INSTALLER) (log: $(VENV)/install.log)"
	@{ if [ "$(INSTALLER)" = uv ] && $(PYTHON) -m pip --python $(PY) install -q uv; then \
		$(VENV)/bin/uv pip install --compile-bytecode --python $(PY) -e '.[dev]'; \
	else \
		{ $(PY) -m pip --version || $(PY) -m ensurepip; } \
		&& $(PY) -m pip install --upgrade pip && $(PY) -m pip install -e '.[dev]'; \
	fi; } > $(VENV)/install.log 2>&1 \
		|| { cat $(VENV)/install.log; echo "install failed; the log is $(VENV)/install.log" >&2; exit 1; }
	@touch $@

install: $(VENV)/.installed ## create the virtual environment and install factgate with dev tools

services: ## start the local PostgreSQL and Redis if installed but stopped
	@bash scripts/services.sh

browser: ## install Debian's chromium for the end-to-end tests (once; needs root or sudo)
	@bash scripts/browser.sh

# The whole suite runs in one pytest on $(TEST_WORKERS) pytest-xdist workers (most of its time is spent waiting
# on jobs, workers and the browser: on two cores four workers beat three, and three beat two), and prints the
# slowest tests. It runs without coverage: branch coverage (pytest-cov on Python 3.11, which has no
# sys.monitoring core) took the suite from 191 s to 306 s of wall time on the 2-core CI machine and roughly
# doubled its CPU. `make coverage` runs the same suite with it and prints the summary.
# No test needs the machine to itself: the one that measures two keys' rate paces them with room for a loaded
# machine's jitter (tests/integration/test_queue_tenants.py), and how close the limiter gets to the upstream
# limit is bench/at_limit.py's figure. TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 4
# Whole modules to whichever worker is free, in an order that keeps about half the workers on modules that
# mostly wait on a clock and the rest on modules that use the CPU (tests/schedule.py).
XDIST_ARGS ?= --dist loadfile --no-loadscope-reorder
COVERAGE_ARGS ?= --cov --cov-report=term

test: install services browser warm ## install, start services and the browser, run the whole suite
	$(PY) -m pytest -n $(TEST_WORKERS) $(XDIST_ARGS) --durations=25 -p no:cov $(PYTEST_ARGS)

coverage: install services browser warm ## the whole suite with branch coverage and its summary (slower)
	$(PY) -m pytest -n $(TEST_WORKERS) $(XDIST_ARGS) --durations=25 $(COVERAGE_ARGS) $(PYTEST_ARGS)

# A fresh clone has no bytecode for this project's modules nor for pytest's rewritten test modules, and the
# four workers of `make test` would each compile all of it at the same moment (13 s of the run's wall time
# here). scripts/warm_bytecode.py writes it first, on every core, in about 1 s; a tree that has run the tests
# before (tests/__pycache__ exists) skips it.
warm: install ## write a fresh clone's bytecode once, on every core (make test does this first)
	@[ -d tests/__pycache__ ] || $(PY) scripts/warm_bytecode.py

# The unit tests are pure and CPU-bound: one xdist worker per core (two here), without coverage (`make coverage`
# measures it), so the loop of editing and checking stays near 13 s here.
UNIT_WORKERS ?= 2
unit: install ## the unit tests only: no service, no browser, no subprocess
	$(PY) -m pytest tests/unit -q -n $(UNIT_WORKERS) -p no:cov $(PYTEST_ARGS)

lint: install ## ruff, mypy (strict) and the import contracts (lint-imports)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

hooks: install ## install the pre-commit hooks (.pre-commit-config.yaml) into this clone
	@if [ -x $(VENV)/bin/uv ]; then $(VENV)/bin/uv pip install -q --python $(PY) pre-commit; \
		else $(PY) -m pip install -q pre-commit; fi
	$(VENV)/bin/pre-commit install

fmt: install ## format and autofix
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

AXE_VERSION ?= 4.14.1
AXE_DIR := tests/e2e/vendor

axe: ## refresh the vendored axe-core (tests/e2e/vendor) from npm: make axe AXE_VERSION=x.y.z
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT \
		&& (cd "$$tmp" && npm pack --silent axe-core@$(AXE_VERSION) >/dev/null && tar xzf axe-core-$(AXE_VERSION).tgz) \
		&& cp "$$tmp/package/axe.min.js" "$$tmp/package/LICENSE" "$$tmp/package/LICENSE-3RD-PARTY.txt" $(AXE_DIR)/ \
		&& head -1 $(AXE_DIR)/axe.min.js && sha256sum $(AXE_DIR)/axe.min.js \
		&& echo "update the version and sha256 in $(AXE_DIR)/README.md"

demo: install ## the 24 reference claims, then the example answers' citations, embedded (no services, no key)
	@env -u DATABASE_URL -u REDIS_URL -u FACTGATE_URL $(VENV)/bin/factgate check examples/claims.jsonl --mode both
	@echo
	@env -u DATABASE_URL -u REDIS_URL -u FACTGATE_URL $(VENV)/bin/factgate citations examples/citations.jsonl

# The multi-host fault drill (scripts/drill/run.py, docs/operations.md "The multi-host drill"): network
# namespaces as hosts, its own Postgres and Redis, one fault per job; one line per scenario, non-zero exit
# when one does not hold; Redis runs with Sentinels (one plain server with --quick). Needs root and Debian's
# iptables (installed here when missing, by scripts/apt_install.sh: one apt at a time, as CI installs chromium
# at the same moment).
# DRILL_ARGS=--quick runs the short smoke scenario alone; DRILL_ARGS="--only slow-link" picks scenarios.
DRILL_ARGS ?=
drill: install ## the multi-host fault drill (root; ~6 min; DRILL_ARGS=--quick: the ~1 min smoke run)
	@command -v iptables >/dev/null || bash scripts/apt_install.sh iptables >/dev/null
	$(PY) -m scripts.drill.run $(DRILL_ARGS)

.PHONY: help install services browser warm test coverage unit lint hooks fmt demo axe drill
