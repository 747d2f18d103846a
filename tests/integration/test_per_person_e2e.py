"""The per-person boundary end to end (SPEC §14, issue 39): real `mcp-preconditions gateway`
processes, the real oidc-provider (it verifies the callers, exchanges their tokens and issued the
connected accounts' and per-subject tokens), and SDK servers that verify their own tokens and serve
each person their own record, prompt, listing and completion (tests/fixtures/subject_servers.py).

One server per credential kind behind one HTTP gateway: `xc` (token exchange), `ps` (a per-subject
secret; carol has none) and `oa` (accounts connected at the provider, kept in Redis as a replica
keeps them; carol connected none). For every method the gateway forwards and both protocol
versions, alice, bob and carol each ask through the MCP SDK's client: each gets their own data and
the server saw each request as its caller, never as the gateway's service account; a caller
without a credential gets the refusal of `credential:KEY`, and nothing reaches the server; a listing
merged across the servers leaves that server out (carol's listings are `xc`'s, the one she has a
credential for), and is that refusal only when every server refused her (the stdio rows). A log
message and a resource update sent on alice's session reach alice, never bob who holds the same
resource; a sampling or elicitation asked on a caller's call reaches that caller's client only.
Over stdio (one caller, `--claims`) the same: alice's requests go as alice, carol's are refused and
nothing of hers is sent.

Interop, not in-process: the point is the real pieces together (the gateway's command line and
processes, the provider's exchange and code flows, the SDK's own server auth and client); the
wire-level hostility and the state machine are in-process (tests/properties/test_per_person_*.py).
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mcp_preconditions.credentials import Caller, ConnectedAccounts, Connection
from mcp_preconditions.credentials.stores_redis import RedisVault
from mcp_preconditions.resolvers.state_redis import RedisStateSource
from tests.fixtures.credential_gateway import (
    TOKEN_KEY,
    Gateway,
    connected,
    exchange,
    gateway,
    policy_text,
    secrets_file,
)
from tests.fixtures.credential_pages import wiki_settings
from tests.fixtures.fleet import write_gateway_toml
from tests.fixtures.mcp_servers import CLI, MODES, ROOT, server_env
from tests.fixtures.oidc import CRM, CRM_AUDIENCE, WIKI, WIKI_AUDIENCE, OidcServer
from tests.fixtures.redis import RedisServer
from tests.fixtures.subject_servers import SubjectServer, subject_server

pytestmark = [pytest.mark.integration, pytest.mark.interop]
PEOPLE = ("alice", "bob", "carol")
SERVICE = "mission-control"  # the subject of the gateway's own static tokens
KINDS = {"xc": ("alice", "bob", "carol"), "ps": ("alice", "bob"), "oa": ("alice", "bob")}  # holders
SERVICE_MAY = {"tools/list", "prompts/list", "resources/list", "resources/templates/list"}
METHODS = ("tools/call", "resources/read", "resources/list", "resources/templates/list",
           "prompts/list", "prompts/get", "completion/complete", "resources/subscribe")
ENVELOPE = "io.modelcontextprotocol/authorization"
MERGED = {"resources/list", "resources/templates/list", "prompts/list"}  # across the servers


@pytest.fixture(scope="module")
def tokens(oidc_server: OidcServer) -> dict[str, str]:
    """Each person's own access token for the gateway, as the app they signed in to holds it."""
    return {who: oidc_server.user_token(who) for who in PEOPLE}


@pytest.fixture(scope="module")
def servers(oidc_server: OidcServer, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[dict[str, SubjectServer]]:
    directory = tmp_path_factory.mktemp("subject-servers")
    with subject_server(oidc_server.issuer, CRM_AUDIENCE, "xc", directory) as xc, \
            subject_server(oidc_server.issuer, CRM_AUDIENCE, "ps", directory) as ps, \
            subject_server(oidc_server.issuer, WIKI_AUDIENCE, "oa", directory) as oa:
        yield {"xc": xc, "ps": ps, "oa": oa}


def connect_accounts(oidc: OidcServer, redis: RedisServer) -> None:
    """alice's and bob's accounts at `oa`'s authorization server (the provider's `connector`, code
    with PKCE as each signs in), kept sealed in the Redis store the gateway reads, as the gateway's
    callback keeps them (`ConnectedAccounts.save`)."""
    source = RedisStateSource(redis.url, connect_timeout=10, read_timeout=10)
    accounts = ConnectedAccounts("oa", wiki_settings(oidc, base64.b64decode(TOKEN_KEY), "redis"),
                                 RedisVault(source))

    async def save() -> None:
        for who in ("alice", "bob"):
            answer = oidc.code_flow("connector", "http://127.0.0.1/oauth/callback", who,
                                    "wiki:read", resource=WIKI)
            await accounts.save(Caller(oidc.issuer, who), Connection(
                answer["access_token"], answer.get("refresh_token"), time.time(),
                time.time() + float(answer.get("expires_in", 600))))
    asyncio.run(save())


@pytest.fixture(scope="module")
def gw(oidc_server: OidcServer, redis_server: RedisServer, servers: dict[str, SubjectServer],
       tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    directory = tmp_path_factory.mktemp("gateway")
    secrets_file(directory, {f"{oidc_server.issuer} {who}": "Bearer " + oidc_server.user_token(
        who, resource=CRM, scope="crm:read") for who in ("alice", "bob")})
    connect_accounts(oidc_server, redis_server)
    crm, wiki = {"Authorization": "env:CRM_SERVICE"}, {"Authorization": "env:WIKI_SERVICE"}
    tables = {"xc": {"url": servers["xc"].url, "headers": crm, "credentials": exchange(oidc_server)},
              "ps": {"url": servers["ps"].url, "headers": crm,
                     "credentials": {"kind": "per-subject", "secrets": "secrets.json"}},
              "oa": {"url": servers["oa"].url, "headers": wiki,
                     "credentials": connected(oidc_server, store="redis")}}
    env = {"CRM_SERVICE": "Bearer " + oidc_server.token("mission-control", resource=CRM, scope=None),
           "WIKI_SERVICE": "Bearer " + oidc_server.token("mission-control", resource=WIKI, scope=None)}
    with gateway(directory, oidc_server, tables, env=env,
                 policy=policy_text(oidc_server, redis_url=redis_server.url)) as running:
        yield running


# -- one method, as the SDK's client asks it --------------------------------------------------------
async def ask(client: Client, server: str, method: str) -> str:
    """The answer to `method` on `server`'s things, as JSON text (an error: its code and data);
    `resources/subscribe` is a subscription and its unsubscription."""
    uri, prompt = f"{server}://mine", f"{server}__brief"
    try:
        if method == "tools/call":
            found: Any = await client.call_tool(f"{server}__whoami", {})
        elif method == "resources/read":
            found = await client.read_resource(uri)
        elif method == "resources/list":
            found = [r for r in (await client.list_resources()).resources if str(r.uri) == uri]
        elif method == "resources/templates/list":
            found = [t for t in (await client.list_resource_templates()).resource_templates
                     if t.uri_template.startswith(f"{server}://")]
        elif method == "prompts/list":
            found = [p for p in (await client.list_prompts()).prompts if p.name == prompt]
        elif method == "prompts/get":
            found = await client.get_prompt(prompt)
        elif method == "completion/complete":
            found = await client.complete(mcp_types.PromptReference(type="ref/prompt", name=prompt),
                                          {"name": "topic", "value": "t"})
        else:  # and let go again: nothing of theirs is left to release after they leave
            await client.subscribe_resource(uri)
            found = await client.unsubscribe_resource(uri)
    except MCPError as exc:
        return json.dumps({"error": exc.error.code, "data": exc.error.data})
    return json.dumps(found, default=lambda m: m.model_dump(mode="json", by_alias=True))


def problems(server: SubjectServer, before: int, who: str, method: str, said: str,
             holder: bool, fleet: bool = True) -> list[str]:
    """What the server saw since `before`, and what `who` was answered, against SPEC §14 (`fleet`:
    the gateway has other servers too)."""
    found = []
    for line in server.requests()[before:]:
        subject = line["subject"]
        if subject == SERVICE and line["method"] not in SERVICE_MAY:
            found.append(f"{who}'s {method}: the server saw {line['method']} as the service account")
        elif subject not in (who, SERVICE):
            found.append(f"{who}'s {method}: the server saw {line['method']} as {subject}")
        elif subject == who and not holder:
            found.append(f"{who} has no credential, yet {line['method']} reached the server")
    others = [p for p in (*PEOPLE, SERVICE) if p != who and p in said]
    if others:
        found.append(f"{who}'s {method} got data of {others}: {said[:300]}")
    if holder and method != "resources/subscribe" and who not in said:
        found.append(f"{who}'s {method} is not their own answer: {said[:300]}")
    if not holder and not _refused(method, said, server.name, fleet):
        found.append(f"{who}'s {method} is not the refusal of credential:{server.name}: {said[:300]}")
    return found


def _refused(method: str, said: str, server: str, fleet: bool) -> bool:
    """SPEC §14's refusal of `credential:KEY`: a tool's denial, else -32001 with the envelope in
    `data`, its `unmet` naming that server's requirement (in front of one server, it alone; in
    the fleet, beside the others' the caller lacks where a URI or name none of hers has may be
    theirs). A listing merged across servers leaves that server out (`[]`: none of its items),
    and is the refusal only when no server contributed to it: in this fleet `xc` lists for
    everyone, so a merged listing is never refused; in front of one server it always is."""
    if method == "tools/call":
        return '"isError": true' in said and f"credential:{server}" in said
    if fleet and method in MERGED:
        return said == "[]"
    if not said.startswith('{"error": -32001') or ENVELOPE not in said:
        return False
    unmet = json.loads(said)["data"].get("unmet")
    return f"credential:{server}" in unmet if fleet else unmet == [f"credential:{server}"]


# -- over HTTP --------------------------------------------------------------------------------------
@asynccontextmanager
async def http_client(gw: Gateway, token: str, version: str, **hooks: Any) -> AsyncIterator[Client]:
    async with Client(streamable_http_client(gw.url, http_client=httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {token}"}, timeout=10)), mode=MODES[version],
            **hooks) as client:
        yield client


def _applicable() -> list[tuple[str, str, str]]:
    """(method, server, version): every method at every version that has it (2026-07-28 has no
    `resources/subscribe`: a listen stream names the resource)."""
    return [(method, server, version) for method in METHODS for server in KINDS for version in MODES
            if method != "resources/subscribe" or version == "2025-11-25"]


@pytest.mark.parametrize(("method", "server", "version"), _applicable())
def test_each_person_reaches_the_server_as_themselves_or_not_at_all(
        gw: Gateway, servers: dict[str, SubjectServer], tokens: dict[str, str], method: str,
        server: str, version: str) -> None:
    upstream = servers[server]

    async def row() -> list[str]:
        found = []
        for who in PEOPLE:
            before = len(upstream.requests())
            async with http_client(gw, tokens[who], version) as client:
                said = await ask(client, server, method)
            found += problems(upstream, before, who, method, said, who in KINDS[server])
        return found
    found = asyncio.run(row())
    assert not found, "\n".join(found)


@pytest.mark.parametrize("server", KINDS)
def test_what_the_server_sends_on_alices_session_reaches_alice_only(
        gw: Gateway, servers: dict[str, SubjectServer], tokens: dict[str, str], server: str) -> None:
    heard: dict[str, list[dict[str, Any]]] = {"alice": [], "bob": []}

    def hook(who: str) -> Any:
        async def handler(message: Any) -> None:
            dump = getattr(message, "model_dump", None)
            if callable(dump):
                heard[who].append(dump(mode="json", by_alias=True))
        return handler

    async def row() -> None:
        async with http_client(gw, tokens["bob"], "2025-11-25", message_handler=hook("bob")) as bob:
            await bob.subscribe_resource(f"{server}://mine")  # bob holds the same resource
            async with http_client(gw, tokens["alice"], "2025-11-25",
                                   message_handler=hook("alice")) as alice:
                await alice.subscribe_resource(f"{server}://mine")
                await alice.call_tool(f"{server}__shout", {})
            # bob's own call: alice's notifications were passed on before her answer, long since
            await bob.call_tool(f"{server}__whoami", {})
    asyncio.run(row())
    assert "shout of alice" in json.dumps(heard["alice"])
    assert "alice" not in json.dumps(heard["bob"]), heard["bob"]
    assert not [m for m in heard["bob"] if "resources/updated" in json.dumps(m)], heard["bob"]


@pytest.mark.parametrize("version", MODES)
@pytest.mark.parametrize("server", KINDS)
def test_what_the_server_asks_on_a_callers_call_reaches_that_caller_only(
        gw: Gateway, tokens: dict[str, str], server: str, version: str) -> None:
    """Sampling and elicitation asked on alice's call (and on bob's), one at a time and at once:
    each person's client is asked only "for" themselves; alone, each call is answered (at once, a
    gateway that cannot tell whose call asks refuses to ask anyone: the call fails, nobody leaks)."""
    asked: dict[str, list[str]] = {"alice": [], "bob": []}

    def hooks(who: str) -> dict[str, Any]:
        async def sampling(_ctx: Any, params: Any) -> mcp_types.CreateMessageResult:
            asked[who].append(json.dumps(params.model_dump(mode="json")))
            return mcp_types.CreateMessageResult(role="assistant", model=f"model-of-{who}",
                                                 content=mcp_types.TextContent(type="text", text="ok"))

        async def elicitation(_ctx: Any, params: Any) -> mcp_types.ElicitResult:
            asked[who].append(json.dumps(params.model_dump(mode="json")))
            return mcp_types.ElicitResult(action="accept", content={})
        return {"sampling_callback": sampling, "elicitation_callback": elicitation}

    async def row() -> list[str]:
        found = []
        async with http_client(gw, tokens["alice"], version, **hooks("alice")) as alice, \
                http_client(gw, tokens["bob"], version, **hooks("bob")) as bob:
            clients = {"alice": alice, "bob": bob}
            for kind in ("sampling", "elicitation"):
                for who, client in clients.items():  # alone: asked, and answered
                    said = _text(await client.call_tool(f"{server}__ask", {"kind": kind}))
                    if f"{who} answered" not in said:
                        found.append(f"{who}'s {kind} alone: {said}")
                await asyncio.gather(*(c.call_tool(f"{server}__ask", {"kind": kind})  # at once:
                                       for c in clients.values()), return_exceptions=True)  # (refused)
        for who, questions in asked.items():
            found += [f"{who} was asked {q}" for q in questions if f"for {who}" not in q]
        return found
    found = asyncio.run(row())
    assert not found, "\n".join(found)


def _text(result: Any) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


# -- over stdio: one caller -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def stdio_config(oidc_server: OidcServer, servers: dict[str, SubjectServer],
                 tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A stdio gateway's config: `ps` behind it, per-subject secrets (alice's only)."""
    directory = tmp_path_factory.mktemp("stdio")
    secrets_file(directory, {f"{oidc_server.issuer} alice": "Bearer " + oidc_server.user_token(
        "alice", resource=CRM, scope="crm:read")})
    (directory / "policy.toml").write_text("", encoding="utf-8")
    config = write_gateway_toml(directory / "gateway.toml", "policy.toml", {
        "ps": {"url": servers["ps"].url, "headers": {"Authorization": "env:CRM_SERVICE"}}})
    with config.open("a", encoding="utf-8") as out:
        out.write('\n[servers.ps.credentials]\nkind = "per-subject"\nsecrets = "secrets.json"\n')
    for who in ("alice", "carol"):
        (directory / f"{who}.json").write_text(json.dumps({"iss": oidc_server.issuer, "sub": who}),
                                               encoding="utf-8")
    service = "Bearer " + oidc_server.token("mission-control", resource=CRM, scope=None)
    return config, {"CRM_SERVICE": service}


@pytest.mark.parametrize("version", MODES)
@pytest.mark.parametrize("who", ["alice", "carol"])
def test_over_stdio_the_one_caller_reaches_the_server_as_themselves_or_not_at_all(
        servers: dict[str, SubjectServer], stdio_config: tuple[Path, dict[str, str]], who: str,
        version: str) -> None:
    config, env = stdio_config
    command = [*CLI, "gateway", "--config", str(config), "--claims",
               str(config.parent / f"{who}.json")]
    upstream = servers["ps"]

    async def row() -> list[str]:
        found = []
        params = StdioServerParameters(command=command[0], args=command[1:],
                                       env={**server_env(), **env}, cwd=ROOT)
        async with Client(stdio_client(params), mode=MODES[version]) as client:
            for method in METHODS:
                if method == "resources/subscribe" and version != "2025-11-25":
                    continue
                before = len(upstream.requests())
                said = await ask(client, "ps", method)
                found += problems(upstream, before, who, method, said, who == "alice", fleet=False)
        return found
    found = asyncio.run(row())
    assert not found, "\n".join(found)
