# The two commands from README.md: `make demo` and `make test`; both set up first.
PYTHON ?= python3

.PHONY: setup demo test clean

setup:
	@bash scripts/setup.sh

# The main job on the built-in default target: minicms with every pathology switched on.
DEMO_OUT ?= $(or $(LOCKDOWN_HOME),$(HOME)/.local/share/lockdown)/demo/$(shell date +%Y%m%d-%H%M%S)

demo: setup
	$(PYTHON) -m lockdown run minicms -o "$(DEMO_OUT)"
	@echo "demo: outputs in $(DEMO_OUT) (findings.json, findings/*.md, bundle/, bench.json)"

test: setup
	$(PYTHON) -m pytest -q --durations=12 tests

clean:
	rm -rf build *.egg-info .pytest_cache .setup-stamp
