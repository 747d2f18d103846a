"""The gateway's HTTP listener in front of a streamable-HTTP upstream that logs the headers it sees,
with real tokens from the session's oidc-provider: a role-bearing token is allowed, an observer is
denied with the exact unmet list, no token gets 401 with RFC 9728 metadata, and no token ever
reaches the upstream. tools/list is checked as raw HTTP JSON on both protocol versions.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_preconditions.wire import META_KEY
from tests.fixtures.gateway_upstream import (
    ECHO_RESULT,
    Process,
    gateway_http,
    read_log,
    tool_calls,
    upstream_http,
)
from tests.fixtures.mcp_servers import bearer
from tests.fixtures.oidc import AUDIENCE, OidcServer

ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": {},
               "io.modelcontextprotocol/clientInfo": {"name": "raw-http", "version": "1"}}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, oidc_server: OidcServer
            ) -> Iterator[tuple[Process, Path]]:
    """The gateway (HTTP, [auth] verifying the provider's JWTs) in front of the HTTP upstream,
    shared by this module's tests (each reads only the upstream log entries it caused)."""
    tmp_path = tmp_path_factory.mktemp("gateway-http")
    policy, log = tmp_path / "policy.toml", tmp_path / "upstream.jsonl"
    policy.write_text(f'[auth]\nissuer = "{oidc_server.issuer}"\naudience = "{AUDIENCE}"\n'
                      f'jwks_uri = "{oidc_server.jwks_uri}"\n'
                      '[tools.echo]\nrequirements = ["auth:claim:role:mission_control"]\n',
                      encoding="utf-8")
    with upstream_http(log) as upstream, \
            gateway_http(policy, log, "--upstream-url", upstream.url, wait="/readyz") as gw:
        yield gw, log


async def call(url: str, token: str, name: str, mode: str) -> dict[str, Any]:
    async with Client(streamable_http_client(url, http_client=bearer(token)), mode=mode) as client:
        result = await client.call_tool(name, {"text": "hi"})
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_role_token_allowed_observer_denied_and_no_token_reaches_the_upstream(
        gateway: tuple[Process, Path], oidc_server: OidcServer, mode: str) -> None:
    gw, log = gateway
    before = len(read_log(log))
    role_token, observer_token = oidc_server.token(), oidc_server.token("observer", scope="mission:read")
    allowed = await call(gw.url + "/mcp", role_token, "echo", mode)
    denied = await call(gw.url + "/mcp", observer_token, "echo", mode)
    assert allowed["structuredContent"] == ECHO_RESULT["structuredContent"]
    assert denied["isError"] is True
    assert denied["structuredContent"] == {"error": "unmet_requirements", "tool": "echo",
                                           "unmet": ["auth:claim:role:mission_control"],
                                           "withheld": 0}
    entries = read_log(log)[before:]
    assert [e["params"]["name"] for e in entries if e["method"] == "tools/call"] == ["echo"]
    assert entries and all("authorization" not in e["headers"] for e in entries)
    text = log.read_text(encoding="utf-8")
    assert role_token not in text and observer_token not in text
    assert role_token not in gw.output() and observer_token not in gw.output()  # nor logged


def test_missing_or_bad_token_gets_401_with_protected_resource_metadata(
        gateway: tuple[Process, Path], oidc_server: OidcServer) -> None:
    gw, log = gateway
    before = len(tool_calls(log))
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    missing = httpx.post(gw.url + "/mcp", headers=ACCEPT, json=body, timeout=30)
    bad = httpx.post(gw.url + "/mcp", headers={**ACCEPT, "authorization": "Bearer not.a.jwt"},
                     json=body, timeout=30)
    metadata_url = f"{gw.url}/.well-known/oauth-protected-resource/mcp"
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == f'Bearer resource_metadata="{metadata_url}"'
    assert bad.status_code == 401
    assert bad.headers["www-authenticate"].startswith(
        f'Bearer resource_metadata="{metadata_url}", error="invalid_token"')
    for url in (metadata_url, f"{gw.url}/.well-known/oauth-protected-resource"):
        metadata = httpx.get(url, timeout=30).json()
        assert metadata["resource"] == f"{gw.url}/mcp"
        assert metadata["authorization_servers"] == [oidc_server.issuer]
        assert metadata["bearer_methods_supported"] == ["header"]
    assert len(tool_calls(log)) == before


def _sse_result(response: httpx.Response) -> dict[str, Any]:
    if response.headers["content-type"].startswith("application/json"):
        message: dict[str, Any] = response.json()
    else:
        data = [line[len("data: "):] for line in response.text.splitlines() if line.startswith("data: ")]
        message = json.loads(data[-1])
    result: dict[str, Any] = message["result"]
    return result


def test_raw_http_tools_list_carries_requirements_on_both_versions(
        gateway: tuple[Process, Path], oidc_server: OidcServer) -> None:
    gw, _log = gateway
    auth = {**ACCEPT, "authorization": f"Bearer {oidc_server.token()}"}
    with httpx.Client(base_url=gw.url, headers=auth, timeout=30) as http:
        modern = _sse_result(http.post("/mcp", headers={"mcp-protocol-version": "2026-07-28",
                                                        "mcp-method": "tools/list"},
                                       json={"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                                             "params": {"_meta": MODERN_META}}))
        init = http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw-http", "version": "1"}}})
        session = {"mcp-session-id": init.headers["mcp-session-id"],
                   "mcp-protocol-version": "2025-11-25"}
        http.post("/mcp", headers=session, json={"jsonrpc": "2.0",
                                                 "method": "notifications/initialized"})
        legacy = _sse_result(http.post("/mcp", headers=session,
                                       json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
    assert _sse_result(init)["serverInfo"]["name"] == "gateway-test-upstream"
    assert modern["resultType"] == "complete" and "resultType" not in legacy
    for result in (modern, legacy):
        tools = {t["name"]: t for t in result["tools"]}
        assert tools["echo"]["execution"] == {"requirements": ["auth:claim:role:mission_control"]}
        assert tools["echo"]["_meta"] == {META_KEY: ["auth:claim:role:mission_control"]}
        assert tools["secret"]["execution"] == {"requirements": ["auth:claim:role:admin"]}


def test_health_and_readiness(gateway: tuple[Process, Path]) -> None:
    gw, _log = gateway
    assert httpx.get(gw.url + "/healthz", timeout=30).json() == {"status": "up"}
    ready = httpx.get(gw.url + "/readyz", timeout=30)
    assert ready.status_code == 200
    assert ready.json()["status"] == "ready" and ready.json()["servers"]["upstream"]["connected"] is True
    stale = httpx.post(gw.url + "/mcp", headers={**ACCEPT, "mcp-session-id": "no-such-session",
                                                 "mcp-protocol-version": "2025-11-25"},
                       json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=30)
    assert stale.status_code == 401  # [auth] is set: the token is checked before the session
