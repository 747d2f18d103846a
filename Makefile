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

test: install image lint typecheck pytest

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
