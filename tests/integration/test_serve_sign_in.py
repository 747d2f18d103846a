"""`serve --transport http` answers a call that only lacks a token with the transport's 401 challenge
(SPEC §15, issue 40 item 10), at both protocol versions, as the gateway does: a real `serve` process
verifying the real OIDC provider's tokens, reached by the MCP SDK's client. The challenge names the
RFC 9728 metadata, which is served; a refused token is `invalid_token`; a call with other unmet
requirements stays a tool result with its envelope, and a signed-in caller is let through.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_preconditions.envelope import AUTHORIZATION_META_KEY
from tests.fixtures.mcp_servers import MODES, VERSIONS, ServeProcess, oidc_policy, serve_http
from tests.fixtures.oidc import OidcServer

pytestmark = pytest.mark.integration

DECISIONS = "mcp_preconditions.decisions: "


@pytest.fixture(scope="module")
def serving(oidc_server: OidcServer, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[ServeProcess]:
    """mission-control with the `telemetry.v2` flag on: `stream_telemetry_v2` then needs only
    `auth:oauth2`."""
    policy = oidc_policy(tmp_path_factory.mktemp("sign-in"), oidc_server)
    text = policy.read_text(encoding="utf-8")
    policy.write_text(text.replace('"telemetry.v2" = false', '"telemetry.v2" = true'), encoding="utf-8")
    with serve_http(policy) as server:
        yield server


@asynccontextmanager
async def connect(url: str, token: str | None, version: str,
                  answers: list[tuple[int, str | None]]) -> AsyncIterator[Client]:
    async def seen(response: httpx2.Response) -> None:
        answers.append((response.status_code, response.headers.get("www-authenticate")))

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"} if token else {},
                              timeout=httpx2.Timeout(30.0), event_hooks={"response": [seen]})
    async with Client(streamable_http_client(url, http_client=http), mode=MODES[version]) as client:
        assert client.protocol_version == version
        yield client


def records(server: ServeProcess, tool: str) -> list[dict[str, object]]:
    return [json.loads(line.split(DECISIONS, 1)[1]) for line in server.output().splitlines()
            if DECISIONS in line and f'"tool": "{tool}"' in line]


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_call_that_only_lacks_a_token_is_the_401_challenge(
        serving: ServeProcess, oidc_server: OidcServer, version: str) -> None:
    base = serving.url.removesuffix("/mcp")
    metadata = f"{base}/.well-known/oauth-protected-resource/mcp"
    before = len(records(serving, "stream_telemetry_v2"))
    for token, challenge in ((None, f'Bearer resource_metadata="{metadata}"'),
                             (oidc_server.token()[:-4] + "AAAA",  # a signature that does not match
                              f'Bearer resource_metadata="{metadata}", error="invalid_token", '
                              'error_description="the access token was not accepted"')):
        answers: list[tuple[int, str | None]] = []
        async with connect(serving.url, token, version, answers) as client:
            weather = await client.call_tool("get_weather", {})  # needs nothing: it runs
            launch = await client.call_tool("launch_rocket", {"vehicle": "Falcon 9"})
        assert weather.is_error is False
        assert launch.is_error is True  # more than a token missing: a tool result, its envelope
        assert launch.meta is not None and AUTHORIZATION_META_KEY in launch.meta
        with pytest.raises(Exception):  # noqa: B017 - the SDK client's error for an HTTP 401
            async with connect(serving.url, token, version, answers) as client:
                await client.call_tool("stream_telemetry_v2", {})
        assert [a for a in answers if a[0] not in (200, 202)] == [(401, challenge)]
    # Each 401 is the call's one decision, recorded once.
    denied = records(serving, "stream_telemetry_v2")[before:]
    assert [(r["allowed"], r["unmet"]) for r in denied] == [(False, ["auth:oauth2"])] * 2
    found = httpx.get(metadata, timeout=10)
    assert found.status_code == 200
    assert found.json() == {"resource": serving.url, "bearer_methods_supported": ["header"],
                            "authorization_servers": [oidc_server.issuer],
                            "scopes_supported": ["mission:read", "mission:write"]}


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_signed_in_caller_is_let_through(serving: ServeProcess, oidc_server: OidcServer,
                                                  version: str) -> None:
    answers: list[tuple[int, str | None]] = []
    async with connect(serving.url, oidc_server.token(), version, answers) as client:
        streamed = await client.call_tool("stream_telemetry_v2", {})
    assert streamed.is_error is False
    assert all(status in (200, 202) for status, _ in answers)


async def test_the_challenge_needs_a_policy_that_verifies_tokens(tmp_path: Path) -> None:
    """Without `[auth]` verification no token could be accepted: no 401, no metadata; the call is
    a tool result with its envelope, as over stdio."""
    policy = tmp_path / "policy.toml"
    policy.write_text('[tools.stream_telemetry_v2]\nrequirements = ["auth:oauth2"]\n', encoding="utf-8")
    with serve_http(policy) as server:
        base = server.url.removesuffix("/mcp")
        assert httpx.get(f"{base}/.well-known/oauth-protected-resource/mcp", timeout=10).status_code == 404
        answers: list[tuple[int, str | None]] = []
        async with connect(server.url, None, "2026-07-28", answers) as client:
            denied = await client.call_tool("stream_telemetry_v2", {})
    assert denied.is_error is True and denied.meta is not None
    assert denied.meta[AUTHORIZATION_META_KEY]["remediation"] == "unavailable"
    assert all(status in (200, 202) for status, _ in answers)
