"""A `tools/call` is sent to a server at most twice in all (SPEC §14, issue 39 item 7): once, and once
more only after an answer that proves it did not run (a 404 for the caller's session, or a 401/403
challenge, after which the credential is renewed). Never a third time, in any combination: one
call was POSTed four times (404, 401, 404, then it ran).

Through the real forwarding (`Forward.send`) and the real callers' sessions
(`upstream/caller_sessions.py`) against a wire double whose every answer is scripted: a table of
the combinations that matter, and hypothesis over every sequence of answers (handshakes
included) and renewals, against a small reference of the rule.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_preconditions.credentials import Credential
from mcp_preconditions.gateway.errors import CredentialRefused
from mcp_preconditions.gateway.forward import Forward
from mcp_preconditions.gateway.jsonrpc import RpcError
from mcp_preconditions.gateway.rounds import Rounds
from mcp_preconditions.gateway.upstream.caller_sessions import AsCaller, CallerSessions
from mcp_preconditions.gateway.upstream.peer import OwnerHooks
from mcp_preconditions.outcomes import Outcome, Status
from mcp_preconditions.principal import Credentials
from mcp_preconditions.telemetry.gateway import GatewayTelemetry
from tests.fixtures.wire_double import GONE, Post, Reply, challenge, wire_double

# How the server answers one POST of the call (or of a handshake).
ANSWERS = {"ok": None, "404": GONE, "401": challenge(401), "403": challenge(403),
           "401-plain": Reply([], 401), "500": Reply([], 500)}
CALL_ANSWERS = tuple(ANSWERS)
HANDSHAKE_ANSWERS = ("ok", "401", "500")


class _Member:
    key = "double"
    credential = "credential:double"

    def __init__(self, sessions: CallerSessions) -> None:
        self.upstream = _Upstream(sessions)


class _Upstream:
    """`Upstream.request_as`'s 2025-11-25 branch: the real callers' sessions."""

    key = label = "double"
    modern = False

    def __init__(self, sessions: CallerSessions) -> None:
        self.sessions = sessions

    def request_as(self, caller: AsCaller, method: str, params: Any, *, timeout: float,
                   on_progress: Any = None, origin: object | None = None) -> Any:
        return self.sessions.request(caller, method, params, timeout=timeout,
                                     on_progress=on_progress, origin=origin)


class _Held:
    """Whom a call is sent as (`late.Outbound`): the caller with a credential, and a renewal on a
    challenge that gives another (`renew_ok`) or the unmet outcome, counted."""

    requirement = "credential:double"

    def __init__(self, renew_ok: bool) -> None:
        self.owner = "alice"
        self.credential = Credential.bearer("first", "token-exchange")
        self.renew_ok = renew_ok
        self.renewals = 0
        self.challenges: list[str | None] = []  # what each renewal was given

    def headers(self) -> Mapping[str, str]:
        return self.credential.headers()

    async def challenged(self, token: str | None, challenge: str | None) -> Any:
        self.renewals += 1
        self.challenges.append(challenge)
        if self.renew_ok:
            return AsCaller(self.owner, Credential.bearer(f"renewed{self.renewals}",
                                                          "token-exchange"))
        return Outcome(self.requirement, Status.UNSATISFIED, "no credential", transient=True)


def _forward() -> Forward:
    async def authenticate(credentials: Any) -> Any:
        raise AssertionError("not asked")

    downstream: Any = None  # (`send` reads none of it)
    return Forward(downstream, Rounds(), lambda: 5.0, lambda ctx: Credentials(), authenticate,
                   GatewayTelemetry())


async def _run(calls: Sequence[str], handshakes: Sequence[str], renew_ok: bool,
               held: _Held | None = None) -> tuple[str, int, int]:
    """What became of one call (ran / refused / error), how often it was POSTed, and how many of
    those POSTs the server ran."""
    left = {"tools/call": list(calls), "initialize": list(handshakes)}
    ran = [0]

    def script(post: Post) -> Reply | None:
        if post.method not in left:
            return None
        answer = left[post.method].pop(0) if left[post.method] else "ok"
        if post.method == "tools/call" and answer == "ok":
            ran[0] += 1
        return ANSWERS[answer]

    async with wire_double() as double:
        double.script = script
        sessions = CallerSessions(double.url, "double", NO_CLIENT)
        try:
            member: Any = _Member(sessions)
            held = held or _Held(renew_ok)
            try:
                await _forward().send(None, member, "tools/call", {"name": "t"}, 5.0, held)
                outcome = "ran"
            except CredentialRefused:
                outcome = "refused"
            except RpcError:
                outcome = "error"
        finally:
            await sessions.close()
        return outcome, len(double.calls()), ran[0]


def reference(calls: Sequence[str], handshakes: Sequence[str], renew_ok: bool) -> tuple[str, int]:
    """The rule: up to two attempts; the second only after a 404 or a challenge (and, after a
    challenge, a renewal that gave a credential). An attempt without a session opens one first;
    a handshake refused is an attempt whose call was never POSTed."""
    calls, handshakes = list(calls), list(handshakes)
    posts, session = 0, False
    for attempt in (1, 2):
        if not session:
            handshake = handshakes.pop(0) if handshakes else "ok"
            answer = handshake if handshake != "ok" else None
            session = answer is None
        if session:
            posts += 1
            answer = calls.pop(0) if calls else "ok"
            if answer == "ok":
                return "ran", posts
            session = answer != "404"
        proven = answer in ("404", "401", "403")
        challenged = answer in ("401", "403")
        if not proven:
            return "error", posts
        if attempt == 2:
            return ("refused" if challenged else "error"), posts
        if challenged and not renew_ok:
            return "refused", posts
    raise AssertionError("unreachable")


@pytest.mark.parametrize(("calls", "renew_ok", "expected"), [
    (["404", "401", "404", "ok"], True, ("refused", 2)),  # the attack: it ran on the 4th POST
    (["401", "404", "ok"], True, ("error", 2)),  # renewed, then the session ended: not a 3rd time
    (["404", "401", "ok"], True, ("refused", 2)),  # a new session, then a challenge
    (["404", "404", "ok"], True, ("error", 2)),
    (["401", "401", "ok"], True, ("refused", 2)),
    (["401", "ok"], True, ("ran", 2)),
    (["404", "ok"], True, ("ran", 2)),
    (["401"], False, ("refused", 1)),  # no renewed credential: not sent again
    (["401-plain", "ok"], True, ("error", 1)),  # no challenge: it may have run
    (["500", "ok"], True, ("error", 1)),
    (["ok"], True, ("ran", 1)),
])
async def test_a_call_is_sent_at_most_twice(calls: list[str], renew_ok: bool,
                                            expected: tuple[str, int]) -> None:
    outcome, posts, ran = await _run(calls, [], renew_ok)
    assert (outcome, posts) == expected == reference(calls, [], renew_ok)
    assert ran == (1 if outcome == "ran" else 0)


@pytest.mark.parametrize("status", ["401", "403"])
async def test_the_servers_challenge_reaches_the_renewal(status: str) -> None:
    """SPEC §17: the renewal is given the server's `WWW-Authenticate` (a step-up's scope is in it),
    through `Outbound.challenged`; once, whatever follows."""
    held = _Held(renew_ok=True)
    assert await _run([status, "ok"], [], True, held) == ("ran", 2, 1)
    assert held.challenges == ['Bearer error="invalid_token"']
    held = _Held(renew_ok=True)
    assert await _run([status, status, "ok"], [], True, held) == ("refused", 2, 0)
    assert held.renewals == 1


@settings(max_examples=150, deadline=None)
@given(calls=st.lists(st.sampled_from(CALL_ANSWERS), max_size=5),
       handshakes=st.lists(st.sampled_from(HANDSHAKE_ANSWERS), max_size=4),
       renew_ok=st.booleans())
def test_every_combination_of_answers_sends_the_call_at_most_twice(
        calls: list[str], handshakes: list[str], renew_ok: bool) -> None:
    outcome, posts, ran = asyncio.run(_run(calls, handshakes, renew_ok))
    assert posts <= 2 and ran <= 1
    assert (outcome, posts) == reference(calls, handshakes, renew_ok)
    assert ran == (1 if outcome == "ran" else 0)


async def _no_request(owner: Hashable, method: str, params: dict[str, Any]) -> dict[str, Any]:
    raise AssertionError(method)


NO_CLIENT = OwnerHooks(_no_request, lambda owner, method, params: None)
