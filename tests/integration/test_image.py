"""The container image (`make image`) as an operator runs it: the gateway in a container (read-only,
no capabilities, as the Kubernetes manifests run it) in front of an MCP SDK server on the host,
called through the MCP SDK's client over HTTP with real tokens from the session's oidc-provider. An
allowed call works, a denied call never reaches the server (its own log says so), `/readyz`,
`/metrics` and the image's HEALTHCHECK answer; the image runs as a non-root user and has no
compiler and no pip.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.fixtures.containers import (
    BUILD_TIMEOUT,
    IMAGE,
    Container,
    gateway_container,
    podman,
    require_image,
)
from tests.fixtures.gateway_upstream import ECHO_RESULT, read_log, upstream_http
from tests.fixtures.mcp_servers import bearer
from tests.fixtures.oidc import AUDIENCE, OidcServer
from tests.fixtures.ports import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(BUILD_TIMEOUT)]  # the first test may build
POLICY = "/etc/mcp-preconditions/policy.toml"
HAND_MADE = 309_000_000  # issue 34: Debian's minbase, python3-venv and the [mcp] extra, by hand
COMPILERS = ("cc", "gcc", "g++", "c++", "clang", "tcc", "ld", "as", "make")


@dataclass(frozen=True)
class Deployed:
    container: Container
    upstream_log: Path  # every request the server on the host received


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory, oidc_server: OidcServer) -> Iterator[Deployed]:
    tmp = tmp_path_factory.mktemp("image")
    policy, log = tmp / "policy.toml", tmp / "upstream.jsonl"
    policy.write_text(f'[auth]\nissuer = "{oidc_server.issuer}"\naudience = "{AUDIENCE}"\n'
                      f'jwks_uri = "{oidc_server.jwks_uri}"\n'
                      '[tools.echo]\nrequirements = ["auth:claim:role:mission_control"]\n',
                      encoding="utf-8")
    with upstream_http(log) as upstream, \
            gateway_container(free_port(), ["--policy", POLICY, "--upstream-url", upstream.url],
                              mounts={policy: POLICY}) as container:
        yield Deployed(container, log)


async def call(url: str, token: str, mode: str) -> dict[str, Any]:
    async with Client(streamable_http_client(url, http_client=bearer(token)), mode=mode) as client:
        result = await client.call_tool("echo", {"text": "hi"})
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


@pytest.mark.parametrize("mode", ["legacy", "auto"])  # a 2025-11-25 session; 2026-07-28 requests
async def test_an_allowed_call_works_and_a_denied_one_never_reaches_the_server(
        deployed: Deployed, oidc_server: OidcServer, mode: str) -> None:
    before = len(read_log(deployed.upstream_log))
    role, observer = oidc_server.token(), oidc_server.token("observer", scope="mission:read")
    allowed = await call(deployed.container.url + "/mcp", role, mode)
    denied = await call(deployed.container.url + "/mcp", observer, mode)
    assert allowed["structuredContent"] == ECHO_RESULT["structuredContent"]
    assert denied["isError"] is True
    assert denied["structuredContent"] == {"error": "unmet_requirements", "tool": "echo",
                                           "unmet": ["auth:claim:role:mission_control"],
                                           "withheld": 0}
    entries = read_log(deployed.upstream_log)[before:]
    assert [e["params"]["name"] for e in entries if e["method"] == "tools/call"] == ["echo"]
    assert entries and all("authorization" not in e["headers"] for e in entries)
    logs = deployed.container.logs()
    assert role not in logs and observer not in logs  # no token in the container's output


def test_readyz_metrics_and_the_image_healthcheck_answer(deployed: Deployed) -> None:
    ready = httpx.get(deployed.container.url + "/readyz", timeout=10)
    assert ready.status_code == 200
    assert ready.json()["status"] == "ready"
    assert ready.json()["servers"] == {"upstream": {"connected": True, "tools_loaded": True}}
    metrics = httpx.get(deployed.container.url + "/metrics", timeout=10)
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain")
    assert 'mcp_preconditions_upstream_up{server="upstream"} 1.0' in metrics.text
    assert re.search(r'mcp_preconditions_decisions_total\{result="denied",server="upstream",'
                     r'tool="echo"\} [0-9.]+', metrics.text), metrics.text[:2000]
    # The image's own HEALTHCHECK, run by podman, and its command: it fails where nothing answers.
    health = podman("healthcheck", "run", deployed.container.name)
    assert health.returncode == 0, health
    assert deployed.container.state()["Health"]["Status"] == "healthy"
    check = json.loads(podman("image", "inspect", "--format", "{{json .Config.Healthcheck}}", IMAGE).stdout)
    assert check["Test"][0] == "CMD"
    assert deployed.container.exec(*check["Test"][1:]).returncode == 0
    refused = podman("exec", "--env", "HEALTHCHECK_URL=http://127.0.0.1:1/healthz",
                     deployed.container.name, *check["Test"][1:])
    assert refused.returncode == 1 and "Connection refused" in refused.stderr, refused


def test_the_gateway_runs_as_the_image_user_not_root(deployed: Deployed) -> None:
    status = deployed.container.exec("cat", "/proc/1/status")  # pid 1: the gateway itself
    assert status.returncode == 0, status.stderr
    uids = re.search(r"^Uid:\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)$", status.stdout, re.M)
    assert uids is not None and set(uids.groups()) == {"10001"}, status.stdout
    assert "mcp-preconditions" in deployed.container.exec("cat", "/proc/1/cmdline").stdout
    user = podman("image", "inspect", "--format", "{{.Config.User}}", require_image())
    assert user.stdout.strip() == "10001:10001"


def test_the_image_has_no_compiler_no_pip_and_is_smaller_than_one_made_by_hand() -> None:
    probe = ("import importlib.util, shutil; "
             f"print([c for c in {COMPILERS!r} if shutil.which(c)], importlib.util.find_spec('pip'))")
    image = require_image()
    done = podman("run", "--rm", "--network=none", "--entrypoint", "python3", image, "-c", probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[] None"
    entrypoint = podman("image", "inspect", "--format", "{{json .Config.Entrypoint}}", IMAGE)
    assert json.loads(entrypoint.stdout) == ["mcp-preconditions", "gateway"]
    size = int(podman("image", "inspect", "--format", "{{.Size}}", IMAGE).stdout)
    assert size < HAND_MADE, f"{size:,} bytes"  # docs/deploy.md gives the figure


def test_the_configuration_folder_is_not_writable_by_the_gateway_user() -> None:
    """Issue 39.16: /etc/mcp-preconditions belongs to root (a WORKDIR after USER made it the runtime
    user's, so a gateway that was broken into could rewrite its own policy). The root file system
    is left writable here, so the write fails for want of permission alone."""
    image = require_image()
    probe = ("id -u; stat -c '%u:%g %a' /etc/mcp-preconditions; pwd; "
             "touch /etc/mcp-preconditions/policy.toml; echo touch=$?")
    done = podman("run", "--rm", "--network=none", "--entrypoint", "sh", image, "-c", probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["10001", "0:0 755", "/etc/mcp-preconditions", "touch=1"]
    assert "touch: cannot touch '/etc/mcp-preconditions/policy.toml': Permission denied" in done.stderr


def test_without_podman_the_image_tests_fail_and_say_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(pytest.fail.Exception) as failed:
        require_image()
    assert str(failed.value) == ("podman is not installed: `make test` installs it (`make image`, "
                                 "from Debian)")
