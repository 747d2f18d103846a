"""SPEC §15's table, held by one parametrized test on both paths (issue 33): the same listed server
(tests/fixtures/listed_server.py) guarded in its own process by `guard_server`
(tests/fixtures/guarded_listed.py) and behind a real `mcp-preconditions gateway` process, reached
through the MCP SDK's client at both protocol versions, over stdio (the caller given by --claims)
and streamable HTTP (real OIDC tokens that lack `mission:write`). Every denial's SEP-2643 envelope
matches its row on every path; over HTTP a call that only lacks scopes is the 403 challenge and a
call without a token the 401 (no envelope); a retry that echoes a context ID is decided afresh and
recorded with the echo.

| unmet | envelope (stdio) | over HTTP |
|---|---|---|
| env:, auth:claim:, state:, feature:, capability: | unavailable, no hints | the same |
| auth:scope: alone | available, one authorization_remediation hint | 403 insufficient_scope |
| auth:scope: and env: | available, the scope hint | the same |
| a confidential requirement | undisclosed, no hints | the same |
| signoff: (a resolver offers a page) | available, its url hint (no URL elicitation: undisclosed) | the same |
| a name listed twice, malformed requirements | unavailable | the same |
| a quota alone | no envelope, retry_after_seconds | the same |
| auth:oauth2 (no token) | unavailable | 401 |
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mcp_preconditions.denials import SCOPE_DETAILS_TYPE
from mcp_preconditions.envelope import AUTHORIZATION_META_KEY, CONTEXT_ID_META_KEY, AuthorizationDenial
from mcp_preconditions.integrations.client_mcp import denial_of
from mcp_preconditions.wire import META_KEY
from tests.fixtures.gateway_upstream import started
from tests.fixtures.mcp_servers import CLI, MODES, ROOT, VERSIONS, request_meta, server_env
from tests.fixtures.oidc import AUDIENCE, OidcServer
from tests.fixtures.ports import free_port
from tests.fixtures.signoff_resolver import PAGES

pytestmark = pytest.mark.integration

PATHS, TRANSPORTS = ("hosted", "gateway"), ("stdio", "http")
CLIENT = "mission-control"  # the OIDC provider's client: its tokens' subject
CLAIMS = {"sub": CLIENT, "scope": "mission:read"}
RESOLVER = f"{ROOT / 'tests' / 'fixtures' / 'signoff_resolver.py'}:Signoffs"
DECISIONS = "mcp_preconditions.decisions: "
SCOPE_HINT = {"type": "authorization_remediation",
              "authorization_details": [{"type": SCOPE_DETAILS_TYPE, "scopes": ["mission:write"]}]}
SIGNOFF_HINT = {"type": "url", "url": PAGES + "release"}


def tool(name: str, mirror: Any = None) -> dict[str, Any]:
    return {"name": name, "inputSchema": {"type": "object"},
            **({"_meta": {META_KEY: mirror}} if mirror is not None else {})}


TOOLS = [tool("env_only", ["env:production"]), tool("claim", ["auth:claim:role:admin"]),
         tool("state", ["state:pad.ready"]), tool("flag", ["feature:beta"]),
         tool("capability", ["capability:rocket.abort"]),
         tool("scope_only", ["auth:scope:mission:write"]),
         tool("scope_and_env", ["auth:scope:mission:write", "env:production"]),
         tool("confidential", ["env:testing", "auth:scope:mission:write"]),
         tool("signoff", ["signoff:release"]), tool("dup"), tool("dup"),
         tool("bad", "env:production"), tool("metered", ["quota:once"]), tool("open"),
         tool("oauth", ["auth:oauth2"])]
POLICY = """environment = ["staging"]
confidential = ["env:testing"]
[features.flags]
beta = false
[state.values]
"pad.ready" = false
[[capabilities.grants]]
capabilities = ["rocket.abort"]
when = ["auth:claim:role:flight_director"]
[quotas.once]
calls = 1
per_seconds = 3600
"""
# (tool, envelope over stdio: (remediation, hints), over HTTP when it differs: "403")
UNAVAILABLE: tuple[str, list[Any]] = ("unavailable", [])
ROWS: list[tuple[str, tuple[str, list[Any]], str | None]] = [
    ("env_only", UNAVAILABLE, None), ("claim", UNAVAILABLE, None), ("state", UNAVAILABLE, None),
    ("flag", UNAVAILABLE, None), ("capability", UNAVAILABLE, None),
    ("scope_only", ("available", [SCOPE_HINT]), "403"),
    ("scope_and_env", ("available", [SCOPE_HINT]), None),
    ("confidential", ("undisclosed", []), None),
    ("signoff", ("available", [SIGNOFF_HINT]), None),
    ("dup", UNAVAILABLE, None), ("bad", UNAVAILABLE, None)]


@dataclass
class Served:
    """One path over one transport: how to connect (with a token or claims, declaring URL-mode
    elicitation or not, or anonymous), its decision records, and its HTTP URL."""

    path: str
    transport: str
    version: str
    connect: Callable[..., Any]
    log: Callable[[], str]
    ran: Path
    url: str | None = None
    answers: list[tuple[int, str | None]] | None = None  # over HTTP: each response's status, challenge

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line.split(DECISIONS, 1)[1]) for line in self.log().splitlines()
                if DECISIONS in line]


async def _elicit(_ctx: Any, _params: Any) -> mcp_types.ElicitResult:
    return mcp_types.ElicitResult(action="decline")


def _declared(url_elicitation: bool) -> dict[str, Any]:
    """A client that declares elicitation (the SDK's client: form and URL modes), or none."""
    return {"elicitation_callback": _elicit} if url_elicitation else {}


def _files(tmp_path: Path, oidc: OidcServer) -> tuple[Path, Path, Path, Path]:
    policy, listing = tmp_path / "policy.toml", tmp_path / "tools.json"
    claims, ran = tmp_path / "claims.json", tmp_path / "ran.log"
    policy.write_text(POLICY + f'[auth]\nissuer = "{oidc.issuer}"\naudience = "{AUDIENCE}"\n'
                      f'jwks_uri = "{oidc.jwks_uri}"\n', encoding="utf-8")
    listing.write_text(json.dumps(TOOLS), encoding="utf-8")
    claims.write_text(json.dumps(CLAIMS), encoding="utf-8")
    return policy, listing, claims, ran


def _command(path: str, policy: Path, listing: Path, ran: Path, *options: str) -> list[str]:
    if path == "hosted":
        return [sys.executable, "-m", "tests.fixtures.guarded_listed", str(policy), str(listing),
                str(ran), *options]
    return [*CLI, "gateway", "--policy", str(policy), "--resolver", RESOLVER, *options, "--",
            sys.executable, "-m", "tests.fixtures.listed_server", str(listing), str(ran)]


@contextmanager
def serving(path: str, transport: str, version: str, tmp_path: Path,
            oidc: OidcServer) -> Iterator[Served]:
    policy, listing, claims, ran = _files(tmp_path, oidc)
    if transport == "stdio":
        errors = tmp_path / "stderr.log"

        @asynccontextmanager
        async def connect(url_elicitation: bool = True, anonymous: bool = False) -> AsyncIterator[Client]:
            command = _command(path, policy, listing, ran,
                               *([] if anonymous else ["--claims", str(claims)]))
            params = StdioServerParameters(command=command[0], args=command[1:], env=server_env(),
                                           cwd=ROOT)
            with errors.open("a", encoding="utf-8") as errlog:
                async with Client(stdio_client(params, errlog=errlog), mode=MODES[version],
                                  **_declared(url_elicitation)) as client:
                    yield client

        yield Served(path, transport, version, connect, lambda: errors.read_text(encoding="utf-8"), ran)
        return
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    options = (["--http", str(port), oidc.issuer, AUDIENCE] if path == "hosted"
               else ["--listen", base])
    probe = f"{base}/mcp" if path == "hosted" else f"{base}/healthz"
    token = oidc.token(CLIENT, scope="mission:read")
    with started(_command(path, policy, listing, ran, *options), server_env(), f"{base}/mcp",
                 probe) as process:

        answers: list[tuple[int, str | None]] = []

        async def seen(response: httpx2.Response) -> None:
            answers.append((response.status_code, response.headers.get("www-authenticate")))

        @asynccontextmanager
        async def connect(url_elicitation: bool = True, anonymous: bool = False) -> AsyncIterator[Client]:
            http = httpx2.AsyncClient(headers={} if anonymous else {"Authorization": f"Bearer {token}"},
                                      timeout=httpx2.Timeout(30.0), event_hooks={"response": [seen]})
            async with Client(streamable_http_client(f"{base}/mcp", http_client=http),
                              mode=MODES[version], **_declared(url_elicitation)) as client:
                yield client

        yield Served(path, transport, version, connect, process.output, ran, f"{base}/mcp", answers)


def envelope(result: mcp_types.CallToolResult) -> dict[str, Any] | None:
    found = (result.meta or {}).get(AUTHORIZATION_META_KEY)
    if found is not None:
        assert AuthorizationDenial.from_meta(result.meta) is not None, found  # the client reads it
    return found


def shape(found: dict[str, Any] | None) -> tuple[str, list[Any]] | None:
    if found is None:
        return None
    assert set(found) <= {"reason", "remediation", "authorizationContextId", "remediationHints"}
    assert found["reason"] == "insufficient_authorization"
    assert found["authorizationContextId"].startswith("authzctx_")
    return found["remediation"], found.get("remediationHints", [])





STEP_UP = ('Bearer error="insufficient_scope", scope="mission:write", '
           "error_description=\"tool 'scope_only' needs more scopes\"")


async def the_table(served: Served, client: Client) -> None:
    """Each row's denial, as the client receives it (or the 403 an HTTP transport answers)."""
    seen: dict[str, Any] = {}
    for name, _, http in ROWS:
        if served.transport == "http" and http == "403":
            assert served.answers is not None
            before = len(served.answers)
            with pytest.raises(MCPError):  # the SDK's client without an OAuth provider stops there
                await client.call_tool(name, {})
            seen[name] = [a for a in served.answers[before:] if a[0] != 200]
            continue
        result = await client.call_tool(name, {})
        assert result.is_error is True, name
        seen[name] = shape(envelope(result))
    assert seen == {name: ([(403, STEP_UP)] if served.transport == "http" and http == "403"
                           else stdio) for name, stdio, http in ROWS}
    unlisted = (await client.call_tool("dup", {})).structured_content
    assert unlisted is not None and unlisted["error"] == "unlisted_tool"


async def quotas_and_allowed_calls(client: Client) -> None:
    """A quota alone is no authorization denial; an allowed call carries no envelope."""
    first = await client.call_tool("metered", {})
    second = await client.call_tool("metered", {})
    assert first.is_error is False and envelope(first) is None
    payload = denial_of(second)
    assert second.is_error is True and envelope(second) is None
    assert (payload is not None and payload["unmet"] == [] and payload["withheld"] == 1) \
        or (payload is not None and payload["retry_after_seconds"] > 0)
    opened = await client.call_tool("open", {})
    assert opened.is_error is False and envelope(opened) is None


async def the_echo(served: Served, client: Client) -> None:
    """A retry that echoes a context ID is decided afresh, grants nothing, and its record names
    the echo; a malformed one is ignored (never recorded)."""
    first = envelope(await client.call_tool("env_only", {}))
    assert first is not None
    echo = first["authorizationContextId"]
    retry = await client.call_tool("env_only", {}, meta=request_meta({CONTEXT_ID_META_KEY: echo}))
    again = envelope(retry)
    assert retry.is_error is True and again is not None and again["authorizationContextId"] != echo
    garbage = "x" * 5000
    await client.call_tool("env_only", {}, meta=request_meta({CONTEXT_ID_META_KEY: garbage}))
    opened = await client.call_tool("open", {}, meta=request_meta({CONTEXT_ID_META_KEY: echo}))
    assert opened.is_error is False
    records = [r for r in served.records() if r["tool"] in ("env_only", "open")]
    assert [(r["tool"], r["allowed"], r.get("context_id"), r.get("echoed_context_id"))
            for r in records][-4:] == [
        ("env_only", False, echo, None), ("env_only", False, again["authorizationContextId"], echo),
        ("env_only", False, records[-2].get("context_id"), None), ("open", True, None, echo)]
    assert garbage not in served.log()


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("path", PATHS)
async def test_every_denial_has_its_envelope_on_both_paths(
        path: str, transport: str, version: str, tmp_path: Path, oidc_server: OidcServer) -> None:
    with serving(path, transport, version, tmp_path, oidc_server) as served:
        async with served.connect() as client:
            await the_table(served, client)
            await quotas_and_allowed_calls(client)
            await the_echo(served, client)
        async with served.connect(url_elicitation=False) as client:  # no URL-mode elicitation
            assert shape(envelope(await client.call_tool("signoff", {}))) == ("undisclosed", [])
        if transport == "stdio":
            async with served.connect(anonymous=True) as client:
                assert shape(envelope(await client.call_tool("oauth", {}))) == UNAVAILABLE
        else:
            assert served.answers is not None
            with pytest.raises(Exception):  # noqa: B017 - the SDK's error for an HTTP 401
                async with served.connect(anonymous=True):
                    pass
            status, challenge = served.answers[-1]
            assert status == 401 and challenge is not None and challenge.startswith("Bearer ")
    assert sorted(served.ran.read_text(encoding="utf-8").split()) == ["metered", "open", "open"]
