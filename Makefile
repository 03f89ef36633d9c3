# The two commands the README starts with:  make demo  and  make test.
# Both install whatever is missing first (Debian packages, then .venv).

SHELL := /bin/sh
VENV  := .venv
# Debian's interpreter: it is the one that sees the python3-mininet package.
SYSTEM_PYTHON := /usr/bin/python3
BIN   := $(VENV)/bin

.PHONY: install demo test lint clean-net help

help:
	@echo "make demo     install what is missing, then run the demo (32 PlanetLab hosts)"
	@echo "make test     install what is missing, then run lint (ruff, import contracts, mypy --strict on node/) and the whole test suite"
	@echo "make install  only the set-up: system packages and $(VENV)/"
	@echo "make clean-net  remove namespaces, links and processes a killed run left behind"

install: system-deps $(VENV)/.installed image native

# The delay engine's compiled data path and the prober's loop (each falls back to
# its Python version, and says so, without them).
.PHONY: native
native: testbed/net/delay/_fastpath.so testbed/net/_pinger.so

testbed/net/_pinger.so: testbed/net/pinger.c
	gcc -O2 -g -Wall -Wextra -Werror -shared -fPIC -o $@ $<

testbed/net/delay/_fastpath.so: testbed/net/delay/fastpath.c
	gcc -O2 -g -Wall -Wextra -Werror -shared -fPIC -o $@ $< -lm -lpthread

# The container hosts' Debian image (built once; nothing when it exists).
.PHONY: image
image: system-deps
	@scripts/build-image.sh

.PHONY: system-deps
system-deps:
	@scripts/install-system-deps.sh

$(VENV)/.installed: pyproject.toml Makefile
	@test -x $(BIN)/python || $(SYSTEM_PYTHON) -m venv --system-site-packages $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --config-settings editable_mode=compat -e '.[test,cluster]'
	@touch $@

demo: install
	$(BIN)/testbed demo

# TESTBED_REQUIRE_NETNS turns "skipped: needs root" into a failure: here the
# namespace tests must run for real. TEST_WORKERS=2 runs two pytest-xdist workers (each
# module on one worker, the namespace tests all on the same one, the longest work first:
# tests/conftest.py). Two suites side by side with two workers each failed on time bounds
# (four busy workers on two cores, README "Development"), so one process stays the default.
TEST_WORKERS ?= 0
test: install lint
	TESTBED_REQUIRE_NETNS=1 $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder --durations=25

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy --strict node

clean-net: install
	$(BIN)/testbed clean
