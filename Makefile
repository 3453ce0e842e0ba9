# Allot: `make run` serves the demo; `make test` runs every test; `make bench` the benchmarks.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
HOST ?= 127.0.0.1
PORT ?= 8000
# The embedded default: SQLite under var/, no Redis, Celery tasks in-process.
RUN_ENV := DEBUG=1
# The demo's web server runs as in production, DEBUG off (the product's 404 and 403 pages, never Django's
# debug page), with a secret key made once for this checkout and kept in var/.
DEMO_SECRET := var/demo-secret-key
SERVE_ENV = DEBUG=0 SECRET_KEY="$$(cat $(DEMO_SECRET))"
# The public traces (never committed): ../shared/traces beside the checkout; ALLOT_TRACES set by the
# caller (CI does, when its clone is elsewhere) wins.
ALLOT_TRACES ?= $(abspath ../shared/traces)
export ALLOT_TRACES

.PHONY: run test bench install install-test chromium promtool lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed pyproject.toml
	$(PIP) install --quiet -e '.[test,bench]'
	touch $@

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test chromium promtool

# Browser tests drive Debian's Chromium; Playwright cannot download one here.
chromium:
	@if [ ! -x /usr/bin/chromium ]; then \
		echo "installing Debian's chromium for the browser tests"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get install -y -q chromium >/dev/null || { $$SUDO apt-get update -q && $$SUDO apt-get install -y -q chromium; }; \
	fi

# tests/deploy check the alert rules and /metrics with Debian's promtool (package prometheus; the service it
# installs is stopped and disabled: tests need only the tool).
promtool:
	@if ! command -v promtool >/dev/null; then \
		echo "installing Debian's prometheus for promtool"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get install -y -q --no-install-recommends prometheus >/dev/null || { $$SUDO apt-get update -q && $$SUDO apt-get install -y -q --no-install-recommends prometheus; }; \
		$$SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true; \
	fi

run: install
	$(RUN_ENV) $(PY) manage.py migrate --no-input -v 0
	$(RUN_ENV) $(PY) manage.py demo
	@mkdir -p $(dir $(DEMO_SECRET)); test -s $(DEMO_SECRET) || $(PY) -c "import secrets; print(secrets.token_urlsafe(50))" > $(DEMO_SECRET)
	@echo
	@echo "Allot is at http://$(HOST):$(PORT)/  (API docs: http://$(HOST):$(PORT)/api/docs/)"
	@echo "Demo logins, password allot-demo: alice, bob, carol, dan, erin (researchers),"
	@echo "  pat, lee, mia (managers), olga (on-call), admin (admin). Ctrl-C stops."
	@echo "The scheduler ticks in the background and submits a steady demo workload."
	@echo
	@$(RUN_ENV) $(PY) manage.py run_scheduler --demo-load & scheduler=$$!; \
	trap 'kill $$scheduler 2>/dev/null; wait $$scheduler 2>/dev/null' EXIT INT TERM; \
	$(SERVE_ENV) $(PY) manage.py runserver --noreload $(HOST):$(PORT)

test: install-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/pytest $(PYTEST_ARGS)

bench: install-test
	$(PY) bench/run_all.py

lint: install-test
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) var staticfiles .pytest_cache .hypothesis
