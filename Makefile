# The two commands from README.md: `make demo` and `make test`; both set up first.
PYTHON ?= python3

.PHONY: setup demo test clean

setup:
	@bash scripts/setup.sh

demo: setup
	$(PYTHON) -m lockdown bench wordpress

test: setup
	$(PYTHON) -m pytest -q tests

clean:
	rm -rf build *.egg-info .pytest_cache .setup-stamp
