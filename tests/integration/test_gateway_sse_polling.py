"""The gateway as an SSE polling server in its own right (SEP-1699, the suite's `server-sse-polling`)
in front of a stdio server, which closes no stream: each call's stream of a 2025-11-25 session
begins with a priming event (an id, `retry`, no data); with `--sse-poll-seconds` a call still
running that long has its stream closed after it, and the client's GET with that id gets the rest.
A stream so kept is its session's alone, and its principal's: anyone else's GET finds nothing. An
older session's calls and a 2026-07-28 request carry no event ids (closing one of those cancels it).

In-process (tests/fixtures/inprocess.py): the gateway wired from its command line, its upstream the
logging server in memory (a stdio server to the gateway), callers verified by `[auth]` with an
inline test key. The closing is the gateway's timer, due well before the `slow` tool can answer
(the tool sleeps after it got the request, which the gateway sends after starting the timer).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.inprocess import InProcess, logging_gateway
from tests.fixtures.oidc import SigningKey, access_claims
from tests.integration.test_gateway_polling_relayed import Event, answers, events

pytestmark = pytest.mark.asyncio(loop_scope="module")

ISSUER, AUDIENCE = "https://issuer.polling.test", "urn:mcp:gateway"
KEY = SigningKey("EC", "own-polling")
LEGACY, OLDER, MODERN = "2025-11-25", "2025-06-18", "2026-07-28"
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def token_of(who: str) -> str:
    return KEY.sign(access_claims(ISSUER, aud=AUDIENCE, sub=who, jti=f"{who}-{time.time_ns()}"))


@asynccontextmanager
async def gateway(tmp_path: Path, *options: str) -> AsyncIterator[InProcess]:
    jwk = ", ".join(f"{k} = {json.dumps(v)}" for k, v in KEY.public_jwk().items())
    policy = tmp_path / "policy.toml"
    policy.write_text(f'[auth]\nissuer = "{ISSUER}"\naudience = "{AUDIENCE}"\n'
                      f'keys = [{{ {jwk} }}]\nalgorithms = ["{KEY.alg}"]\n', encoding="utf-8")
    async with logging_gateway(policy, tmp_path / "upstream.jsonl", "--listen",
                               "http://127.0.0.1:0", *options) as gw:
        yield gw


async def session(http: httpx.AsyncClient, who: str, version: str = LEGACY) -> dict[str, str]:
    """A session `who` opened at `version`: the headers its requests carry."""
    mine = {**ACCEPT, "authorization": f"Bearer {token_of(who)}"}
    opened = await http.post("/mcp", headers=mine, json={
        "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    assert opened.status_code == 200, opened.text
    mine.update({"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": version})
    done = await http.post("/mcp", headers=mine,
                           json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert done.status_code == 202
    return mine


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}


async def posted(http: httpx.AsyncClient, headers: dict[str, str], message: dict[str, Any]
                 ) -> list[Event]:
    async with http.stream("POST", "/mcp", headers=headers, json=message) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return await events(response)


async def resumed(http: httpx.AsyncClient, headers: dict[str, str], last: str) -> list[Event]:
    get = {k: v for k, v in headers.items() if k != "content-type"}
    async with http.stream("GET", "/mcp", headers={
            **get, "accept": "text/event-stream", "last-event-id": last}) as response:
        assert response.status_code == 200
        return await events(response)


async def test_a_call_answered_at_once_begins_with_a_priming_event(tmp_path: Path) -> None:
    """Fails on the old code: the answer alone, with no event id and no `retry`."""
    async with gateway(tmp_path) as gw, gw.http() as http:
        mine = await session(http, "alice")
        found = await posted(http, mine, call("echo", text="hi"))
        again = await posted(http, mine, call("echo", text="hi"))
    assert found[0] == Event("1.0", 500, "") and found[0].id != again[0].id == "2.0"
    assert [a["id"] for a in answers(found)] == [2] and found[1].id is None


async def test_a_call_still_running_is_closed_for_polling_and_resumed_by_its_caller_alone(
        tmp_path: Path) -> None:
    """Fails on the old code: no `--sse-poll-seconds`; and behind a stdio server the stream of a
    call stayed open for its answer, with no event id."""
    async with gateway(tmp_path, "--sse-poll-seconds", "0.05") as gw, gw.http() as http:
        mine = await session(http, "alice")
        closed = await posted(http, mine, call("slow", seconds=0.3))
        assert closed == [Event("1.0", 500, "")]  # the priming event, then the end
        last = closed[0].id
        assert last is not None

        # Bob, on Alice's session: no such session. On his own: no such stream (it ends at once).
        bob = {**mine, "authorization": f"Bearer {token_of('bob')}"}
        async with http.stream("GET", "/mcp", headers={
                **bob, "accept": "text/event-stream", "last-event-id": last}) as other:
            assert other.status_code == 404
        assert await resumed(http, await session(http, "bob"), last) == []
        # Alice's other session has none of her first session's streams either.
        assert await resumed(http, await session(http, "alice"), last) == []

        found = await resumed(http, mine, last)
    assert [a["id"] for a in answers(found)] == [2]
    assert answers(found)[0]["result"]["content"] == [{"type": "text", "text": "slow done"}]
    assert found[-1].id == "1.1"


async def test_an_older_session_and_a_2026_request_have_no_event_ids(tmp_path: Path) -> None:
    """Polling is 2025-11-25's: a 2025-06-18 client's stream is neither primed nor closed, and a
    2026-07-28 request stands alone (closing its stream cancels it)."""
    async with gateway(tmp_path, "--sse-poll-seconds", "0.05") as gw, gw.http() as http:
        older = await session(http, "alice", OLDER)
        found = await posted(http, older, call("slow", seconds=0.3))
        meta = {"io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {}}
        modern = {**ACCEPT, "authorization": f"Bearer {token_of('alice')}",
                  "mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": "echo"}
        plain = await http.post("/mcp", headers=modern, json={
            "jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "hi"}, "_meta": meta}})
    assert all(e.id is None and e.retry is None for e in found)
    assert answers(found)[-1]["id"] == 2
    assert plain.headers["content-type"] == "application/json" and plain.json()["id"] == 3
