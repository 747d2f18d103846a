"""The gateway's HTTP listener in front of a streamable-HTTP upstream that logs the headers it sees,
with signed access tokens: a role-bearing token is allowed, an observer is denied with the exact
unmet list, no token gets 401 with RFC 9728 metadata, and no token ever reaches the upstream.
tools/list is checked as raw HTTP JSON on both protocol versions.

In-process (tests/fixtures/inprocess.py): the gateway wired from its command line in the test's event
loop, its upstream the logging upstream's SDK app and the issuer's JWKS (tests/fixtures/jwt_issuer.py)
each on a socket of that loop (the gateway's HTTP link and its key fetch are real clients), the
callers on the gateway's app over the streaming bridge. Tokens of the real provider through the
gateway are the interop tier's (test_gateway_auth_reload, test_gateway_lockout, the credentials
tests).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from mcp_preconditions.wire import META_KEY
from tests.fixtures.gateway_upstream import ECHO_RESULT, LoggingUpstream, read_log, tool_calls
from tests.fixtures.inprocess import BASE_URL, InProcess, asgi_served, cli_gateway, held
from tests.fixtures.jwt_issuer import JwtIssuer
from tests.fixtures.memory_upstream import logging_env

pytestmark = pytest.mark.asyncio(loop_scope="module")

AUDIENCE = "urn:mcp:mission-server"
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": {},
               "io.modelcontextprotocol/clientInfo": {"name": "raw-http", "version": "1"}}
MISSION_CONTROL = {"sub": "mission-control", "role": "mission_control", "scope": "mission:read"}
OBSERVER = {"sub": "observer", "role": "observer", "scope": "mission:read"}


@dataclass
class Served:
    gateway: InProcess
    log: Path
    issuer: JwtIssuer

    def token(self, claims: dict[str, Any]) -> str:
        return self.issuer.token(claims, audience=AUDIENCE)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    """The gateway (HTTP, [auth] verifying the issuer's JWTs) in front of the HTTP upstream,
    shared by this module's tests (each reads only the upstream log entries it caused)."""
    tmp_path = tmp_path_factory.mktemp("gateway-http")
    policy, log = tmp_path / "policy.toml", tmp_path / "upstream.jsonl"
    issuer = JwtIssuer()
    upstream = LoggingUpstream(logging_env(log)).build().streamable_http_app(host="127.0.0.1")
    async with held(asgi_served(issuer)) as keys, held(asgi_served(upstream)) as up:
        policy.write_text(f'[auth]\nissuer = "{issuer.name}"\naudience = "{AUDIENCE}"\n'
                          f'jwks_uri = "{keys}/jwks"\n'
                          '[tools.echo]\nrequirements = ["auth:claim:role:mission_control"]\n',
                          encoding="utf-8")
        async with held(cli_gateway(["--policy", str(policy), "--listen", "http://127.0.0.1:0",
                                     "--upstream-url", f"{up}/mcp"])) as gateway:
            await gateway.until_ready()
            yield Served(gateway, log, issuer)


async def call(served: Served, token: str, name: str, mode: Any) -> dict[str, Any]:
    async with served.gateway.client(mode, headers={"authorization": f"Bearer {token}"}) as client:
        result = await client.call_tool(name, {"text": "hi"})
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_role_token_allowed_observer_denied_and_no_token_reaches_the_upstream(
        served: Served, mode: str) -> None:
    before = len(read_log(served.log))
    role_token, observer_token = served.token(MISSION_CONTROL), served.token(OBSERVER)
    allowed = await call(served, role_token, "echo", mode)
    denied = await call(served, observer_token, "echo", mode)
    assert allowed["structuredContent"] == ECHO_RESULT["structuredContent"]
    assert denied["isError"] is True
    assert denied["structuredContent"] == {"error": "unmet_requirements", "tool": "echo",
                                           "unmet": ["auth:claim:role:mission_control"],
                                           "withheld": 0}
    entries = read_log(served.log)[before:]
    assert [e["params"]["name"] for e in entries if e["method"] == "tools/call"] == ["echo"]
    assert entries and all("authorization" not in e["headers"] for e in entries)
    text = served.log.read_text(encoding="utf-8")
    assert role_token not in text and observer_token not in text
    output = served.gateway.output()
    assert role_token not in output and observer_token not in output  # nor logged


async def test_missing_or_bad_token_gets_401_with_protected_resource_metadata(
        served: Served) -> None:
    before = len(tool_calls(served.log))
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    async with served.gateway.http() as http:
        missing = await http.post("/mcp", headers=ACCEPT, json=body)
        bad = await http.post("/mcp", headers={**ACCEPT, "authorization": "Bearer not.a.jwt"},
                              json=body)
        metadata_url = f"{BASE_URL}/.well-known/oauth-protected-resource/mcp"
        documents = [(await http.get(url)).json()
                     for url in (metadata_url, f"{BASE_URL}/.well-known/oauth-protected-resource")]
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == f'Bearer resource_metadata="{metadata_url}"'
    assert bad.status_code == 401
    assert bad.headers["www-authenticate"].startswith(
        f'Bearer resource_metadata="{metadata_url}", error="invalid_token"')
    for metadata in documents:
        assert metadata["resource"] == f"{BASE_URL}/mcp"
        assert metadata["authorization_servers"] == [served.issuer.name]
        assert metadata["bearer_methods_supported"] == ["header"]
    assert len(tool_calls(served.log)) == before


def _sse_result(response: httpx.Response) -> dict[str, Any]:
    if response.headers["content-type"].startswith("application/json"):
        message: dict[str, Any] = response.json()
    else:
        data = [line[len("data: "):] for line in response.text.splitlines() if line.startswith("data: ")]
        message = json.loads(data[-1])
    result: dict[str, Any] = message["result"]
    return result


async def test_raw_http_tools_list_carries_requirements_on_both_versions(served: Served) -> None:
    async with served.gateway.http() as http:
        http.headers.update({**ACCEPT, "authorization": f"Bearer {served.token(MISSION_CONTROL)}"})
        modern = _sse_result(await http.post(
            "/mcp", headers={"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/list"},
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                  "params": {"_meta": MODERN_META}}))
        init = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                             "params": {"protocolVersion": "2025-11-25",
                                                        "capabilities": {},
                                                        "clientInfo": {"name": "raw-http",
                                                                       "version": "1"}}})
        session = {"mcp-session-id": init.headers["mcp-session-id"],
                   "mcp-protocol-version": "2025-11-25"}
        await http.post("/mcp", headers=session,
                        json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        legacy = _sse_result(await http.post("/mcp", headers=session, json={
            "jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
    assert _sse_result(init)["serverInfo"]["name"] == "gateway-test-upstream"
    assert modern["resultType"] == "complete" and "resultType" not in legacy
    for result in (modern, legacy):
        tools = {t["name"]: t for t in result["tools"]}
        assert tools["echo"]["execution"] == {"requirements": ["auth:claim:role:mission_control"]}
        assert tools["echo"]["_meta"] == {META_KEY: ["auth:claim:role:mission_control"]}
        assert tools["secret"]["execution"] == {"requirements": ["auth:claim:role:admin"]}


async def test_health_and_readiness(served: Served) -> None:
    async with served.gateway.http() as http:
        health = await http.get("/healthz")
        ready = await http.get("/readyz")
        stale = await http.post("/mcp", headers={**ACCEPT, "mcp-session-id": "no-such-session",
                                                 "mcp-protocol-version": "2025-11-25"},
                                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert health.json() == {"status": "up"}
    assert ready.status_code == 200
    assert ready.json()["status"] == "ready" and ready.json()["servers"]["upstream"]["connected"]
    assert stale.status_code == 401  # [auth] is set: the token is checked before the session
