"""Whose call a server's question is for, with several calls in flight (gateway/callers.py),
in process: a `Gateway` served on 127.0.0.1 in front of the faithful conformance server
(tests/fixtures/conformance_server.py), reached over streamable HTTP (in this event loop) or as a
stdio server (in memory). Over HTTP each question arrives on the stream of the call that asks, and
goes to that call whatever else is in flight; a stdio server's question names no call, so it goes to
the one person whose calls are in flight (their call with a request waiting, first), and is refused
while two persons' are: never another person's guess (SPEC §14).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client

from mcp_preconditions.gateway import Gateway, ServerSpec
from mcp_preconditions.gateway.downstream import streamable
from mcp_preconditions.guard import Guard
from mcp_preconditions.policy.load import parse_policy
from mcp_preconditions.principal import ANONYMOUS
from tests.fixtures import conformance_server
from tests.fixtures.gateway_upstream import read_log, tool_calls
from tests.fixtures.inprocess import until
from tests.fixtures.memory_upstream import MemoryServers
from tests.integration.test_gateway_conformance_bridge import (
    ALICE,
    BOB,
    NAMED,
    REPLY,
    Bridge,
    bridge,
    bridged,
    keys,
    texts,
)

ELICIT = "test_input_required_result_elicitation"
SAMPLE = "test_input_required_result_sampling"
NOT_ROUTED = ("gateway: sampling/createMessage not routed: calls of 2 clients are in flight and the "
              "upstream does not say whose call asks")


@asynccontextmanager
async def stdio_bridge(upstream: Callable[[MemoryServers], list[str]] | None = None
                       ) -> AsyncIterator[Bridge]:
    """`bridge()`, the conformance server (or `upstream`'s) behind it a stdio server (in memory)."""
    servers = MemoryServers()
    argv = upstream(servers) if upstream is not None else servers.add(
        "conformance", lambda _env, _die: conformance_server.build())
    caller = [ALICE]
    guard = Guard(parse_policy(b"# every tool open\n", "gateway.toml"))
    with servers.installed():
        spec = ServerSpec("conformance", "", command=argv[0], args=tuple(argv[1:]))
        async with bridged(Gateway(guard, [spec], lambda _call: caller[0]), caller) as ready:
            yield ready


def content(result: mcp_types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, mcp_types.TextContent))


async def test_over_http_a_question_left_unanswered_holds_up_no_other_call() -> None:
    """The suite leaves calls waiting after their first round: the next caller's question still
    reaches it, on its own call's stream (fails on the old code, which refused it: "calls of 2
    clients are in flight and the upstream does not say whose call asks")."""
    async with bridge() as b:
        waiting = await b.call(ELICIT)  # Alice's: never retried
        assert keys(waiting) == {"user_name": "elicitation/create"}
        b.caller[0] = BOB
        first = await b.call(SAMPLE)
        assert keys(first) == {"model_reply": "sampling/createMessage"}
        done = await b.call(SAMPLE, requestState=first.result["requestState"],
                            inputResponses={"model_reply": REPLY})
        assert texts(done) == "Sampling result: Hello"
        b.caller[0] = ALICE  # and Alice's call is still hers to finish
        finished = await b.call(ELICIT, requestState=waiting.result["requestState"],
                                inputResponses={"user_name": NAMED})
    assert texts(finished) == "Hello, Alice!"


async def test_over_http_two_2025_clients_are_each_asked_their_own_question() -> None:
    """Two 2025-11-25 sessions with a call each in flight, the first one's question unanswered
    while the second is asked: each question goes to the session whose call's stream it came on
    (fails on the old code, which refused the second: two clients in flight)."""
    asked, release = anyio.Event(), anyio.Event()

    async def slow(context: Any, params: Any) -> mcp_types.ElicitResult:
        asked.set()
        await release.wait()
        return mcp_types.ElicitResult(action="accept", content={"response": params.message})

    async def quick(context: Any, params: Any) -> mcp_types.ElicitResult:
        return mcp_types.ElicitResult(action="accept", content={"response": params.message})

    results: dict[str, mcp_types.CallToolResult] = {}
    async with bridge() as b, Client(b.url, mode="legacy", elicitation_callback=slow) as one, \
            Client(b.url, mode="legacy", elicitation_callback=quick) as two:

        async def first() -> None:
            results["one"] = await one.call_tool("test_elicitation", {"message": "one's"})

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(first)
                await asked.wait()
                results["two"] = await two.call_tool("test_elicitation", {"message": "two's"})
                release.set()
    assert "content={'response': \"two's\"}" in content(results["two"])
    assert "content={'response': \"one's\"}" in content(results["one"])


async def test_over_stdio_one_persons_waiting_call_leaves_their_next_call_its_question() -> None:
    """A stdio server's question names no call: with one person's calls in flight it goes to the
    one with a request waiting on it, not the one left waiting for its retry (fails on the old
    code, which counted each bridged call as a client of its own and refused it)."""
    async with stdio_bridge() as b:
        waiting = await b.call(ELICIT)
        assert keys(waiting) == {"user_name": "elicitation/create"}
        first = await b.call(SAMPLE)
        assert keys(first) == {"model_reply": "sampling/createMessage"}
        done = await b.call(SAMPLE, requestState=first.result["requestState"],
                            inputResponses={"model_reply": REPLY})
        assert texts(done) == "Sampling result: Hello"
        finished = await b.call(ELICIT, requestState=waiting.result["requestState"],
                                inputResponses={"user_name": NAMED})
    assert texts(finished) == "Hello, Alice!"


async def test_over_stdio_two_persons_calls_in_flight_are_never_guessed() -> None:
    """Alice's call waits for her retry (its server call still asks); Bob's question is refused
    to the server, never put to either, until Alice's call is over."""
    async with stdio_bridge() as b:
        waiting = await b.call(ELICIT)
        b.caller[0] = BOB
        refused = await b.call(SAMPLE)
        assert refused.error == {"code": -32600, "message": NOT_ROUTED}  # the server's own, passed on
        b.caller[0] = ALICE
        finished = await b.call(ELICIT, requestState=waiting.result["requestState"],
                                inputResponses={"user_name": NAMED})
        assert texts(finished) == "Hello, Alice!"
        b.caller[0] = BOB
        asked = await b.call(SAMPLE)
    assert keys(asked) == {"model_reply": "sampling/createMessage"}


async def test_a_call_its_client_abandoned_is_cancelled_upstream_and_in_flight_no_more(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 2026-07-28 client that closes its request's stream cancels its call (as the gateway does on
    a client's cancellation): the server is told, and the call no longer makes another person's
    question ambiguous (the server behind it a stdio one: no stream names whose call asks)."""
    monkeypatch.setattr(streamable, "WATCH_AFTER_SECONDS", 0.0)  # (its client is watched at once)
    log = tmp_path / "upstream.jsonl"
    async with stdio_bridge(lambda s: s.logging_upstream(GATEWAY_UPSTREAM_LOG=str(log))) as b:
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(b.call, "slow", arguments={"seconds": 90}))
            await until(lambda: "slow" in tool_calls(log), "the server never got the call")
            tg.cancel_scope.cancel()  # Alice's client goes: its request's stream closes
        await until(lambda: any(e["method"] == "notifications/cancelled" for e in read_log(log)),
                    "the server was never told")
        b.caller[0] = BOB
        asked = await b.call("ask")
    assert keys(asked) == {"model_reply": "sampling/createMessage"}


async def test_over_stdio_two_anonymous_clients_running_calls_are_never_guessed(
        tmp_path: Path) -> None:
    """Two anonymous clients (one person, as far as the gateway can tell) each with a call running
    behind a stdio server: its question could be either's, so it is refused, never put to the
    newest (fails on this branch's first routing, which put it to the newest: one client's call
    shown another client's question)."""
    log = tmp_path / "upstream.jsonl"
    async with stdio_bridge(lambda s: s.logging_upstream(GATEWAY_UPSTREAM_LOG=str(log))) as b:
        b.caller[0] = ANONYMOUS
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(b.call, "slow", arguments={"seconds": 90}))
            await until(lambda: "slow" in tool_calls(log), "the server never got the call")
            refused = await b.call("ask")
            tg.cancel_scope.cancel()
    assert refused.error == {"code": -32600, "message": NOT_ROUTED}  # the server's own, passed on
