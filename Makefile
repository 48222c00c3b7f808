# The two commands of the README, and a few helpers. Each installs what it needs first.
.PHONY: demo test lint bootstrap clean

bootstrap:
	@scripts/bootstrap.sh

demo: bootstrap
	.venv/bin/hailstorm demo

# Lint, types, then every test: the unit tests (pure, CPU-bound) on every core, then the
# integration tests against real services started by their test session, one at a time (they
# share that stack). pytest exits 5 when it collects nothing, which fails this target.
PYTEST = PYSPARK_PYTHON=$(CURDIR)/.venv/bin/python .venv/bin/python -m pytest -q --timeout=900
test: bootstrap lint
	$(PYTEST) -n auto --durations=10 tests/unit
	$(PYTEST) --durations=15 tests/integration

lint: bootstrap
	.venv/bin/ruff check hailstorm topologies tests bench scripts
	.venv/bin/mypy

clean:
	rm -rf .venv .hailstorm .pytest_cache .mypy_cache .ruff_cache .hypothesis
