"""SPEC §15's table, held by one parametrized test on both paths (issue 33): the same listed server
(tests/fixtures/listed_server.py) guarded by `guard_server` as tests/fixtures/guarded_listed.py runs
it, and behind `mcp-preconditions gateway`, reached through the MCP SDK's client at both protocol
versions, as a stdio server (the caller given by --claims) and over streamable HTTP (tokens that lack
`mission:write`). Every denial's SEP-2643 envelope matches its row on every path; over HTTP a call
that only lacks scopes is the 403 challenge and a call without a token the 401 (no envelope); a
retry that echoes a context ID is decided afresh and recorded with the echo.

In-process: the hosted server reached in memory (stdio) or through its streamable HTTP app (the SDK's
auth verifying tokens signed in this process, in `InsufficientScopeChallenge`) over the streaming
bridge, a fresh server per stdio connection (as a process per launch); the gateway over HTTP wired
from its command line (tests/fixtures/inprocess.py) with the listed server in memory
(tests/fixtures/memory_upstream.py). Interop, marked: the gateway's stdio rows, a real gateway child
in front of a real listed server child, launched by the SDK's stdio client: a stdio-wired gateway
served over the in-process bridge would still see each call's HTTP headers and answer the scope row's
403, which its stdio listener never does (a call there has no headers). The provider's own tokens are
test_mcp_http's and the gateway's interop files'.

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
import logging
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
from mcp.server.auth.settings import AuthSettings
from mcp.shared.exceptions import MCPError

from mcp_preconditions.denials import SCOPE_DETAILS_TYPE
from mcp_preconditions.envelope import AUTHORIZATION_META_KEY, CONTEXT_ID_META_KEY, AuthorizationDenial
from mcp_preconditions.guard import Guard
from mcp_preconditions.integrations.client_mcp import denial_of
from mcp_preconditions.integrations.mcp_sdk import guard_server
from mcp_preconditions.integrations.step_up import InsufficientScopeChallenge
from mcp_preconditions.policy.load import load_policy
from mcp_preconditions.principal import ANONYMOUS, Credentials, Principal
from mcp_preconditions.wire import META_KEY
from tests.fixtures.asgi_bridge import AsgiBridge
from tests.fixtures.hosted import ISSUER
from tests.fixtures.inprocess import BASE_URL, LogLines, cli_gateway
from tests.fixtures.listed_server import build
from tests.fixtures.mcp_servers import CLI, MODES, ROOT, VERSIONS, request_meta, server_env
from tests.fixtures.memory_upstream import MemoryServers
from tests.fixtures.signoff_resolver import PAGES, Signoffs

pytestmark = pytest.mark.integration

CLIENT = "mission-control"  # the issuer's client: its tokens' subject
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
    ran: Callable[[], list[str]]  # the names of the calls the listed server ran
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


def _files(tmp_path: Path) -> tuple[Path, Path]:
    """The policy (verifying the issuer's tokens) and the stdio caller's claims."""
    policy, claims = tmp_path / "policy.toml", tmp_path / "claims.json"
    policy.write_text(POLICY + "[auth]\n" + ISSUER.auth_lines(), encoding="utf-8")
    claims.write_text(json.dumps(CLAIMS), encoding="utf-8")
    return policy, claims


@contextmanager
def decisions_logged() -> Iterator[LogLines]:
    """The hosted server's decision records (`log_decisions()` shows them on its stderr), kept."""
    log, logger = LogLines(), logging.getLogger("mcp_preconditions.decisions")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(log)
    try:
        yield log
    finally:
        logger.removeHandler(log)
        logger.setLevel(level)


def _hosted(policy: Path, ran: list[str], caller: Credentials | None) -> tuple[Any, Any]:
    """tests/fixtures/guarded_listed.py's server: the listed server guarded by `guard_server`,
    the caller fixed (stdio) or None (over HTTP: the SDK's auth)."""
    server = build(TOOLS, ran.append)
    guard = Guard(load_policy(policy), resolvers=[Signoffs()])
    fixed = caller
    return server, guard_server(server, guard,
                                credentials=None if fixed is None else (lambda _request: fixed))


def _gateway_argv(policy: Path, upstream: list[str], *options: str) -> list[str]:
    return ["--policy", str(policy), "--resolver", RESOLVER, *options, "--", *upstream]


@asynccontextmanager
async def _gateway_child(tmp_path: Path, version: str, url_elicitation: bool, anonymous: bool
                         ) -> AsyncIterator[Client]:
    """A real gateway child on stdio in front of a real listed server child (its calls in
    RAN.log, its stderr in stderr.log)."""
    policy, claims = _files(tmp_path)
    listing = tmp_path / "tools.json"
    listing.write_text(json.dumps(TOOLS), encoding="utf-8")
    upstream = [sys.executable, "-m", "tests.fixtures.listed_server", str(listing),
                str(tmp_path / "ran.log")]
    command = [*CLI, "gateway", *_gateway_argv(policy, upstream,
                                               *([] if anonymous else ["--claims", str(claims)]))]
    params = StdioServerParameters(command=command[0], args=command[1:], env=server_env(), cwd=ROOT)
    with (tmp_path / "stderr.log").open("a", encoding="utf-8") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode=MODES[version],
                          **_declared(url_elicitation)) as client:
            yield client


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8") if path.exists() else ""


@asynccontextmanager
async def serving(path: str, transport: str, version: str, tmp_path: Path) -> AsyncIterator[Served]:
    if (path, transport) == ("gateway", "stdio"):
        @asynccontextmanager
        async def child(url_elicitation: bool = True, anonymous: bool = False) -> AsyncIterator[Client]:
            async with _gateway_child(tmp_path, version, url_elicitation, anonymous) as client:
                yield client

        yield Served(path, transport, version, child, lambda: _read(tmp_path / "stderr.log"),
                     lambda: _read(tmp_path / "ran.log").split())
        return
    policy, _ = _files(tmp_path)
    ran: list[str] = []
    if transport == "http":
        async with _over_http(path, version, policy, ran) as served:
            yield served
        return

    @asynccontextmanager
    async def connect(url_elicitation: bool = True, anonymous: bool = False) -> AsyncIterator[Client]:
        caller = ANONYMOUS if anonymous else Credentials(principal=Principal.from_claims(CLAIMS))
        server, _ = _hosted(policy, ran, caller)
        async with Client(server, mode=MODES[version], **_declared(url_elicitation)) as client:
            yield client

    with decisions_logged() as log:
        yield Served(path, transport, version, connect, lambda: "\n".join(log.lines), lambda: ran)


@asynccontextmanager
async def _over_http(path: str, version: str, policy: Path, ran: list[str]) -> AsyncIterator[Served]:
    answers: list[tuple[int, str | None]] = []

    async def seen(response: httpx2.Response) -> None:
        answers.append((response.status_code, response.headers.get("www-authenticate")))

    async with _http_app(path, policy, ran) as (bridge, lines):
        token = ISSUER.token(CLIENT, scope="mission:read")

        @asynccontextmanager
        async def connect(url_elicitation: bool = True, anonymous: bool = False
                          ) -> AsyncIterator[Client]:
            http = bridge.httpx2(headers={} if anonymous else {"Authorization": f"Bearer {token}"},
                                 event_hooks={"response": [seen]})
            async with Client(streamable_http_client(f"{BASE_URL}/mcp", http_client=http),
                              mode=MODES[version], **_declared(url_elicitation)) as client:
                yield client

        yield Served(path, "http", version, connect, lambda: "\n".join(lines), lambda: ran,
                     f"{BASE_URL}/mcp", answers)


@asynccontextmanager
async def _http_app(path: str, policy: Path, ran: list[str]
                    ) -> AsyncIterator[tuple[AsgiBridge, list[str]]]:
    """The path's HTTP app on a bridge, and the lines it logs (its decision records among them)."""
    if path == "gateway":
        servers = MemoryServers()
        upstream = servers.add("listed", lambda _env, _die: build(TOOLS, ran.append))
        argv = _gateway_argv(policy, upstream, "--listen", "http://127.0.0.1:0")
        with servers.installed():
            async with cli_gateway(argv) as gw:
                await gw.until_ready()
                yield gw.bridge, gw.log.lines
        return
    server, pre = _hosted(policy, ran, None)
    app = server.streamable_http_app(
        token_verifier=ISSUER.verifier(),
        auth=AuthSettings(issuer_url=ISSUER.issuer, resource_server_url=f"{BASE_URL}/mcp",
                          validate_token_resource=False))
    with decisions_logged() as log:
        async with AsgiBridge(InsufficientScopeChallenge(app, pre), base_url=BASE_URL) as bridge:
            yield bridge, log.lines


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
@pytest.mark.parametrize(("path", "transport"), [
    ("hosted", "stdio"), ("hosted", "http"),
    pytest.param("gateway", "stdio", marks=pytest.mark.interop), ("gateway", "http")])
async def test_every_denial_has_its_envelope_on_both_paths(
        path: str, transport: str, version: str, tmp_path: Path) -> None:
    async with serving(path, transport, version, tmp_path) as served:
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
    assert sorted(served.ran()) == ["metered", "open", "open"]
