"""`serve --transport http` answers a call that only lacks a token with the transport's 401 challenge
(SPEC §15, issue 40 item 10), at both protocol versions, as the gateway does, reached by the MCP SDK's
client. The challenge names the RFC 9728 metadata, which is served; a refused token is
`invalid_token`; a call with other unmet requirements stays a tool result with its envelope, and a
signed-in caller is let through.

In-process (tests/fixtures/hosted.py): `serve` wired from its command line, its app through the
streaming bridge, tokens signed in this process. Interop, marked: the challenge of a real `serve`
process verifying the real OIDC provider's tokens (the metadata names that provider; its JWKS is
fetched by `serve`), over a socket.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_preconditions.envelope import AUTHORIZATION_META_KEY
from tests.fixtures.hosted import ISSUER, local_policy, serving
from tests.fixtures.mcp_servers import MODES, VERSIONS, ServeProcess, oidc_policy, serve_http
from tests.fixtures.oidc import OidcServer

pytestmark = pytest.mark.integration

DECISIONS = "mcp_preconditions.decisions: "
FLAG_ON = ('"telemetry.v2" = false', '"telemetry.v2" = true')
Answers = list[tuple[int, str | None]]


def with_the_flag_on(policy: Path) -> Path:
    """mission-control with the `telemetry.v2` flag on: `stream_telemetry_v2` then needs only
    `auth:oauth2`."""
    policy.write_text(policy.read_text(encoding="utf-8").replace(*FLAG_ON), encoding="utf-8")
    return policy


@dataclass
class Target:
    """`serve --transport http` as the tests reach it: its URL, how to connect with a token (its
    HTTP answers kept), plain HTTP GETs, its decision records, its issuer and a valid token."""

    url: str
    connect: Callable[[str | None, str, Answers], AbstractAsyncContextManager[Client]]
    get: Callable[[str], Any]  # an awaitable httpx.Response
    records: Callable[[str], list[dict[str, Any]]]
    issuer: str
    token: Callable[[], str]


def _hooked(answers: Answers) -> dict[str, Any]:
    async def seen(response: httpx2.Response) -> None:
        answers.append((response.status_code, response.headers.get("www-authenticate")))
    return {"event_hooks": {"response": [seen]}}


@asynccontextmanager
async def in_process(tmp_path: Path) -> AsyncIterator[Target]:
    async with serving("--policy", str(with_the_flag_on(local_policy(tmp_path))),
                       "--transport", "http") as served:
        def connect(token: str | None, version: str, answers: Answers
                    ) -> AbstractAsyncContextManager[Client]:
            return served.client(version, token, http_options=_hooked(answers))

        async def get(url: str) -> httpx.Response:
            async with served.http() as http:
                return await http.get(url)

        yield Target(served.url, connect, get, served.records, ISSUER.issuer, ISSUER.token)


@pytest.fixture(scope="module")
def process(oidc_server: OidcServer, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[ServeProcess]:
    policy = with_the_flag_on(oidc_policy(tmp_path_factory.mktemp("sign-in"), oidc_server))
    with serve_http(policy) as server:
        yield server


def process_target(server: ServeProcess, oidc: OidcServer) -> Target:
    @asynccontextmanager
    async def connect(token: str | None, version: str, answers: Answers) -> AsyncIterator[Client]:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"} if token else {},
                                  timeout=httpx2.Timeout(30.0), **_hooked(answers))
        async with Client(streamable_http_client(server.url, http_client=http),
                          mode=MODES[version]) as client:
            yield client

    async def get(url: str) -> httpx.Response:
        async with httpx.AsyncClient(timeout=10) as http:
            return await http.get(url)

    def records(tool: str) -> list[dict[str, Any]]:
        return [json.loads(line.split(DECISIONS, 1)[1]) for line in server.output().splitlines()
                if DECISIONS in line and f'"tool": "{tool}"' in line]

    return Target(server.url, connect, get, records, oidc.issuer, oidc.token)


async def the_401_challenge(target: Target, version: str) -> None:
    base = target.url.removesuffix("/mcp")
    metadata = f"{base}/.well-known/oauth-protected-resource/mcp"
    before = len(target.records("stream_telemetry_v2"))
    for token, challenge in ((None, f'Bearer resource_metadata="{metadata}"'),
                             (target.token()[:-4] + "AAAA",  # a signature that does not match
                              f'Bearer resource_metadata="{metadata}", error="invalid_token", '
                              'error_description="the access token was not accepted"')):
        answers: Answers = []
        async with target.connect(token, version, answers) as client:
            assert client.protocol_version == version
            weather = await client.call_tool("get_weather", {})  # needs nothing: it runs
            launch = await client.call_tool("launch_rocket", {"vehicle": "Falcon 9"})
        assert weather.is_error is False
        assert launch.is_error is True  # more than a token missing: a tool result, its envelope
        assert launch.meta is not None and AUTHORIZATION_META_KEY in launch.meta
        with pytest.raises(Exception):  # noqa: B017 - the SDK client's error for an HTTP 401
            async with target.connect(token, version, answers) as client:
                await client.call_tool("stream_telemetry_v2", {})
        assert [a for a in answers if a[0] not in (200, 202)] == [(401, challenge)]
    # Each 401 is the call's one decision, recorded once.
    denied = target.records("stream_telemetry_v2")[before:]
    assert [(r["allowed"], r["unmet"]) for r in denied] == [(False, ["auth:oauth2"])] * 2
    found = await target.get(metadata)
    assert found.status_code == 200
    assert found.json() == {"resource": target.url, "bearer_methods_supported": ["header"],
                            "authorization_servers": [target.issuer],
                            "scopes_supported": ["mission:read", "mission:write"]}


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_call_that_only_lacks_a_token_is_the_401_challenge(tmp_path: Path, version: str
                                                                    ) -> None:
    async with in_process(tmp_path) as target:
        await the_401_challenge(target, version)


@pytest.mark.interop
@pytest.mark.parametrize("version", VERSIONS)
async def test_a_serve_process_answers_the_401_challenge_naming_the_real_provider(
        process: ServeProcess, oidc_server: OidcServer, version: str) -> None:
    """A real `serve` process verifying the real OIDC provider's tokens, over a socket."""
    await the_401_challenge(process_target(process, oidc_server), version)


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_signed_in_caller_is_let_through(tmp_path: Path, version: str) -> None:
    answers: Answers = []
    async with in_process(tmp_path) as target, \
            target.connect(target.token(), version, answers) as client:
        streamed = await client.call_tool("stream_telemetry_v2", {})
    assert streamed.is_error is False
    assert all(status in (200, 202) for status, _ in answers)


async def test_the_challenge_needs_a_policy_that_verifies_tokens(tmp_path: Path) -> None:
    """Without `[auth]` verification no token could be accepted: no 401, no metadata; the call is
    a tool result with its envelope, as over stdio."""
    policy = tmp_path / "policy.toml"
    policy.write_text('[tools.stream_telemetry_v2]\nrequirements = ["auth:oauth2"]\n', encoding="utf-8")
    answers: Answers = []
    async with serving("--policy", str(policy), "--transport", "http") as served:
        async with served.http() as http:
            found = await http.get("/.well-known/oauth-protected-resource/mcp")
        async with served.client("2026-07-28", None, http_options=_hooked(answers)) as client:
            denied = await client.call_tool("stream_telemetry_v2", {})
    assert found.status_code == 404
    assert denied.is_error is True and denied.meta is not None
    assert denied.meta[AUTHORIZATION_META_KEY]["remediation"] == "unavailable"
    assert all(status in (200, 202) for status, _ in answers)
