"""Each caller's own session with a 2025-11-25 server (gateway/upstream/caller_sessions.py), against a
small HTTP server double that answers `initialize` with a session of its own per handshake and
records what each request carried: a session per caller, reused, opened once for concurrent first
calls; the request carries the caller's credential and none of the link's static headers; the
least recently used idle session closed at the bound, a busy one never (the newcomer is refused);
idle ones swept; a 404 for the session loses it (the forwarding sends the call once more, on a
new one); a 401/403 with `WWW-Authenticate` is a challenge (without it, a plain refusal); every
session on one pool of connections.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Hashable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from mcp_preconditions.credentials import Credential
from mcp_preconditions.gateway.errors import (
    UpstreamChallenged,
    UpstreamRefused,
    UpstreamSessionGone,
    UpstreamUnavailable,
)
from mcp_preconditions.gateway.forward import Forward
from mcp_preconditions.gateway.jsonrpc import RpcError
from mcp_preconditions.gateway.rounds import Rounds
from mcp_preconditions.gateway.upstream.caller_sessions import AsCaller, CallerSessions
from mcp_preconditions.gateway.upstream.peer import OwnerHooks
from mcp_preconditions.principal import Credentials
from mcp_preconditions.telemetry.gateway import GatewayTelemetry


@dataclass
class Double:
    """A streamable-HTTP server double: `seen` holds (method, authorization, session) per POST."""

    seen: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    refuse: dict[str, tuple[int, bool]] = field(default_factory=dict)  # auth -> (status, challenge)
    gone: set[str] = field(default_factory=set)  # sessions it ended
    hold: asyncio.Event | None = None  # tools/call waits for it
    connections: int = 0
    opened: int = 0
    port: int = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                verb = lines[0].split()[0]
                headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                writer.write(await self.answer(verb, headers, body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def answer(self, verb: str, headers: dict[str, str], body: bytes) -> bytes:
        session = headers.get("mcp-session-id")
        if verb == "DELETE":
            self.deleted.append(session or "")
            return _http(200, b"")
        message = json.loads(body)
        method = message.get("method")
        auth = headers.get("authorization")
        self.seen.append((method, auth, session))
        if auth in self.refuse:
            status, challenge = self.refuse[auth]
            extra = {"www-authenticate": 'Bearer error="invalid_token"'} if challenge else {}
            return _http(status, b'{"error":"invalid_token"}', extra)
        if session is not None and session in self.gone:
            return _http(404, b"")
        if "id" not in message:
            return _http(202, b"")
        if method == "initialize":
            self.opened += 1
            result = {"protocolVersion": "2025-11-25", "capabilities": {},
                      "serverInfo": {"name": "double", "version": "1"}}
            return _json(message["id"], result, {"mcp-session-id": f"s{self.opened}"})
        if self.hold is not None:
            await self.hold.wait()
        return _json(message["id"], {"session": session, "auth": auth})


async def until(probe: Callable[[], bool]) -> None:
    """Wait (at most 10 s) until `probe()` holds: what happens in the background (a session's
    DELETE, a request reaching the double) takes turns of the loop, and a fixed sleep on a loaded
    machine may give it too few."""
    for _ in range(1000):
        if probe():
            return
        await asyncio.sleep(0.01)  # a poll, within the wait


def calls(double: Double) -> int:
    return sum(1 for method, _, _ in double.seen if method == "tools/call")


def _http(status: int, body: bytes, headers: dict[str, str] | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status} X", f"content-length: {len(body)}",
             *(f"{k}: {v}" for k, v in (headers or {}).items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _json(rid: Any, result: dict[str, Any], headers: dict[str, str] | None = None) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}).encode()
    return _http(200, body, {"content-type": "application/json", **(headers or {})})


@asynccontextmanager
async def running(**options: Any) -> AsyncIterator[tuple[Double, CallerSessions]]:
    double = Double()
    server = await asyncio.start_server(double.serve, "127.0.0.1", 0)
    double.port = server.sockets[0].getsockname()[1]

    async def no_client(owner: Hashable, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError(method)

    sessions = CallerSessions(f"http://127.0.0.1:{double.port}/mcp", "double",
                              OwnerHooks(no_client, lambda owner, method, params: None), **options)
    try:
        yield double, sessions
    finally:
        await sessions.close()
        server.close()


def as_(owner: str, token: str | None = None) -> AsCaller:
    return AsCaller(owner, Credential.bearer(token or f"{owner}-token", "token-exchange"))


async def test_a_session_per_caller_reused_and_opened_once_for_concurrent_first_calls() -> None:
    async with running() as (double, sessions):
        first = await asyncio.gather(*(sessions.request(as_("alice"), "tools/call", {}, timeout=5)
                                       for _ in range(5)))
        bob = await sessions.request(as_("bob"), "tools/call", {}, timeout=5)
        again = await sessions.request(as_("alice"), "tools/call", {}, timeout=5)
    assert {r["session"] for r in first} == {again["session"]} and bob["session"] != again["session"]
    assert double.opened == 2 and len(sessions) == 0  # closed with the gateway's own session
    assert (again["auth"], bob["auth"]) == ("Bearer alice-token", "Bearer bob-token")
    assert sorted(double.deleted) == ["s1", "s2"]


async def test_a_renewed_credential_is_carried_on_the_same_session() -> None:
    async with running() as (_, sessions):
        before = await sessions.request(as_("alice"), "tools/call", {}, timeout=5)
        after = await sessions.request(as_("alice", "renewed"), "tools/call", {}, timeout=5)
    assert after == {"session": before["session"], "auth": "Bearer renewed"}


async def test_at_the_bound_the_least_recently_used_idle_session_closes() -> None:
    async with running(limit=2) as (double, sessions):
        for who in ("a", "b", "a", "c"):  # b is the least recently used when c arrives
            await sessions.request(as_(who), "tools/call", {}, timeout=5)
        await until(lambda: double.deleted != [])
        assert double.deleted == ["s2"] and len(sessions) == 2
        again = await sessions.request(as_("b"), "tools/call", {}, timeout=5)
        assert again["session"] == "s4"  # a new one for b; a's closed to make room
        await until(lambda: len(double.deleted) > 1)
        assert double.deleted == ["s2", "s1"]


async def test_a_busy_session_is_never_closed_for_another_caller_who_is_refused_instead() -> None:
    async with running(limit=1) as (double, sessions):
        double.hold = asyncio.Event()
        busy = asyncio.ensure_future(sessions.request(as_("a"), "tools/call", {}, timeout=5))
        await until(lambda: calls(double) == 1)  # it waits at the server, its session in use
        with pytest.raises(UpstreamUnavailable) as refused:
            await sessions.request(as_("b"), "tools/call", {}, timeout=5)
        assert str(refused.value) == "1 callers' sessions with it are in use"
        double.hold.set()
        assert (await busy)["session"] == "s1" and double.deleted == []


async def test_idle_sessions_are_swept_busy_ones_stay() -> None:
    now = [0.0]
    async with running(idle=300.0, clock=lambda: now[0]) as (double, sessions):
        await sessions.request(as_("a"), "tools/call", {}, timeout=5)
        now[0] = 200.0
        await sessions.request(as_("b"), "tools/call", {}, timeout=5)
        now[0] = 350.0
        assert sessions.sweep() == 1 and len(sessions) == 1  # a: 350 s idle; b: 150 s
        await until(lambda: double.deleted != [])
        assert double.deleted == ["s1"]
        double.hold = asyncio.Event()
        busy = asyncio.ensure_future(sessions.request(as_("b"), "tools/call", {}, timeout=5))
        await until(lambda: calls(double) == 3)  # it waits at the server, its session in use
        now[0] = 10_000.0
        assert sessions.sweep() == 0  # in use: never closed under its caller
        double.hold.set()
        await busy


async def test_a_session_holding_subscriptions_is_kept_neither_swept_nor_closed_for_room() -> None:
    """A caller's session with subscriptions of theirs (`keep`) stays open however idle, and is
    never the one closed to make room (a newcomer is refused instead); once it holds none, it is
    swept like any other."""
    now = [0.0]
    async with running(limit=1, idle=300.0, clock=lambda: now[0]) as (double, sessions):
        await sessions.request(as_("a"), "tools/call", {}, timeout=5)
        sessions.keep("a", True)
        now[0] = 10_000.0
        assert sessions.sweep() == 0
        with pytest.raises(UpstreamUnavailable):
            await sessions.request(as_("b"), "tools/call", {}, timeout=5)
        sessions.keep("a", False)
        assert sessions.sweep() == 1
        await until(lambda: double.deleted != [])
        assert double.deleted == ["s1"]


async def test_a_session_the_server_ended_is_lost_and_the_next_request_opens_a_new_one() -> None:
    async with running() as (double, sessions):
        first = await sessions.request(as_("a"), "tools/call", {}, timeout=5)
        double.gone.add(first["session"])
        with pytest.raises(UpstreamSessionGone):  # nothing ran: the forwarding sends it again
            await sessions.request(as_("a"), "tools/call", {}, timeout=5)
        again = await sessions.request(as_("a"), "tools/call", {}, timeout=5)
        assert len(sessions) == 1  # the ended one forgotten when it was found lost
    assert again["session"] == "s2" and double.opened == 2 and calls(double) == 3


class _Member:
    """What `Forward.send` reads of a fleet member: its key, requirement and upstream."""

    def __init__(self, upstream: Any) -> None:
        self.key = "double"
        self.credential = "credential:double"
        self.upstream = upstream


class _Upstream:
    """An upstream whose callers' sessions are the real `CallerSessions` (`Upstream.request_as`'s
    2025-11-25 branch)."""

    key = label = "double"
    modern = False

    def __init__(self, sessions: CallerSessions) -> None:
        self.sessions = sessions

    def request_as(self, caller: AsCaller, method: str, params: Any, *, timeout: float,
                   on_progress: Any = None, origin: object | None = None) -> Any:
        return self.sessions.request(caller, method, params, timeout=timeout,
                                     on_progress=on_progress, origin=origin)


class _Held:
    """Whom a call is sent as (`late.Outbound`, a held credential's): the caller, with their
    credential; a renewal is never asked for here."""

    def __init__(self, caller: AsCaller) -> None:
        self.owner = caller.owner
        self.credential = caller.credential

    def headers(self) -> Any:
        return self.credential.headers()

    async def challenged(self, token: str | None, challenge: str | None) -> Any:
        raise AssertionError("a session the server ended is not a refused credential")


def _forward() -> Forward:
    async def authenticate(credentials: Any) -> Any:
        raise AssertionError("not asked")

    downstream: Any = None  # (`send` reads none of it)
    return Forward(downstream, Rounds(), lambda: 5.0, lambda ctx: Credentials(), authenticate,
                   GatewayTelemetry())


@pytest.mark.parametrize("ended", [1, 2])
async def test_a_call_on_a_session_the_server_ended_is_sent_once_more_on_a_new_one(
        ended: int) -> None:
    """Through the forwarding: the 404 ran nothing, so the call is sent again on a new session,
    once; if that one is ended too, the call fails and is not sent a third time."""
    async with running() as (double, sessions):
        alice = as_("alice")
        await sessions.request(alice, "tools/call", {}, timeout=5)
        double.gone.add("s1")
        if ended == 2:
            _end_the_next_session(double)
        forward = _forward()
        member: Any = _Member(_Upstream(sessions))  # (what `send` reads of a Member)
        held: Any = _Held(alice)  # (what `send` reads of an Outbound)
        if ended == 1:
            result = await forward.send(None, member, "tools/call", {"name": "t"}, 5.0, held)
            assert result == {"session": "s2", "auth": "Bearer alice-token"}
        else:
            with pytest.raises(RpcError):
                await forward.send(None, member, "tools/call", {"name": "t"}, 5.0, held)
    sent = [session for method, _, session in double.seen if method == "tools/call"]
    assert sent == ["s1", "s1", "s2"]  # once before it was ended, on it, once more on the new one
    assert double.opened == 2


class _Renewing(_Held):
    """A held credential whose renewal gives `renewed`."""

    def __init__(self, caller: AsCaller, renewed: Credential) -> None:
        super().__init__(caller)
        self.renewed = renewed

    async def challenged(self, token: str | None, challenge: str | None) -> Any:
        return _Held(AsCaller(self.owner, self.renewed))


async def test_a_renewed_call_whose_session_the_server_ended_is_not_sent_a_third_time() -> None:
    """After a 401 with `WWW-Authenticate` the call goes again with the renewed credential; if the
    server ended the session meanwhile (404: nothing ran), that was its second and last time
    (SPEC §14: at most twice in all): it fails, and is not sent on a new session."""
    async with running() as (double, sessions):
        alice = as_("alice")
        await sessions.request(alice, "tools/call", {}, timeout=5)
        double.refuse["Bearer alice-token"] = (401, True)
        answer = double.answer

        async def ending(verb: str, headers: dict[str, str], body: bytes) -> bytes:
            if headers.get("authorization") == "Bearer renewed":
                double.gone.add("s1")  # ended while the credential was renewed
            return await answer(verb, headers, body)

        double.answer = ending  # type: ignore[method-assign]
        member: Any = _Member(_Upstream(sessions))
        held: Any = _Renewing(alice, Credential.bearer("renewed", "token-exchange"))
        with pytest.raises(RpcError) as failed:
            await _forward().send(None, member, "tools/call", {"name": "t"}, 5.0, held)
    assert failed.value.message == "server double closed the connection"
    sent = [(session, auth) for method, auth, session in double.seen if method == "tools/call"]
    assert sent == [("s1", "Bearer alice-token"), ("s1", "Bearer alice-token"),
                    ("s1", "Bearer renewed")]


def _end_the_next_session(double: Double) -> None:
    """The double ends the session it opens next, as soon as it is opened."""
    answer = double.answer

    async def ending(verb: str, headers: dict[str, str], body: bytes) -> bytes:
        reply = await answer(verb, headers, body)
        if b'"initialize"' in body:
            double.gone.add(f"s{double.opened}")
        return reply

    double.answer = ending  # type: ignore[method-assign]


@pytest.mark.parametrize(("status", "challenge", "raised"), [
    (401, True, UpstreamChallenged), (403, True, UpstreamChallenged), (401, False, UpstreamRefused)])
async def test_a_refused_credential_is_a_challenge_only_with_www_authenticate(
        status: int, challenge: bool, raised: type[Exception]) -> None:
    async with running() as (double, sessions):
        await sessions.request(as_("a"), "tools/call", {}, timeout=5)
        double.refuse["Bearer stale"] = (status, challenge)
        with pytest.raises(raised) as caught:
            await sessions.request(as_("a", "stale"), "tools/call", {}, timeout=5)
        assert type(caught.value) is raised
        with pytest.raises(raised):  # at the handshake too: nothing ran either way
            await sessions.request(as_("b", "stale"), "tools/call", {}, timeout=5)


async def test_every_session_shares_one_pool_of_connections() -> None:
    async with running() as (double, sessions):
        for n in range(40):
            await sessions.request(as_(f"caller{n}"), "tools/call", {}, timeout=5)
        assert len(sessions) == 40 and double.connections <= 2


async def test_a_request_with_headers_of_its_own_carries_none_of_the_links() -> None:
    """At 2026-07-28 there are no sessions: a caller's request goes on the gateway's link with the
    caller's credential in place of its static headers, never beside them."""
    from mcp_preconditions.gateway.upstream.http import HttpLink
    from mcp_preconditions.gateway.upstream.peer import Peer

    async with running() as (double, _):
        seen: list[dict[str, str]] = []
        original = double.answer

        async def answer(verb: str, headers: dict[str, str], body: bytes) -> bytes:
            seen.append(headers)
            return await original(verb, headers, body)

        double.answer = answer  # type: ignore[method-assign]
        holder: list[Peer] = []
        link = HttpLink(f"http://127.0.0.1:{double.port}/mcp",
                        {"Authorization": "Bearer static", "X-Tenant": "gw"},
                        lambda m, via: holder[0].received(m, via), "double")
        link.modern = True
        peer = Peer(link, "double", _no_request, lambda method, params: None, {})
        holder.append(peer)
        await peer.request("tools/call", {"name": "t"}, timeout=5,
                           headers=Credential.bearer("caller", "oauth").headers())
        await peer.request("tools/list", None, timeout=5)
        await link.close()
    mine, gateways = seen
    assert (mine.get("authorization"), "x-tenant" in mine) == ("Bearer caller", False)
    assert (gateways["authorization"], gateways["x-tenant"]) == ("Bearer static", "gw")


async def _no_request(method: str, params: dict[str, Any]) -> dict[str, Any]:
    raise AssertionError(method)
