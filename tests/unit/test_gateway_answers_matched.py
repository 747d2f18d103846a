"""An answer from a server goes only to the request that sent it (SPEC §14, issue 39 item 6): callers'
sessions share one pool of connections, and each numbered its requests from 1, so a duplicated
answer reached another caller. Answers are matched by (connection, session, id); a duplicated,
late or unmatched one is dropped and counted (`mcp_preconditions_upstream_dropped_total{server,
reason}`), never delivered; no two callers' requests on one connection carry the same id.

Wire-level misbehaviour a real server cannot be made to produce, so a wire double: it answers one
caller's call with another caller's pending id, answers twice, answers on the GET stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Any

import pytest

from mcp_preconditions.credentials import Credential
from mcp_preconditions.gateway.errors import UpstreamTimeout
from mcp_preconditions.gateway.upstream.caller_sessions import AsCaller, CallerSessions
from mcp_preconditions.gateway.upstream.peer import OwnerHooks, Peer
from mcp_preconditions.telemetry import Metrics
from mcp_preconditions.telemetry.gateway import GatewayTelemetry
from tests.fixtures.caller_gateway import as_caller, caller_gateway, secret
from tests.fixtures.inprocess import served
from tests.fixtures.wire_double import Post, Reply, WireDouble, result, wire_double


def answer(rid: Any, who: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": who}]}}


def dropped(metrics: Metrics, reason: str, server: str = "crm") -> float | None:
    return metrics.registry.get_sample_value("mcp_preconditions_upstream_dropped_total",
                                             {"server": server, "reason": reason})


def forging(double: WireDouble, victim: str, forger: str) -> asyncio.Event:
    """Hold `victim`'s calls until the returned event is set; answer `forger`'s call on its own
    stream with an answer carrying the victim's pending id first, then its own answer twice in
    one batch."""
    release = asyncio.Event()

    def script(post: Post) -> Reply | None:
        if post.method != "tools/call":
            return None
        if post.authorization == victim:
            return Reply([result(post, {"content": [{"type": "text", "text": "victim's own"}]})],
                         hold=release)
        pending = [p.id for p in double.calls() if p.authorization == victim]
        return Reply([answer(pending[-1], "forged for the victim"),
                      [answer(post.id, "forger's own"), answer(post.id, "a duplicate")]],
                     sse=True)

    double.script = script
    return release


async def test_an_answer_with_another_callers_id_reaches_nobody_and_is_counted() -> None:
    metrics = Metrics()
    async with wire_double() as crm:
        gateway = caller_gateway({"crm": crm.url}, ["crm"], telemetry=GatewayTelemetry(metrics))
        release = forging(crm, secret("crm", "bob"), secret("crm", "alice"))
        async with served(gateway) as url, as_caller(url, "alice") as alice, \
                as_caller(url, "bob") as bob:
            held = asyncio.ensure_future(bob.call_tool("crm__echo", {}))
            while not [p for p in crm.calls() if p.authorization == secret("crm", "bob")]:
                await asyncio.sleep(0.01)  # (bob's call is at the server, held)
            hers: Any = await alice.call_tool("crm__echo", {})
            assert [c.text for c in hers.content] == ["forger's own"]
            assert not held.done()  # the answer with his id did not end his call
            release.set()
            his: Any = await held
            assert [c.text for c in his.content] == ["victim's own"]
    assert (dropped(metrics, "unmatched"), dropped(metrics, "duplicate")) == (1.0, 1.0)
    assert dropped(metrics, "late") == 0.0


async def test_an_answer_replayed_to_another_caller_reaches_nobody() -> None:
    """The red team's case: a server (or a connection out of step) that gives bob's request the
    answer it gave alice's. Each session numbered from 1, so hers had the id of his, and bob read
    alice's result; now no two callers' requests share an id, and it is dropped."""
    metrics = Metrics()
    async with wire_double() as crm:
        gateway = caller_gateway({"crm": crm.url}, ["crm"], telemetry=GatewayTelemetry(metrics))
        answered: list[dict[str, Any]] = []

        def replay(post: Post) -> Reply | None:
            if post.method != "tools/call":
                return None
            if post.authorization == secret("crm", "alice"):
                answered.append(answer(post.id, "alice's record"))
            return Reply([answered[-1]])

        crm.script = replay
        async with served(gateway) as url, as_caller(url, "alice") as alice, \
                as_caller(url, "bob") as bob:
            hers: Any = await alice.call_tool("crm__echo", {})
            his: Any = await bob.call_tool("crm__echo", {})
        assert [c.text for c in hers.content] == ["alice's record"]
        assert his.is_error and "alice" not in str(his.content)
    assert dropped(metrics, "unmatched") == 1.0


async def test_callers_sessions_never_reuse_a_request_id_on_one_connection() -> None:
    """Every request of every caller's session on the shared connections has an id of its own
    (before, each session numbered from 1: alice's and bob's `initialize` were both id 1)."""
    async with wire_double() as double:
        sessions = CallerSessions(double.url, "double", NO_CLIENT, connections=2)
        try:
            for n in range(3):
                for who in ("alice", "bob", "carol"):
                    caller = AsCaller(who, Credential.bearer(who, "per-subject"))
                    await sessions.request(caller, "tools/call", {"n": n}, timeout=5)
        finally:
            await sessions.close()
    requests = [(p.connection, p.id) for p in double.posts if p.id is not None]
    assert len(requests) == 12 and len(set(requests)) == 12  # 3 handshakes, 9 calls
    assert len({rid for _, rid in requests}) == 12


async def test_an_answer_on_the_get_stream_is_dropped_as_unmatched() -> None:
    metrics = Metrics()
    async with wire_double() as crm:
        gateway = caller_gateway({"crm": crm.url}, [], telemetry=GatewayTelemetry(metrics))
        async with served(gateway) as url, as_caller(url, "alice") as alice:
            await crm.streaming.wait()  # the gateway's own session's GET stream
            crm.push(next(iter(crm.sessions)), answer(1, "nobody asked"))
            crm.push(next(iter(crm.sessions)), {"jsonrpc": "2.0", "method": "ping", "id": "p"})
            while not [p for p in crm.posts if p.id == "p"]:  # its answer to the ping follows
                await asyncio.sleep(0.01)  # the answer it dropped, on the same stream
            ok: Any = await alice.call_tool("crm__echo", {})
            assert not ok.is_error
    assert dropped(metrics, "unmatched") == 1.0


class _Link:
    """A link that sends nothing anywhere (a request's answer is given to `received` by hand)."""

    sent: list[dict[str, Any]]

    def __init__(self) -> None:
        self.sent = []

    async def send(self, message: dict[str, Any], **_: Any) -> None:
        self.sent.append(message)

    def abandon(self, request_id: Any) -> bool:
        return True


async def test_a_late_answer_and_one_to_an_id_never_sent_are_dropped_and_counted() -> None:
    """At the session (any link: a stdio server answers on one pipe): an answer to a request
    given up is `late`, to one already answered `duplicate`, to an id it never sent `unmatched`."""
    reasons: list[str] = []
    link = _Link()
    peer = Peer(link, "p", _no_answer, lambda m, p: None)
    peer.dropped = reasons.append
    with pytest.raises(UpstreamTimeout):  # given up: no answer comes in time
        await peer.request("tools/call", {}, timeout=0.01)
    given_up = link.sent[0]["id"]
    peer.received(answer(given_up, "too late"))
    asked = asyncio.ensure_future(peer.request("tools/call", {}, timeout=5))
    await asyncio.sleep(0)
    rid = link.sent[-1]["id"]
    peer.received(answer(rid, "first"))
    peer.received(answer(rid, "second"))  # (read before its request has taken the first)
    peer.received(answer(12345, "never asked"))
    assert (await asked)["content"][0]["text"] == "first"
    assert reasons == ["late", "duplicate", "unmatched"]


async def _no_answer(method: str, params: dict[str, Any]) -> dict[str, Any]:
    raise AssertionError(method)


async def _no_request(owner: Hashable, method: str, params: dict[str, Any]) -> dict[str, Any]:
    raise AssertionError(method)


NO_CLIENT = OwnerHooks(_no_request, lambda owner, method, params: None)
