"""Streamable HTTP with verified access tokens: `serve` verifying bearer tokens itself, the MCP SDK's
and fastmcp's own auth feeding the guard, per-principal list filtering with targeted list_changed,
and the 403 `insufficient_scope` step-up (by default).

In-process (tests/fixtures/hosted.py): `serve --transport http` wired from its command line, its app
called through the streaming bridge by the SDK's client, tokens signed in this process; fastmcp's app
on a real socket of this loop (uvicorn, tests/fixtures/inprocess.py asgi_served). Interop, marked:
mission control's launch through a real `serve` process on 127.0.0.1 with the real OIDC provider's
token, at both versions (the provider's JWKS fetched, the SDK's HTTP transport over a socket; the
lowest pass runs it on the oldest SDK and uvicorn).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
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
from tests.fixtures.asgi_bridge import AsgiBridge
from tests.fixtures.hosted import ISSUER, Serving, local_policy, serving
from tests.fixtures.inprocess import BASE_URL, WAIT_SECONDS, asgi_served
from tests.fixtures.mcp_servers import (
    MISSION_POLICY,
    MODES,
    VERSIONS,
    ServeProcess,
    bearer,
    raw_tools,
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


@asynccontextmanager
async def http_serve(tmp_path: Path, *args: str, extra: str = "") -> AsyncIterator[Serving]:
    """`serve --transport http ARGS` in this process on mission control's policy, verifying
    `ISSUER`'s tokens."""
    async with serving("--policy", str(local_policy(tmp_path, extra)), "--transport", "http",
                       *args) as served:
        yield served


def observer_token() -> str:
    """The observer's token (mission:read only; no mission_control role)."""
    return ISSUER.token("observer", scope="mission:read")


# --- serve: the guard verifies the bearer token itself ([auth] in the policy) -----------------------
async def mission_control_launches(client: Client) -> None:
    wire = {t["name"]: t for t in await raw_tools(client.session)}
    launched = await client.call_tool("launch_rocket", {"vehicle": "Falcon 9"})
    # Listed less the policy's confidential `state:weather.clear` (enforced, never named).
    assert wire["launch_rocket"]["execution"]["requirements"] == LAUNCH_LISTED
    assert wire["launch_rocket"]["_meta"][META_KEY] == LAUNCH_LISTED
    assert "execution" not in wire["get_weather"]
    assert launched.is_error is False
    assert text_of(launched) == "Falcon 9 has cleared the tower."


@pytest.mark.parametrize("version", VERSIONS)
async def test_serve_verifies_a_token_and_lets_mission_control_launch(tmp_path: Path, version: str
                                                                       ) -> None:
    async with http_serve(tmp_path) as served, served.client(version, ISSUER.token()) as client:
        assert client.protocol_version == version
        await mission_control_launches(client)


@pytest.mark.interop
@pytest.mark.parametrize("version", VERSIONS)
async def test_a_serve_process_verifies_a_real_providers_token_over_a_socket(
        mission_http: ServeProcess, oidc_server: OidcServer, version: str) -> None:
    """A real `serve` process on 127.0.0.1 and the real OIDC provider: its JWKS fetched by `serve`,
    the SDK's HTTP transport over a socket, uvicorn serving."""
    async with connect(mission_http.url, oidc_server.token(), version) as client:
        await mission_control_launches(client)


@pytest.mark.parametrize("version", VERSIONS)
async def test_serve_denies_anonymous_and_forged_callers(tmp_path: Path, version: str) -> None:
    forged = ISSUER.forged(ISSUER.token())  # signature no longer matches
    async with http_serve(tmp_path) as served:
        for token in (None, forged):
            async with served.client(version, token) as client:
                denied = await client.call_tool("launch_rocket", {"vehicle": "Falcon 9"})
                weather = await client.call_tool("get_weather", {})
            assert denied.is_error is True
            assert denied.structured_content == {"error": "unmet_requirements",
                                                 "tool": "launch_rocket",
                                                 "unmet": ANONYMOUS_LAUNCH, "withheld": 0}
            assert weather.is_error is False


async def test_a_missing_scope_is_named_for_a_step_up(tmp_path: Path) -> None:
    async with http_serve(tmp_path) as served, served.client(token=observer_token()) as client:
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
async def test_a_call_only_lacking_scopes_is_answered_403_insufficient_scope(tmp_path: Path) -> None:
    async with http_serve(tmp_path) as served, served.http() as http:
        response = await http.post("/mcp", headers={
            "Authorization": f"Bearer {ISSUER.token(scope='mission:read')}",
            "Accept": "application/json, text/event-stream"},
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                  "params": {"name": "abort_launch", "arguments": {}}})
    assert response.status_code == 403
    assert response.headers["www-authenticate"] == (
        'Bearer error="insufficient_scope", scope="mission:write", '
        "error_description=\"tool 'abort_launch' needs more scopes\"")
    assert response.json() == {"error": "insufficient_scope", "scope": "mission:write",
                               "error_description": "the call needs more scopes"}


async def test_other_denials_stay_tool_results_with_their_envelope(tmp_path: Path) -> None:
    # The observer also lacks the capability: more scopes alone would not help, so no 403.
    async with http_serve(tmp_path) as served, served.client(token=observer_token()) as client:
        denied = await client.call_tool("abort_launch", {})
        allowed = await client.call_tool("read_telemetry", {})
    assert denied.is_error is True
    assert allowed.is_error is False
    envelope = authorization_denial_of(denied)  # the scope's remedy is on offer all the same
    assert envelope is not None and envelope.remediation is Remediation.AVAILABLE
    assert envelope.authorization_details == ({"type": SCOPE_DETAILS_TYPE, "scopes": ["mission:write"]},)


async def test_no_step_up_answers_in_band_with_an_authorization_remediation_hint(tmp_path: Path
                                                                                 ) -> None:
    async with http_serve(tmp_path, "--no-step-up") as served, \
            served.client(token=ISSUER.token(scope="mission:read")) as client:
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


async def test_a_reload_notifies_only_the_sessions_whose_tools_changed(tmp_path: Path) -> None:
    """The reload is `serve`'s own reloader's (on the edited file), and no periodic re-check runs
    (--refresh-seconds 0): only the reload can have told a session."""
    async with http_serve(tmp_path, "--refresh-seconds", "0",
                          extra="\n[guard]\nlist_filtering = true\n") as served:
        control, observer = Inbox(), Inbox()
        async with served.client(token=ISSUER.token(), message_handler=control) as c1, \
                served.client(token=observer_token(), message_handler=observer) as c2:
            assert [t["name"] for t in await raw_tools(c1.session)] == [
                "launch_rocket", "abort_launch", "read_telemetry", "get_weather"]
            assert [t["name"] for t in await raw_tools(c2.session)] == ["read_telemetry", "get_weather"]
            # Telemetry now needs the mission_control role: only the observer's list changes.
            policy = served.reloader.path
            text = policy.read_text(encoding="utf-8")
            policy.write_text(text.replace('capabilities = ["telemetry.read"]\nwhen = ["auth:oauth2"]',
                                           'capabilities = ["telemetry.read"]\n'
                                           'when = ["auth:claim:role:mission_control"]'),
                              encoding="utf-8")
            assert served.reloader.reload() is not None
            with anyio.fail_after(WAIT_SECONDS):
                await observer.event.wait()
            assert [t["name"] for t in await raw_tools(c2.session)] == ["get_weather"]
            assert len(await raw_tools(c1.session)) == 4
        assert (control.count, observer.count) == (0, 1)


# --- the principal comes from the MCP SDK's own auth, or from fastmcp's -----------------------------
class LocalTokenVerifier:
    """An MCP SDK TokenVerifier for the issuer's JWTs (as a server author might write)."""

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            claims = jwt.decode(token, ISSUER.key.public_pem(), algorithms=["RS256"],
                                audience=AUDIENCE, issuer=ISSUER.issuer)
        except jwt.PyJWTError:
            return None
        return AccessToken(token=token, client_id=claims["client_id"], scopes=claims["scope"].split(),
                           expires_at=claims["exp"], subject=claims.get("sub"), claims=claims)


async def test_the_guard_reads_the_principal_from_the_mcp_sdk_auth() -> None:
    server = build_server(Guard(load_policy(MISSION_POLICY)), token_verifier=LocalTokenVerifier(),
                          auth=AuthSettings(issuer_url=ISSUER.issuer, resource_server_url=None))
    async with AsgiBridge(server.streamable_http_app(), base_url=BASE_URL) as bridge:
        def connected(token: str) -> Client:
            http = bridge.httpx2(headers={"Authorization": f"Bearer {token}"})
            return Client(streamable_http_client(f"{BASE_URL}/mcp", http_client=http), mode="legacy")

        async with connected(ISSUER.token()) as client:
            launched = await client.call_tool("launch_rocket", {"vehicle": "Ariane"})
        async with connected(observer_token()) as client:
            denied = await client.call_tool("launch_rocket", {"vehicle": "Ariane"})
    assert launched.is_error is False
    assert denied.structured_content is not None
    assert denied.structured_content["unmet"] == ["auth:claim:role:mission_control",
                                                  "capability:rocket.launch"]


async def test_the_guard_reads_the_principal_from_fastmcp_auth() -> None:
    """fastmcp's app served by uvicorn on a socket of this loop (its HTTP stack whole)."""
    app: FastMCP[Any] = FastMCP("fast", auth=JWTVerifier(
        public_key=ISSUER.key.public_pem(), issuer=ISSUER.issuer, audience=AUDIENCE))
    pre = guard_fastmcp(app, Guard(load_policy(MISSION_POLICY)))
    ran: list[str] = []

    @app.tool(output_schema=None)
    @pre.requires("auth:oauth2", "auth:claim:tenant:acme", "auth:scope:mission:write")
    def refuel() -> str:
        ran.append("refuel")
        return "refuelled"

    async with asgi_served(app.http_app()) as base:
        for version in VERSIONS:
            async with connect(f"{base}/mcp", ISSUER.token(), version) as client:
                assert (await client.call_tool("refuel", {})).is_error is False
            async with connect(f"{base}/mcp", observer_token(), version) as client:
                denied = await client.call_tool("refuel", {})
                assert denied.structured_content is not None
                assert denied.structured_content["unmet"] == ["auth:claim:tenant:acme",
                                                              "auth:scope:mission:write"]
    assert ran == ["refuel", "refuel"]
