"""Every request for a caller goes as that caller, end to end (SPEC §14, issue 39 item 3): a real
gateway process, the real oidc-provider verifying callers and exchanging their tokens (RFC 8693),
and behind it a records server that verifies its own tokens and serves each caller their own
(tests/fixtures/record_server.py). Before, `resources/read`, `prompts/get` and completions went
with the gateway's service token: bob read alice's record. Now the server sees alice or bob, never
the gateway's service account, for everything but the gateway's own catalog; bob cannot read
alice's record; and a caller whose credential cannot be obtained is refused with the
`credential:KEY` refusal (-32001, its envelope in `data`), nothing sent.

Interop, marked, with why: every path as each caller end to end, through a real gateway process
whose credentials are the real provider's token exchanges, to a server that verifies the exchanged
tokens against the provider's keys; an in-process stand-in for the exchange would check only
itself. (A caller without a subject refused per-subject keys is test_credentials_no_subject's, in
the default tier.)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.fixtures.credential_gateway import Gateway, exchange, gateway
from tests.fixtures.oidc import CRM, CRM_AUDIENCE, OidcServer
from tests.fixtures.record_server import RecordServer, record_server

pytestmark = [pytest.mark.integration, pytest.mark.interop]


@pytest.fixture(scope="module")
def records(oidc_server: OidcServer, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[RecordServer]:
    with record_server(oidc_server.issuer, CRM_AUDIENCE, tmp_path_factory.mktemp("records")) as server:
        yield server


@pytest.fixture(scope="module")
def gw(oidc_server: OidcServer, records: RecordServer, tmp_path_factory: pytest.TempPathFactory
       ) -> Iterator[Gateway]:
    service = oidc_server.token("mission-control", resource=CRM, scope=None)
    servers = {
        "crm": {"url": records.url, "headers": {"Authorization": "env:CRM_SERVICE"},
                "credentials": exchange(oidc_server)},
        "nowhere": {"url": records.url, "headers": {"Authorization": "env:CRM_SERVICE"},
                    "credentials": exchange(oidc_server, "urn:mcp:nowhere")},  # never exchanged
    }
    with gateway(tmp_path_factory.mktemp("gateway"), oidc_server, servers,
                 env={"CRM_SERVICE": f"Bearer {service}"}) as running:
        yield running


async def crm_listed(client: Client) -> None:
    """Until the caller's own listing holds crm's prompt: their first listing of crm (a token
    exchange, then their session's handshake) is left out while slower than the gateway's wait
    for a listing (5 s, `LIST_WAIT_SECONDS`), as a loaded machine makes it; each listing waits."""
    with anyio.fail_after(10):
        while "crm__greeting" not in [p.name for p in (await client.list_prompts()).prompts]:
            pass


@pytest.fixture(scope="module")
def tokens(oidc_server: OidcServer) -> dict[str, str]:
    return {who: oidc_server.user_token(who) for who in ("alice", "bob")}


@asynccontextmanager
async def as_caller(url: str, token: str) -> AsyncIterator[Client]:
    transport = streamable_http_client(url, http_client=httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=10))
    async with Client(transport, mode="legacy", cache=None) as client:
        yield client


async def read(client: Client, uri: str) -> str:
    contents = (await client.read_resource(uri)).contents
    assert isinstance(contents[0], mcp_types.TextResourceContents)
    return contents[0].text


async def what_each_sees(url: str, token: str, who: str) -> dict[str, Any]:
    async with as_caller(url, token) as client:
        await crm_listed(client)
        prompt = (await client.get_prompt("crm__greeting")).messages[0].content
        assert isinstance(prompt, mcp_types.TextContent)
        completion = await client.complete(
            mcp_types.ResourceTemplateReference(type="ref/resource", uri="crm://records/{owner}"),
            {"name": "owner", "value": ""})
        with pytest.raises(MCPError) as others:
            await read(client, f"crm://records/{'bob' if who == 'alice' else 'alice'}")
        return {"whoami": await read(client, "crm://whoami"),
                "own record": await read(client, f"crm://records/{who}"),
                "other's record": others.value.error.message,
                "greeting": prompt.text, "completion": completion.completion.values,
                "listed": sorted(str(r.uri) for r in (await client.list_resources()).resources),
                "templates": sorted(t.uri_template for t in
                                    (await client.list_resource_templates()).resource_templates)}


def test_each_caller_reads_as_themselves_and_bob_cannot_read_alices_record(
        gw: Gateway, records: RecordServer, tokens: dict[str, str]) -> None:
    before = len(records.requests())
    seen = {who: asyncio.run(what_each_sees(gw.url, tokens[who], who)) for who in ("alice", "bob")}
    for who, other in (("alice", "bob"), ("bob", "alice")):
        assert seen[who]["whoami"] == who
        assert seen[who]["own record"] == f"{who}'s record"
        assert f"crm://records/{other}" in seen[who]["other's record"] or \
            "not yours" in seen[who]["other's record"]
        assert seen[who]["greeting"] == f"hello {who}"
        assert seen[who]["completion"] == [who]
        assert "crm://whoami" in seen[who]["listed"]
        assert "crm://records/{owner}" in seen[who]["templates"]
    served = records.requests()[before:]
    assert {r["subject"] for r in served} == {"alice", "bob"}  # never the gateway's own account
    assert {"record alice", "record bob", "whoami", "greeting", "complete"} <= \
        {r["what"] for r in served}
    assert {r["subject"] for r in served if r["what"] == "record alice"} == {"alice", "bob"}


def test_a_caller_without_a_credential_for_the_server_is_refused_and_nothing_is_sent(
        gw: Gateway, records: RecordServer, tokens: dict[str, str]) -> None:
    async def ask() -> tuple[Any, list[str]]:
        async with as_caller(gw.url, tokens["alice"]) as client:
            await crm_listed(client)
            with pytest.raises(MCPError) as refused:
                await client.get_prompt("nowhere__greeting")
            prompts = sorted(p.name for p in (await client.list_prompts()).prompts)
            return refused.value.error, prompts

    before = len(records.requests())
    error, prompts = asyncio.run(ask())
    assert error.code == -32001
    assert error.message == ("Request prompts/get was not sent: unmet requirements: "
                             "credential:nowhere")
    assert error.data["unmet"] == ["credential:nowhere"]
    assert error.data["_meta"]["io.modelcontextprotocol/authorization"]["remediation"] == \
        "unavailable"
    assert prompts == ["crm__greeting"]  # the server she has no credential for: left out
    assert [r["what"] for r in records.requests()[before:]] == []  # (a listing logs nothing)
