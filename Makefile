# The two commands of the README, and a few helpers. Each installs what it needs first.
.PHONY: demo test lint bootstrap clean

bootstrap:
	@scripts/bootstrap.sh

demo: bootstrap
	.venv/bin/hailstorm demo

# Lint, types, then every test (unit + integration against real services started by the
# test session). pytest exits 5 when it collects nothing, which fails this target.
test: bootstrap lint
	PYSPARK_PYTHON=$(CURDIR)/.venv/bin/python .venv/bin/python -m pytest -q --timeout=900 --durations=15 tests

lint: bootstrap
	.venv/bin/ruff check hailstorm topologies tests bench
	.venv/bin/mypy

clean:
	rm -rf .venv .hailstorm .pytest_cache .mypy_cache .ruff_cache .hypothesis
