# Fresh machine: `make demo` (install + the main job) and `make test` (install everything, start the
# real services the tests need, run every test). The Makefile creates and owns its virtualenv.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
EXTRAS := mcp,explore,fastmcp,redis,openfeature,otel,pydantic-ai,openai-agents,bench,dev

.PHONY: all install install-core node services demo test check lint typecheck pytest pytest-lowest coverage bench bench-peers clean side-image

all: test

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# Core + the MCP SDK and the explorer page: enough for the demo.
$(VENV)/.core: $(PY) pyproject.toml
	$(PIP) install --quiet -e ".[mcp,explore]"
	touch $@

# Everything: every extra, the test and bench tools, and the example custom-resolver package, each at
# the newest version the registry serves that pyproject.toml's ranges admit (eager: an existing venv
# moves up too), so `make test` is the newest pass (SPEC §9).
$(VENV)/.all: $(PY) pyproject.toml examples/custom_resolver/pyproject.toml
	$(PIP) install --quiet --upgrade --upgrade-strategy eager -e ".[$(EXTRAS)]"
	$(PIP) install --quiet -e examples/custom_resolver
	touch $(VENV)/.core $@

install-core: $(VENV)/.core
# The three installers run side by side (pip, npm, apt: mostly downloads).
install:
	@$(MAKE) --no-print-directory -j3 $(VENV)/.all node services

# npm, pinned in package-lock.json: oidc-provider (real signed tokens), the MCP Inspector CLI, the
# third-party servers the gateway is tested in front of (server-everything, -filesystem, -memory), and
# the MCP conformance suite with the Node 22 it needs (npm `node`, used only when running the suite).
node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
node: node_modules/.package-lock.json

# The MCP conformance suite's client leg (SPEC §17; docs/gateway-conformance.md, "As a client"): the
# gateway as the client of every client scenario, `auth/*` included, at each frozen requirement set,
# the suite's own `Total:` line for each. `make conformance` runs it before the server leg; `make test`
# runs the same (tests/integration/test_conformance_client.py); the document's client tables are
# written by `$(PY) -m tests.fixtures.conformance_client_leg --doc docs/gateway-conformance.md`.
.PHONY: conformance conformance-client
conformance: conformance-client
conformance-client: $(VENV)/.all node
	$(PY) -m tests.fixtures.conformance_client_leg

# Debian's redis-server, haproxy, Chromium and Prometheus (the tests start and stop their own
# instances on 127.0.0.1), and podman, runc and mmdebstrap for the image tests (`make image`): one
# apt-get for them all (two would wait on each other's lock).
SERVICES := redis-server haproxy chromium prometheus podman runc mmdebstrap
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

# The MCP conformance suite (npm, pinned in package.json) on the gateway, each leg at each frozen
# requirement set, the suite's own `Total: N passed, M failed` line for each: as a server, in front
# of tests/fixtures/conformance_server.py (alone, and as the gateway's stdio and HTTP upstream).
# `make test` runs the same (tests/integration/test_conformance.py); docs/gateway-conformance.md's
# table is written by `$(PY) -m tests.fixtures.conformance --doc docs/gateway-conformance.md`.
.PHONY: conformance
conformance: $(VENV)/.all node
	$(PY) -m tests.fixtures.conformance

lint: $(VENV)/.all
	$(VENV)/bin/ruff check src tests bench examples .ci

typecheck: $(VENV)/.all
	$(VENV)/bin/mypy --strict src bench tests .ci/lowest_constraints.py .ci/slowest.py

# The two tiers (SPEC §9), each a pytest run of its own, the in-process one first: `-m "not interop"`
# (the gateway, the guard and the adapters in the test's own event loop) and `-m interop` (real
# processes and components: tests/fixtures/tiers.py says which). pytest exits 5 when no test ran: that
# is a failure here too, for either tier. Test files run in parallel (pytest-xdist, a worker per core,
# at most 4; each worker starts its own session services on free ports, and no test looks beyond its
# own processes). Each tier keeps its junit file in .run/; the files and tests that took longest are
# printed at the end (.ci/slowest.py).
PYTEST_RUN := $(VENV)/bin/pytest -q -ra -n auto --maxprocesses 4 --dist loadfile
JUNIT      := .run/junit-default.xml .run/junit-interop.xml
pytest: install
	@mkdir -p .run && rm -f $(JUNIT)
	@$(PYTEST_RUN) -m "not interop" --junitxml=.run/junit-default.xml; default=$$?; \
	 $(PYTEST_RUN) -m interop --junitxml=.run/junit-interop.xml; interop=$$?; \
	 $(PY) .ci/slowest.py 30 $(JUNIT); \
	 echo "default tier: exit $$default; interop tier: exit $$interop"; \
	 [ $$default -eq 0 ] && [ $$interop -eq 0 ]

# Line and branch coverage of src/ over the whole suite, in the test processes and every Python process
# they start (pyproject.toml's [tool.coverage.run]: the subprocess patch, SIGTERM-safe). Not part of
# `make test` (it slows every process down). A failing test does not stop the report; the data file is
# named by an absolute path, which the processes started from other folders inherit.
COVERAGE_DATA := $(CURDIR)/.run/coverage/.coverage
coverage: install
	@rm -rf .run/coverage && mkdir -p .run/coverage
	-COVERAGE_FILE=$(COVERAGE_DATA) $(PYTEST_RUN) --cov --cov-report= --junitxml=.run/coverage/junit.xml
	COVERAGE_FILE=$(COVERAGE_DATA) $(VENV)/bin/coverage report > .run/coverage/report.txt
	@tail -1 .run/coverage/report.txt

# -- The gateway's container image (Containerfile, docs/deploy.md) --------------------------------
# `make image` builds localhost/mcp-preconditions:dev with podman (installed from Debian with runc
# and mmdebstrap when missing). BASE, the image it builds on, is made here from Debian's packages,
# so no container registry is needed; a public Python 3.11 image works the same:
# `make image BASE=docker.io/library/python:3.11-slim`. The dependencies are fetched once per base
# and pyproject.toml into a wheelhouse, by the base's own Python (deploy/image/wheelhouse.py: each
# environment marker decided as in the image); the image is then built from it with no network.
# podman runs with deploy/image/containers.conf, as the image tests do.
IMAGE        := localhost/mcp-preconditions:dev
DEBIAN_BASE  := localhost/mcp-preconditions-base:bookworm
BASE         ?= $(DEBIAN_BASE)
IMAGE_EXTRAS := mcp,redis,otel
IMAGE_RUN    := .run/image
WHEELHOUSE   := $(IMAGE_RUN)/wheels/$(subst :,_,$(subst /,_,$(BASE)))
PODMAN       := CONTAINERS_CONF=$(CURDIR)/deploy/image/containers.conf podman
HOST_CA      := $(wildcard /etc/ssl/certs/ca-certificates.crt)

.PHONY: image image-tools image-base

image-tools:
	@missing=""; for t in podman runc mmdebstrap; do command -v $$t >/dev/null 2>&1 || missing="$$missing $$t"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing (Debian)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

# Debian bookworm's minbase with python3, python3-venv and ca-certificates; merged /usr made by
# mmdebstrap's hook rather than the usrmerge package (which pulls in perl); no documentation but the
# copyright files, no man pages, no translations. Kept, so a base removed by `podman rmi` comes back
# in seconds.
$(IMAGE_RUN)/rootfs.tar:
	@mkdir -p $(@D)
	mmdebstrap --quiet --format=tar --variant=minbase --include=python3,python3-venv,ca-certificates \
	  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
	  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
	  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
	  --dpkgopt='path-exclude=/usr/share/locale/*' \
	  bookworm $@.part
	mv $@.part $@

image-base: image-tools
	@if [ "$(BASE)" = "$(DEBIAN_BASE)" ] && ! $(PODMAN) image exists $(DEBIAN_BASE); then \
	  $(MAKE) --no-print-directory $(IMAGE_RUN)/rootfs.tar && \
	  $(PODMAN) import --quiet --change 'CMD ["python3"]' $(IMAGE_RUN)/rootfs.tar $(DEBIAN_BASE); \
	fi

$(WHEELHOUSE)/.done: pyproject.toml deploy/image/wheelhouse.py | image-base
	rm -rf $(@D) && mkdir -p $(@D)
	$(PODMAN) run --rm --network=host -v $(CURDIR)/$(@D):/wheels \
	  -v $(CURDIR)/pyproject.toml:/pyproject.toml:ro \
	  -v $(CURDIR)/deploy/image/wheelhouse.py:/wheelhouse.py:ro \
	  $(if $(HOST_CA),-v $(HOST_CA):/etc/ssl/host-ca.crt:ro -e PIP_CERT=/etc/ssl/host-ca.crt) \
	  $(BASE) python3 /wheelhouse.py $(IMAGE_EXTRAS)
	touch $@

image: image-base $(WHEELHOUSE)/.done
	$(PODMAN) build --format docker --network=none -v $(CURDIR)/$(WHEELHOUSE):/wheelhouse:ro \
	  --build-arg BASE=$(BASE) --build-arg EXTRAS=$(IMAGE_EXTRAS) \
	  --build-arg PIP_OPTIONS="--no-index --find-links=/wheelhouse" -t $(IMAGE) .
	@$(PODMAN) image list $(IMAGE)

# The lowest pass (SPEC §9): a second virtualenv with the lowest versions pyproject.toml's ranges
# allow for the core and LOWEST_EXTRAS (.ci/lowest_constraints.py turns their lower bounds into pip
# constraints; `dev`'s test tools, and `openfeature` and `otel`, which the test fixtures import, stay at
# their newest), rebuilt only when pyproject.toml changes. It runs the tests of the surface the
# extras' dependencies shape: the hosted adapters on the MCP SDK and fastmcp (in process, stdio, HTTP,
# tool names, fail-closed), the SDK's client adapter, pydantic-ai and the OpenAI Agents SDK, the gateway
# in front of SDK servers (bridging both protocol versions, live tool lists), httptools' parser under
# the gateway's listener, redis-py, and the wheel installed beside these very SDKs without replacing
# one. The rest of the suite runs on the newest only.
LOWEST        := .run/lowest
LOWEST_EXTRAS := mcp,explore,fastmcp,redis,pydantic-ai,openai-agents
LOWEST_TESTS  := tests/integration/test_mcp_inprocess.py tests/integration/test_mcp_stdio.py \
                 tests/integration/test_mcp_http.py tests/integration/test_mcp_fail_open.py \
                 tests/integration/test_mcp_tool_names.py tests/integration/test_mcp_call_handler.py \
                 tests/integration/test_hosted_sessions.py tests/integration/test_mcp_client.py \
                 tests/integration/test_agents_servers.py tests/integration/test_agents_pydantic_ai.py \
                 tests/integration/test_agents_openai.py tests/integration/test_gateway_calls.py \
                 tests/integration/test_gateway_bridging.py tests/integration/test_live_tools.py \
                 tests/integration/test_redis_state.py tests/integration/test_install_beside_sdks.py \
                 tests/unit/test_adapters_wire.py tests/unit/test_agents_adapters.py \
                 tests/unit/test_gateway_listener.py
$(LOWEST)/.installed: pyproject.toml .ci/lowest_constraints.py | $(VENV)/.all
	rm -rf $(LOWEST)
	$(PYTHON) -m venv $(LOWEST)
	$(LOWEST)/bin/python -m pip install --quiet --upgrade pip
	$(PY) .ci/lowest_constraints.py pyproject.toml $(LOWEST_EXTRAS) > $(LOWEST).constraints.txt
	$(LOWEST)/bin/pip install --quiet -c $(LOWEST).constraints.txt -e ".[$(LOWEST_EXTRAS),openfeature,otel,dev]"
	touch $@

pytest-lowest: install $(LOWEST)/.installed
	cat $(LOWEST).constraints.txt
	$(LOWEST)/bin/pytest -q -ra -n auto --maxprocesses 4 --dist loadfile -p no:cacheprovider $(LOWEST_TESTS)

# `make test`: lint, the types, the lowest pass's virtualenv and the image are made beside the main
# pytest run (their log follows it), which waits mostly on the servers it starts. The image tests
# build the image of this tree themselves (`make image`, tests/fixtures/containers.py) under the
# same lock file (.run/image.lock), so they find it built, or wait for the build in progress. Then
# the lowest pass. Any part failing fails `make test`.
SIDE_LOG := .run/make-test-side.log
side-image:
	@mkdir -p .run && flock .run/image.lock $(MAKE) --no-print-directory image
test: install
	@mkdir -p .run
	@( $(MAKE) --no-print-directory -j2 --output-sync=target lint typecheck $(LOWEST)/.installed side-image > $(SIDE_LOG) 2>&1; \
	   echo $$? > $(SIDE_LOG).rc ) & \
	$(MAKE) --no-print-directory pytest; tests=$$?; wait; \
	echo "-- lint, types, the lowest pass's virtualenv:"; cat $(SIDE_LOG); \
	[ $$tests -eq 0 ] && [ "$$(cat $(SIDE_LOG).rc)" = 0 ]
	@$(MAKE) --no-print-directory pytest-lowest

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
	rm -rf $(VENV) node_modules bench/peers/node_modules .run/peers $(LOWEST) $(LOWEST).constraints.txt .run/core-only .pytest_cache .mypy_cache .ruff_cache .hypothesis
