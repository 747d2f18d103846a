# Fresh machine: `make demo` (install + the main job) and `make test` (install everything, start the
# real services the tests need, run every test). The Makefile creates and owns its virtualenv.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
EXTRAS := mcp,explore,fastmcp,redis,openfeature,otel,pydantic-ai,openai-agents,bench,dev

.PHONY: all install install-core node services demo test check lint typecheck pytest bench bench-peers clean

all: test

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# Core + the MCP SDK and the explorer page: enough for the demo.
$(VENV)/.core: $(PY) pyproject.toml
	$(PIP) install --quiet -e ".[mcp,explore]"
	touch $@

# Everything: every extra, the test and bench tools, and the example custom-resolver package.
$(VENV)/.all: $(PY) pyproject.toml examples/custom_resolver/pyproject.toml
	$(PIP) install --quiet -e ".[$(EXTRAS)]"
	$(PIP) install --quiet -e examples/custom_resolver
	touch $(VENV)/.core $@

install-core: $(VENV)/.core
install: $(VENV)/.all node services

# npm, pinned in package-lock.json: oidc-provider (real signed tokens), the MCP Inspector CLI, the
# third-party servers the gateway is tested in front of (server-everything, -filesystem, -memory), and
# the MCP conformance suite with the Node 22 it needs (npm `node`, used only when running the suite).
node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
node: node_modules/.package-lock.json

# Debian's redis-server and haproxy; the tests start and stop their own instances on 127.0.0.1.
SERVICES := redis-server haproxy chromium prometheus
services:
	@missing=""; for s in $(SERVICES); do command -v $$s >/dev/null 2>&1 || missing="$$missing $$s"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing (Debian)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	@redis-server --version
	@haproxy -v | head -1
	@prometheus --version 2>&1 | head -1

demo: install-core
	$(VENV)/bin/mcp-preconditions demo

lint: $(VENV)/.all
	$(VENV)/bin/ruff check src tests bench examples

typecheck: $(VENV)/.all
	$(VENV)/bin/mypy --strict src bench

# pytest exits 5 when no test ran: that is a failure here too. Most of the run waits on the servers
# the tests start, so test files run in parallel (pytest-xdist, a worker per core, at most 4; each
# worker starts its own session services on free ports, and no test looks beyond its own processes).
pytest: install
	$(VENV)/bin/pytest -q -ra -n auto --maxprocesses 4 --dist loadfile --durations=15

test: install lint typecheck pytest

# For `make bench` only: the proxies bench/bench_gateway.py compares the gateway with. npm mcp-proxy and
# supergateway pinned in bench/peers/package-lock.json (a package of their own, so `make test` does not
# install them); PyPI mcp-proxy needs mcp<2, so it gets a virtualenv of its own, pinned by
# bench/peers/requirements.txt.
PEERS_VENV := .run/peers/mcp-proxy
bench/peers/node_modules/.package-lock.json: bench/peers/package.json bench/peers/package-lock.json
	npm ci --prefix bench/peers --no-audit --no-fund --loglevel=error
$(PEERS_VENV)/.installed: bench/peers/requirements.txt
	$(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/pip install --quiet -r bench/peers/requirements.txt
	touch $@
bench-peers: bench/peers/node_modules/.package-lock.json $(PEERS_VENV)/.installed

bench: install bench-peers
	$(PY) -m bench.run

clean:
	rm -rf $(VENV) node_modules bench/peers/node_modules .run/peers .pytest_cache .mypy_cache .ruff_cache .hypothesis
