"""SSE polling relayed (SEP-1699, the suite's `server-sse-polling`), in process: a `Gateway` served on
127.0.0.1 in front of the faithful conformance server over streamable HTTP (in this event loop),
whose `test_reconnection` closes the call's stream before its answer and answers once its client
reconnects with `Last-Event-ID`. The gateway reconnects to the server so, and closes its own
client's stream of that call likewise: an event with an id and the server's `retry` first, then the
end; the client's GET with that id gets the answer (every call's stream is primed so, whatever
its server does: tests/integration/test_gateway_sse_polling.py). A stream so kept is its session's alone, and
its principal's: anyone else's GET finds nothing.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from mcp_preconditions.auth.header import credentials_from_authorization_header
from mcp_preconditions.gateway import Gateway, ServerSpec
from mcp_preconditions.guard import Guard
from mcp_preconditions.policy.load import PolicySource
from mcp_preconditions.policy.model import Policy
from tests.fixtures import conformance_server
from tests.fixtures.inprocess import served
from tests.fixtures.oidc import SigningKey
from tests.integration.test_gateway_conformance_bridge import asgi_served

LEGACY = "2025-11-25"
ISSUER, AUDIENCE = "https://idp.polling.test", "urn:mcp:gateway"
KEY = SigningKey("RSA", "polling")
DONE = ("Reconnection test completed successfully. If you received this, the client properly "
        "reconnected after stream closure.")


def token_of(who: str) -> str:
    now = int(time.time())
    return KEY.sign({"iss": ISSUER, "aud": AUDIENCE, "sub": who, "iat": now, "exp": now + 600,
                     "jti": uuid.uuid4().hex})


@asynccontextmanager
async def gateway() -> AsyncIterator[str]:
    """The gateway (callers verified by `[auth]`, every tool open) in front of the faithful
    server over streamable HTTP; yields its `/mcp` URL."""
    policy = Policy.model_validate({"auth": {"issuer": ISSUER, "audience": AUDIENCE,
                                             "keys": [KEY.public_jwk()]}})
    guard = Guard(PolicySource(policy, "polling.toml", "polling", Path(".")))
    async with asgi_served(conformance_server.http_app()) as upstream:
        spec = ServerSpec("conformance", "", url=upstream + "/mcp")
        async with served(Gateway(guard, [spec], lambda call: credentials_from_authorization_header(
                call.authorization))) as url:
            yield url


@dataclass
class Event:
    id: str | None
    retry: int | None
    data: str


async def events(response: httpx.Response) -> list[Event]:
    """Every event of an event stream, until it ends."""
    found: list[Event] = []
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if line == "":
            if fields:
                retry = fields.get("retry")
                found.append(Event(fields.get("id"), int(retry) if retry else None,
                                   fields.get("data", "")))
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")
    return found


def answers(found: list[Event]) -> list[dict[str, Any]]:
    return [json.loads(e.data) for e in found if e.data]


async def session(http: httpx.AsyncClient, url: str, who: str) -> dict[str, str]:
    """A 2025-11-25 session `who` opened on the gateway: the headers its requests carry."""
    mine = {"authorization": f"Bearer {token_of(who)}"}
    opened = await http.post(url, headers=mine, json={
        "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    assert opened.status_code == 200, opened.text
    mine.update({"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": LEGACY})
    await http.post(url, headers=mine, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    return mine


def resuming(headers: dict[str, str], last: str, who: str | None = None) -> dict[str, str]:
    """A GET resuming after event `last` on the session of `headers` (as `who`, if given)."""
    token = {"authorization": f"Bearer {token_of(who)}"} if who is not None else {}
    return {**headers, **token, "accept": "text/event-stream", "last-event-id": last}


def client() -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=10, headers={"accept": "application/json, text/event-stream"})


async def test_a_stream_the_server_closes_mid_call_is_closed_and_resumed_for_the_client() -> None:
    """Fails on the old code: the gateway's client of the server failed the call when the server
    closed its stream, and the client's stream carried that error, with no event id."""
    async with gateway() as url, client() as http:
        mine = await session(http, url, "alice")
        async with http.stream("POST", url, headers=mine, json={
                "jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "test_reconnection", "arguments": {}}}) as posted:
            assert posted.headers["content-type"].startswith("text/event-stream")
            closed = await events(posted)
        assert len(closed) == 1 and closed[0].data == "" and closed[0].retry == 500, closed
        last = closed[0].id
        assert last is not None

        # Another person on Alice's session: no such session. Alice's other session: no such
        # stream (it ends at once, as for one not kept).
        other = await http.get(url, headers=resuming(mine, last, "bob"))
        assert (other.status_code, other.json()["error"]["message"]) == (404, "Session not found")
        elsewhere = await session(http, url, "alice")
        async with http.stream("GET", url, headers=resuming(elsewhere, last)) as empty:
            assert empty.status_code == 200 and await events(empty) == []

        async with http.stream("GET", url, headers=resuming(mine, last)) as resumed:
            assert resumed.status_code == 200
            found = await events(resumed)
    assert [a["id"] for a in answers(found)] == [2]
    assert answers(found)[0]["result"]["content"] == [{"type": "text", "text": DONE}]
    assert all(e.id is not None and e.id != last for e in found)  # each resumable in turn


async def test_a_call_answered_on_its_stream_begins_with_a_priming_event_and_keeps_nothing() -> None:
    """Every call's stream of a 2025-11-25 session is primed (SEP-1699), with its answer in the
    same write when it comes at once; one answered on its own stream leaves nothing to resume."""
    async with gateway() as url, client() as http:
        mine = await session(http, url, "alice")
        async with http.stream("POST", url, headers=mine, json={
                "jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "test_simple_text", "arguments": {}}}) as posted:
            found = await events(posted)
        assert found[0] == Event(found[0].id, 500, "") and found[0].id is not None
        assert [e.id for e in found[1:]] == [None] and answers(found)[0]["id"] == 2
        async with http.stream("GET", url, headers=resuming(mine, found[0].id)) as resumed:
            assert resumed.status_code == 200 and await events(resumed) == []
