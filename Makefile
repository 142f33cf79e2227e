# The two commands a newcomer runs: `make demo` and `make test`. Each installs what it needs.
PY := .venv/bin/python

.PHONY: demo demo-ui test test-serial bootstrap bench lint

bootstrap:
	@bash scripts/bootstrap.sh

demo: bootstrap
	$(PY) scripts/demo.py

demo-ui: bootstrap
	$(PY) scripts/demo.py --ui

# The suite as two pytest sessions side by side (docs/testing.md); test-serial: one session.
test: bootstrap
	$(PY) scripts/run_tests.py

test-serial: bootstrap
	$(PY) -m pytest

bench: bootstrap
	$(PY) bench/launch.py
	$(PY) bench/feed.py
	$(PY) bench/recovery.py --target process
	$(PY) bench/recovery.py --target executor

lint: bootstrap
	$(PY) -m ruff check airflow_tfos tests bench scripts example_dags
