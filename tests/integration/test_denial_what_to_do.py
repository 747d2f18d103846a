"""A denial says what to do, in one plain sentence of its text, for every client (SPEC §15, issue 40
item 2): each remedy kind, through a hosted adapter (tests/fixtures/listed_server.py guarded
in-process by `guard_server`) and through the gateway (a `Gateway` in the test's process, served
over streamable HTTP, the same listed server behind it over stdio), reached by the MCP SDK's
client at 2025-11-25 and 2026-07-28, from a client that declared URL-mode elicitation and one that
declared nothing. The words are the same for both clients (the pages sign a person in: no
secret); the envelope's remediation stays SPEC §15's table. A confidential requirement unmet: the
text says nothing beyond SPEC §3, and nothing hints at it.

| unmet | the sentence | paths |
|---|---|---|
| `env:` (and any requirement nobody but an operator changes) | Ask an operator. | both |
| `auth:scope:` alone | none: "Missing scopes: ..." says it | hosted (over HTTP: the 403) |
| a confidential requirement | none | both |
| a resolver's offer (`signoff:`) | its own words | both |
| a backend that failed (`flaky:`) | A service the check needs did not answer; try again. | both |
| `auth:` whose verifier failed | The authorization server did not answer; try again. | hosted |
| `credential:` whose exchange failed | The authorization server did not answer; try again. | gateway |
| `credential:` of an `oauth` server | Connect your account for wiki at GATEWAY/connections. | gateway |
| `approval:` by approvers, waiting | Waiting for an approver: request ID, GATEWAY/approvals. | gateway |
| the same, refused | Refused by an approver. | gateway |
| `approval:` self, declined | The caller declined. | both |
| `approval:` self, a client that cannot be asked | The caller must confirm this call, and ... | both |
| a tool no server lists | Ask an operator. | gateway |
| a quota alone | none: "Retry after N s" says when | both |
"""

from __future__ import annotations

import base64
import json
import re
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp import Client

from mcp_preconditions.approvals import ApprovalResolver, Party
from mcp_preconditions.credentials import (
    ConnectedAccounts,
    ConnectFlow,
    CredentialResolver,
    ExchangeCache,
    MemoryTickets,
    MemoryVault,
    TokenExchange,
)
from mcp_preconditions.envelope import AUTHORIZATION_META_KEY, Remediation, RemediationHint
from mcp_preconditions.gateway import Gateway, ServerSpec
from mcp_preconditions.guard import Guard
from mcp_preconditions.integrations.mcp_sdk import guard_server
from mcp_preconditions.namespaces import LiveSources
from mcp_preconditions.outcomes import Outcome
from mcp_preconditions.policy.load import parse_policy
from mcp_preconditions.principal import Credentials, Principal
from mcp_preconditions.remedies import Offer, OfferCall
from mcp_preconditions.requirements import body_of
from mcp_preconditions.wire import META_KEY
from tests.fixtures.inprocess import served
from tests.fixtures.listed_server import build
from tests.fixtures.mcp_servers import MODES, VERSIONS
from tests.unit.credentials_doubles import AuthServer
from tests.unit.test_credentials_accounts import oauth_settings
from tests.unit.test_credentials_exchange import settings

pytestmark = pytest.mark.integration

GATEWAY = "https://gw.example"
SIGNOFF = "https://signoff.example/"
BASE = """
environment = ["staging"]
confidential = ["env:testing", "credential:vault"]
[quotas.once]
calls = 1
per_seconds = 3600
[approvals.confirm]
approvers = "self"
"""
APPROVERS = """
[approvals.release]
approvers = ["auth:claim:role:rm"]
"""
# The hosted path's [auth]: a verifier whose keys cannot be fetched (nothing listens there), so a
# caller with a token is an `error`. (The gateway's HTTP listener would answer every call 401.)
AUTH_DOWN = """
[auth]
issuer = "https://idp.example"
audience = "notes"
jwks_uri = "http://127.0.0.1:9/jwks"
"""
ALICE = Credentials(token="alices-token", principal=Principal.from_claims(
    {"iss": "https://idp.example", "sub": "alice", "scope": "notes:read"}, kind="jwt"))
# A well-formed JWT whose keys are to be fetched from a JWKS nobody serves.
WITH_A_TOKEN = Credentials(token=".".join(
    base64.urlsafe_b64encode(json.dumps(part).encode()).rstrip(b"=").decode() for part in (
        {"alg": "RS256", "typ": "JWT", "kid": "k1"},
        {"iss": "https://idp.example", "aud": "notes", "sub": "bob", "exp": 4102444800})) + ".c2ln")


def tool(name: str, *requirements: str) -> dict[str, Any]:
    return {"name": name, "inputSchema": {"type": "object"}, "_meta": {META_KEY: list(requirements)}}


TOOLS = [tool("env_only", "env:production"), tool("scope", "auth:scope:notes:write"),
         tool("hidden", "env:testing", "auth:scope:notes:write"), tool("signoff", "signoff:release"),
         tool("flaky", "flaky:db"), tool("token", "auth:oauth2"), tool("metered", "quota:once"),
         tool("wipe", "approval:confirm"), tool("deploy", "approval:release"),
         tool("wiki", "credential:wiki"), tool("crm", "credential:crm"), tool("vault", "credential:vault")]


class Signoffs:
    """`signoff:NAME`: never satisfied; its remedy is a page, and words saying so."""

    namespace = "signoff"
    forms = ("signoff:NAME",)

    def validate(self, requirement: str) -> str | None:
        return None

    def resolve(self, requirement: str, context: object) -> Outcome:
        return Outcome.unsatisfied(requirement, "nobody signed off")

    async def offer(self, requirement: str, call: OfferCall) -> Offer | None:
        return Offer(Remediation.AVAILABLE, (RemediationHint("url", url=SIGNOFF + body_of(requirement)),),
                     f"ask the release manager to sign off at {SIGNOFF}")


class Flaky:
    """`flaky:NAME`: its backend is down."""

    namespace = "flaky"
    forms = ("flaky:NAME",)

    def validate(self, requirement: str) -> str | None:
        return None

    def resolve(self, requirement: str, context: object) -> Outcome:
        return Outcome.error(requirement, "the database did not answer within 0.5 s")


def credentials() -> CredentialResolver:
    """wiki and vault: accounts connected at their own authorization server (none is); crm: a
    token exchange at an authorization server that answers 503."""
    wiki = ConnectedAccounts("wiki", oauth_settings(), MemoryVault())
    vault = ConnectedAccounts("vault", oauth_settings(), MemoryVault())
    crm = TokenExchange("crm", settings(), ExchangeCache(),
                        transport=AuthServer(lambda form: (503, b"down")).transport())
    flow = ConnectFlow({"wiki": wiki, "vault": vault}, MemoryTickets(), GATEWAY)
    return CredentialResolver({"wiki": wiki, "vault": vault, "crm": crm}, flow)


@dataclass
class Served:
    """One path: a client (declaring URL elicitation or nothing; answering questions "decline"),
    the caller it calls as, and its guard."""

    path: str
    connect: Callable[..., Any]
    caller: list[Credentials]
    guard: Guard


async def _decline(_ctx: Any, _params: Any) -> mcp_types.ElicitResult:
    return mcp_types.ElicitResult(action="decline")


def _options(version: str, declared: bool) -> dict[str, Any]:
    return {"mode": MODES[version], **({"elicitation_callback": _decline} if declared else {})}


@asynccontextmanager
async def hosted(version: str) -> AsyncIterator[Served]:
    guard = Guard(parse_policy((BASE + AUTH_DOWN).encode(), "hosted.toml"),
                  resolvers=[Signoffs(), Flaky()], entry_points=False)
    caller = [ALICE]
    server = build([t for t in TOOLS if t["name"] not in ("deploy", "wiki", "crm", "vault")],
                   lambda _name: None)
    guard_server(server, guard, credentials=lambda _request: caller[0])

    @asynccontextmanager
    async def connect(declared: bool) -> AsyncIterator[Client]:
        async with Client(server, **_options(version, declared)) as client:
            yield client

    yield Served("hosted", connect, caller, guard)


@asynccontextmanager
async def gateway(version: str, tmp_path: Path) -> AsyncIterator[Served]:
    guard = Guard(parse_policy((BASE + APPROVERS).encode(), "gateway.toml"),
                  resolvers=[Signoffs(), Flaky(), credentials()], entry_points=False,
                  live=LiveSources(approvals_url=GATEWAY + "/"))
    listing, ran = tmp_path / "tools.json", tmp_path / "ran.log"
    listing.write_text(json.dumps(TOOLS), encoding="utf-8")
    caller = [ALICE]
    spec = ServerSpec("notes", "", command=sys.executable,
                      args=("-m", "tests.fixtures.listed_server", str(listing), str(ran)))
    async with served(Gateway(guard, [spec], lambda _call: caller[0])) as url:

        @asynccontextmanager
        async def connect(declared: bool) -> AsyncIterator[Client]:
            async with Client(url, **_options(version, declared)) as client:
                yield client

        yield Served("gateway", connect, caller, guard)


def text_of(result: mcp_types.CallToolResult) -> str:
    assert result.is_error is True, result
    (content,) = result.content
    assert isinstance(content, mcp_types.TextContent)
    return content.text


def remediation_of(result: mcp_types.CallToolResult) -> str | None:
    envelope = (result.meta or {}).get(AUTHORIZATION_META_KEY)
    return None if envelope is None else str(envelope["remediation"])


def not_run(tool: str, unmet: str) -> str:
    return f"Tool '{tool}' was not run: unmet requirements: {unmet}."


# (tool, the text, remediation to a client that declared URL elicitation, to one that declared
# nothing), the same on every path that has the tool.
ROWS: list[tuple[str, str, str, str]] = [
    ("env_only", not_run("env_only", "env:production") + " Ask an operator.", "unavailable", "unavailable"),
    ("scope", not_run("scope", "auth:scope:notes:write") + " Missing scopes: notes:write.",
     "available", "available"),
    ("hidden", "Tool 'hidden' was not run: unmet requirements: auth:scope:notes:write (+1 withheld). "
     "Missing scopes: notes:write.", "undisclosed", "undisclosed"),
    ("signoff", not_run("signoff", "signoff:release") + " Ask the release manager to sign off at "
     f"{SIGNOFF}.", "available", "undisclosed"),
    ("flaky", not_run("flaky", "flaky:db") + " A service the check needs did not answer; try again.",
     "undisclosed", "undisclosed"),
    ("vault", "Tool 'vault' was not run: unmet requirements (+1 withheld).", "undisclosed",
     "undisclosed"),
    ("wiki", not_run("wiki", "credential:wiki") + f" Connect your account for wiki at {GATEWAY}"
     "/connections.", "available", "undisclosed"),
    ("crm", not_run("crm", "credential:crm") + " The authorization server did not answer; try again.",
     "undisclosed", "undisclosed"),
    ("nope", "Tool 'nope' was not run: no server lists a tool of that name. Ask an operator.",
     "unavailable", "unavailable"),
]
CANNOT_ASK = (" The caller must confirm this call, and this client cannot ask (it declared no "
              "elicitation).")


async def the_table(served: Served, declared: bool) -> None:
    """Every row this path has, with the text and remediation that client is given."""
    async with served.connect(declared) as client:
        listed = {t.name for t in (await client.list_tools()).tools}
        seen, wanted = {}, {}
        for name, text, with_url, without in ROWS:
            if name == "scope" and served.path == "gateway":
                continue  # over HTTP a call that only lacks scopes is the 403 step-up, no text
            if name in listed or (name == "nope" and served.path == "gateway"):
                result = await client.call_tool(name, {})
                seen[name] = (text_of(result), remediation_of(result))
                wanted[name] = (text, with_url if declared else without)
        assert seen == wanted
        assert len(seen) == (8 if served.path == "gateway" else 5)
        # A self approval: declined by a client that can be asked; one that cannot, told so.
        wipe = await client.call_tool("wipe", {"path": "/"})
        assert (text_of(wipe), remediation_of(wipe)) == (
            not_run("wipe", "approval:confirm") + (" The caller declined." if declared else CANNOT_ASK),
            "unavailable" if declared else "undisclosed")
        # A quota alone: no envelope, and the text says when.
        await client.call_tool("metered", {})
        metered = text_of(await client.call_tool("metered", {}))
        assert re.fullmatch(r"Tool 'metered' was not run: unmet requirements: quota:once\. "
                            r"Retry after [0-9.]+ s\.", metered), metered


async def token_refused_by_a_verifier_that_is_down(served: Served) -> None:
    served.caller[0] = WITH_A_TOKEN
    async with served.connect(True) as client:
        result = await client.call_tool("token", {})
    served.caller[0] = ALICE
    assert (text_of(result), remediation_of(result)) == (
        not_run("token", "auth:oauth2") + " The authorization server did not answer; try again.",
        "undisclosed")


async def an_approver_is_waited_for_then_refuses(served: Served, declared: bool) -> None:
    resolver = served.guard.snapshot.registry.get("approval")
    assert isinstance(resolver, ApprovalResolver)
    store = resolver.approvals["release"].store
    arguments = {"client": "declared" if declared else "plain"}  # a call of its own: refused stays
    async with served.connect(declared) as client:
        waiting = await client.call_tool("deploy", arguments)
        (request,) = [r for r in await store.waiting() if r.binding.arguments == json.dumps(
            arguments, separators=(",", ":"))]
        assert (text_of(waiting), remediation_of(waiting)) == (
            not_run("deploy", "approval:release") + f" Waiting for an approver: request {request.id}, "
            f"{GATEWAY}/approvals.", "available" if declared else "undisclosed")
        assert await store.decide(request.id, "refuse", Party("https://idp.example", "rita"))
        refused = await client.call_tool("deploy", arguments)
        assert (text_of(refused), remediation_of(refused)) == (
            not_run("deploy", "approval:release") + " Refused by an approver.", "unavailable")


@pytest.mark.parametrize("version", VERSIONS)
async def test_the_hosted_adapter_says_what_to_do(version: str) -> None:
    async with hosted(version) as served:
        for declared in (True, False):
            await the_table(served, declared)
            served.guard.reload(served.guard.snapshot.source)  # a fresh quota for the next client
        await token_refused_by_a_verifier_that_is_down(served)


@pytest.mark.parametrize("version", VERSIONS)
async def test_the_gateway_says_what_to_do(version: str, tmp_path: Path) -> None:
    async with gateway(version, tmp_path) as served:
        for declared in (True, False):
            await the_table(served, declared)
            await an_approver_is_waited_for_then_refuses(served, declared)
            served.guard.reload(served.guard.snapshot.source)
