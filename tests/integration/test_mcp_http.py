"""Streamable HTTP on 127.0.0.1 with real access tokens from the OIDC provider: `serve` verifying
bearer tokens itself, the MCP SDK's and fastmcp's own auth feeding the guard, per-principal list
filtering with targeted list_changed, and the 403 `insufficient_scope` step-up (by default).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import jwt
import mcp_types
import pytest
from fastmcp import FastMCP
from fastmcp.server.auth.providers.jwt import JWTVerifier
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings

from mcp_preconditions.denials import SCOPE_DETAILS_TYPE
from mcp_preconditions.envelope import Remediation
from mcp_preconditions.examples_server import LAUNCH_REQUIREMENTS, build_server
from mcp_preconditions.guard import Guard
from mcp_preconditions.integrations._calls import STEP_UP_META_KEY
from mcp_preconditions.integrations.client_mcp import authorization_denial_of
from mcp_preconditions.integrations.fastmcp import guard_fastmcp
from mcp_preconditions.policy.load import load_policy
from mcp_preconditions.wire import META_KEY
from tests.fixtures.mcp_servers import (
    MISSION_POLICY,
    MODES,
    VERSIONS,
    ServeProcess,
    bearer,
    oidc_policy,
    raw_tools,
    run_asgi,
    serve_http,
)
from tests.fixtures.oidc import AUDIENCE, OidcServer

pytestmark = pytest.mark.integration

LAUNCH_LISTED = [r for r in LAUNCH_REQUIREMENTS if r != "state:weather.clear"]

ANONYMOUS_LAUNCH = ["auth:oauth2", "auth:claim:role:mission_control", "capability:rocket.launch"]


@asynccontextmanager
async def connect(url: str, token: str | None, version: str = "2025-11-25",
                  **options: Any) -> AsyncIterator[Client]:
    async with Client(streamable_http_client(url, http_client=bearer(token)), mode=MODES[version],
                      **options) as client:
        assert client.protocol_version == version
        yield client


def text_of(result: Any) -> str:
    return " ".join(c.text for c in result.content)


# --- serve: the guard verifies the bearer token itself ([auth] in the policy) -----------------------
@pytest.mark.parametrize("version", VERSIONS)
async def test_serve_verifies_a_real_token_and_lets_mission_control_launch(
        mission_http: ServeProcess, oidc_server: OidcServer, version: str) -> None:
    async with connect(mission_http.url, oidc_server.token(), version) as client:
        wire = {t["name"]: t for t in await raw_tools(client.session)}
        launched = await client.call_tool("launch_rocket", {"vehicle": "Falcon 9"})
    # Listed less the policy's confidential `state:weather.clear` (enforced, never named).
    assert wire["launch_rocket"]["execution"]["requirements"] == LAUNCH_LISTED
    assert wire["launch_rocket"]["_meta"][META_KEY] == LAUNCH_LISTED
    assert "execution" not in wire["get_weather"]
    assert launched.is_error is False
    assert text_of(launched) == "Falcon 9 has cleared the tower."


@pytest.mark.parametrize("version", VERSIONS)
async def test_serve_denies_anonymous_and_forged_callers(
        mission_http: ServeProcess, oidc_server: OidcServer, version: str) -> None:
    forged = oidc_server.token()[:-4] + "AAAA"  # signature no longer matches
    for token in (None, forged):
        async with connect(mission_http.url, token, version) as client:
            denied = await client.call_tool("launch_rocket", {"vehicle": "Falcon 9"})
            weather = await client.call_tool("get_weather", {})
        assert denied.is_error is True
        assert denied.structured_content == {"error": "unmet_requirements", "tool": "launch_rocket",
                                             "unmet": ANONYMOUS_LAUNCH, "withheld": 0}
        assert weather.is_error is False


async def test_a_missing_scope_is_named_for_a_step_up(mission_http: ServeProcess,
                                                      oidc_server: OidcServer) -> None:
    async with connect(mission_http.url, oidc_server.token("observer", scope="mission:read")) as client:
        denied = await client.call_tool("abort_launch", {})
    assert denied.structured_content == {
        "error": "unmet_requirements", "tool": "abort_launch",
        "unmet": ["capability:rocket.abort", "auth:scope:mission:write"], "withheld": 0}
    assert text_of(denied) == ("Tool 'abort_launch' was not run: unmet requirements: "
                               "capability:rocket.abort, auth:scope:mission:write. Ask an operator. "
                               "Missing scopes: mission:write.")
    assert denied.meta is not None
    assert denied.meta[STEP_UP_META_KEY] == {"error": "insufficient_scope", "scope": "mission:write"}


# --- the 403 step-up (SPEC §15: by default over HTTP) -----------------------------------------------
def post_call(url: str, token: str, tool: str) -> httpx.Response:
    return httpx.post(url, timeout=30, headers={
        "Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
              "params": {"name": tool, "arguments": {}}})


def test_a_call_only_lacking_scopes_is_answered_403_insufficient_scope(
        mission_http: ServeProcess, oidc_server: OidcServer) -> None:
    response = post_call(mission_http.url, oidc_server.token(scope="mission:read"), "abort_launch")
    assert response.status_code == 403
    assert response.headers["www-authenticate"] == (
        'Bearer error="insufficient_scope", scope="mission:write", '
        "error_description=\"tool 'abort_launch' needs more scopes\"")
    assert response.json() == {"error": "insufficient_scope", "scope": "mission:write",
                               "error_description": "the call needs more scopes"}


async def test_other_denials_stay_tool_results_with_their_envelope(
        mission_http: ServeProcess, oidc_server: OidcServer) -> None:
    # The observer also lacks the capability: more scopes alone would not help, so no 403.
    async with connect(mission_http.url, oidc_server.token("observer", scope="mission:read")) as client:
        denied = await client.call_tool("abort_launch", {})
        allowed = await client.call_tool("read_telemetry", {})
    assert denied.is_error is True
    assert allowed.is_error is False
    envelope = authorization_denial_of(denied)  # the scope's remedy is on offer all the same
    assert envelope is not None and envelope.remediation is Remediation.AVAILABLE
    assert envelope.authorization_details == ({"type": SCOPE_DETAILS_TYPE, "scopes": ["mission:write"]},)


async def test_no_step_up_answers_in_band_with_an_authorization_remediation_hint(
        oidc_server: OidcServer, tmp_path: Path) -> None:
    with serve_http(oidc_policy(tmp_path, oidc_server), "--no-step-up") as srv:
        async with connect(srv.url, oidc_server.token(scope="mission:read")) as client:
            denied = await client.call_tool("abort_launch", {})
    assert denied.structured_content == {"error": "unmet_requirements", "tool": "abort_launch",
                                         "unmet": ["auth:scope:mission:write"], "withheld": 0}
    envelope = authorization_denial_of(denied)
    assert envelope is not None and envelope.remediation is Remediation.AVAILABLE
    assert envelope.to_dict()["remediationHints"] == [{
        "type": "authorization_remediation",
        "authorization_details": [{"type": SCOPE_DETAILS_TYPE, "scopes": ["mission:write"]}]}]


# --- list filtering per principal, and list_changed for exactly the sessions it concerns -----------
class Inbox:
    def __init__(self) -> None:
        self.count = 0
        self.event = anyio.Event()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self.count += 1
            self.event.set()


async def test_a_reload_notifies_only_the_sessions_whose_tools_changed(
        oidc_server: OidcServer, tmp_path: Path) -> None:
    policy = oidc_policy(tmp_path, oidc_server, extra="\n[guard]\nlist_filtering = true\n")
    with serve_http(policy, "--refresh-seconds", "0.1") as srv:
        control, observer = Inbox(), Inbox()
        async with connect(srv.url, oidc_server.token(), message_handler=control) as c1, \
                connect(srv.url, oidc_server.token("observer", scope="mission:read"),
                        message_handler=observer) as c2:
            assert [t["name"] for t in await raw_tools(c1.session)] == [
                "launch_rocket", "abort_launch", "read_telemetry", "get_weather"]
            assert [t["name"] for t in await raw_tools(c2.session)] == ["read_telemetry", "get_weather"]
            # Telemetry now needs the mission_control role: only the observer's list changes.
            text = policy.read_text(encoding="utf-8")
            policy.write_text(text.replace('capabilities = ["telemetry.read"]\nwhen = ["auth:oauth2"]',
                                           'capabilities = ["telemetry.read"]\n'
                                           'when = ["auth:claim:role:mission_control"]'),
                              encoding="utf-8")
            with anyio.fail_after(20):
                await observer.event.wait()
            assert [t["name"] for t in await raw_tools(c2.session)] == ["get_weather"]
            assert len(await raw_tools(c1.session)) == 4
        assert (control.count, observer.count) == (0, 1)


# --- the principal comes from the MCP SDK's own auth, or from fastmcp's -----------------------------
class JwksTokenVerifier:
    """An MCP SDK TokenVerifier for the OIDC provider's JWTs (as a server author might write)."""

    def __init__(self, oidc: OidcServer) -> None:
        self.oidc = oidc
        self.keys = jwt.PyJWKClient(oidc.jwks_uri)

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            key = await anyio.to_thread.run_sync(self.keys.get_signing_key_from_jwt, token)
            claims = jwt.decode(token, key, algorithms=["RS256", "ES256"], audience=AUDIENCE,
                                issuer=self.oidc.issuer)
        except jwt.PyJWTError:
            return None
        return AccessToken(token=token, client_id=claims["client_id"], scopes=claims["scope"].split(),
                           expires_at=claims["exp"], subject=claims.get("sub"), claims=claims)


async def test_the_guard_reads_the_principal_from_the_mcp_sdk_auth(oidc_server: OidcServer) -> None:
    server = build_server(Guard(load_policy(MISSION_POLICY)), token_verifier=JwksTokenVerifier(
        oidc_server), auth=AuthSettings(issuer_url=oidc_server.issuer, resource_server_url=None))
    async with run_asgi(server.streamable_http_app()) as base:
        async with connect(f"{base}/mcp", oidc_server.token()) as client:
            launched = await client.call_tool("launch_rocket", {"vehicle": "Ariane"})
        async with connect(f"{base}/mcp", oidc_server.token("observer", scope="mission:read")) as client:
            denied = await client.call_tool("launch_rocket", {"vehicle": "Ariane"})
    assert launched.is_error is False
    assert denied.structured_content is not None
    assert denied.structured_content["unmet"] == ["auth:claim:role:mission_control",
                                                  "capability:rocket.launch"]


async def test_the_guard_reads_the_principal_from_fastmcp_auth(oidc_server: OidcServer) -> None:
    app: FastMCP[Any] = FastMCP("fast", auth=JWTVerifier(
        jwks_uri=oidc_server.jwks_uri, issuer=oidc_server.issuer, audience=AUDIENCE))
    pre = guard_fastmcp(app, Guard(load_policy(MISSION_POLICY)))
    ran: list[str] = []

    @app.tool(output_schema=None)
    @pre.requires("auth:oauth2", "auth:claim:tenant:acme", "auth:scope:mission:write")
    def refuel() -> str:
        ran.append("refuel")
        return "refuelled"

    async with run_asgi(app.http_app()) as base:
        for version in VERSIONS:
            async with connect(f"{base}/mcp", oidc_server.token(), version) as client:
                assert (await client.call_tool("refuel", {})).is_error is False
            async with connect(f"{base}/mcp", oidc_server.token("observer", scope="mission:read"),
                               version) as client:
                denied = await client.call_tool("refuel", {})
                assert denied.structured_content is not None
                assert denied.structured_content["unmet"] == ["auth:claim:tenant:acme",
                                                              "auth:scope:mission:write"]
    assert ran == ["refuel", "refuel"]
