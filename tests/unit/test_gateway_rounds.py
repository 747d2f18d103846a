"""The input rounds the gateway bridges for a 2026-07-28 client in front of a 2025-11-25 server
(gateway/rounds.py, gateway/round_state.py), driven directly: the server's questions are `ask`s of
the pending call, the client's requests `start` and `resume` it. A round holds every question out at
once, keyed by what it asks; each round has a state of its own, signed and bound to its caller, its
request and its server, that expires; a first call may carry its answers; a caller's waiting calls
are bounded; a call that fails after the server was refused a capability the client never declared
is that missing capability (-32021).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from mcp_preconditions.gateway import rounds as rounds_module
from mcp_preconditions.gateway.clients import Call
from mcp_preconditions.gateway.jsonrpc import RpcError
from mcp_preconditions.gateway.round_state import Round, Sealer, question_key
from mcp_preconditions.gateway.rounds import (
    INVALID_STATE,
    MAX_WAITING_PER_CALLER,
    PendingCall,
    Rounds,
)

ALICE, BOB = "alice-digest", "bob-digest"
ABOUT = '{"name": "ask"}'
ALL: dict[str, Any] = {"sampling": {}, "elicitation": {}, "roots": {}}
NAME = {"message": "What is your name?", "requestedSchema": {
    "type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}
COLOR = {"message": "Favourite colour?", "requestedSchema": {
    "type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]}}
SAMPLE = {"messages": [{"role": "user", "content": {"type": "text", "text": "Hi"}}], "maxTokens": 5}
ACCEPT_ALICE = {"action": "accept", "content": {"name": "Alice"}}
REPLY = {"role": "assistant", "model": "m", "content": {"type": "text", "text": "Hello"}}
ROOTS = {"roots": [{"uri": "file:///r", "name": "r"}]}
Server = Callable[[PendingCall], Awaitable[dict[str, Any]]]


class Sink:
    open = True

    def push(self, message: dict[str, Any]) -> None:
        raise AssertionError(f"nothing goes on a 2026-07-28 request's stream here: {message}")


def request(params: dict[str, Any] | None = None) -> Call:
    return Call("tools/call", {"name": "ask", **(params or {})}, 1, "2026-07-28", Sink())


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@asynccontextmanager
async def bridged(clock: Callable[[], float] | None = None) -> AsyncIterator[
        tuple[Rounds, Callable[..., Awaitable[dict[str, Any]]]]]:
    """Rounds, and `start(server, caller=..., capabilities=..., params=...)`: a new call whose
    upstream is `server` (given the pending call, it asks and returns the result)."""
    rounds = Rounds(clock) if clock is not None else Rounds()
    async with anyio.create_task_group() as tg:

        async def start(server: Server, caller: str = ALICE, capabilities: dict[str, Any] = ALL,
                        params: dict[str, Any] | None = None, timeout: float = 30) -> dict[str, Any]:
            def spawn(call: PendingCall) -> None:
                tg.start_soon(call.run, lambda: server(call))
            return await rounds.start(request(params), caller, ABOUT, timeout, capabilities, spawn,
                                      "upstream")
        yield rounds, start
        for call in rounds.calls():
            call.close()
        tg.cancel_scope.cancel()


async def resume(rounds: Rounds, state: Any, responses: Any, caller: str = ALICE,
                 about: str = ABOUT, server: str = "upstream") -> dict[str, Any]:
    return await rounds.resume(request(), state, caller, about, server, responses)


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}]}


async def name_then_color(call: PendingCall) -> dict[str, Any]:
    name = await call.ask("elicitation/create", NAME)
    color = await call.ask("elicitation/create", COLOR)
    return text(f"{name['content']['name']} likes {color['content']['color']}")


async def three_at_once(call: PendingCall) -> dict[str, Any]:
    """Three questions, sent one after the other as a server's concurrent tasks send them."""
    found: dict[str, Any] = {}

    async def put(key: str, method: str, params: dict[str, Any], after: float) -> None:
        await anyio.sleep(after)
        found[key] = await call.ask(method, params)

    async with anyio.create_task_group() as tg:
        tg.start_soon(put, "name", "elicitation/create", NAME, 0)
        tg.start_soon(put, "greeting", "sampling/createMessage", SAMPLE, 0.01)
        tg.start_soon(put, "roots", "roots/list", {}, 0.02)
    return text(f"{found['name']['content']['name']}: {len(found['roots']['roots'])} root(s)")


# -- the keys --------------------------------------------------------------------------------------
def test_a_question_is_keyed_by_what_it_asks() -> None:
    def free(_key: str) -> bool:
        return False
    assert question_key("elicitation/create", NAME, free) == "user_name"
    assert question_key("elicitation/create", {"requestedSchema": {"properties": {
        "city": {}, "zip code": {}, "": {}}}}, free) == "user_city_zip_code"
    assert question_key("elicitation/create", {"mode": "url", "url": "https://x"}, free) == "user_url"
    assert question_key("elicitation/create", {"message": "ok?"}, free) == "user_input"
    assert question_key("sampling/createMessage", SAMPLE, free) == "model_reply"
    assert question_key("roots/list", {}, free) == "client_roots"
    long = question_key("elicitation/create", {"requestedSchema": {"properties": {
        "x" * 100: {}}}}, free)
    assert long == "user_" + "x" * 43 and len(long) == 48
    # A key another question of the round holds gets the next free suffix.
    taken = {"user_name", "user_name_2"}
    assert question_key("elicitation/create", NAME, taken.__contains__) == "user_name_3"


# -- one round, every question ---------------------------------------------------------------------
async def test_questions_out_at_once_come_in_one_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails on the old code: the first question alone made a round (`r1`), the others a second."""
    monkeypatch.setattr(rounds_module, "GATHER_QUIET", 1.0)
    async with bridged() as (rounds, start):
        first = await start(three_at_once)
        assert first["resultType"] == "input_required"
        assert {k: v["method"] for k, v in first["inputRequests"].items()} == {
            "user_name": "elicitation/create", "model_reply": "sampling/createMessage",
            "client_roots": "roots/list"}
        assert first["inputRequests"]["user_name"]["params"] == NAME
        done = await resume(rounds, first["requestState"],
                            {"user_name": ACCEPT_ALICE, "model_reply": REPLY, "client_roots": ROOTS})
    assert done == text("Alice: 1 root(s)")


async def test_each_round_has_a_state_of_its_own() -> None:
    """Fails on the old code: one state served the whole call, so a replayed first state went on."""
    async with bridged() as (rounds, start):
        first = await start(name_then_color)
        assert list(first["inputRequests"]) == ["user_name"]
        second = await resume(rounds, first["requestState"], {"user_name": ACCEPT_ALICE})
        assert list(second["inputRequests"]) == ["user_color"]
        assert second["requestState"] != first["requestState"]
        with pytest.raises(RpcError, match=INVALID_STATE):  # the first round's is spent
            await resume(rounds, first["requestState"], {"user_color": {
                "action": "accept", "content": {"color": "red"}}})
        done = await resume(rounds, second["requestState"], {"user_color": {
            "action": "accept", "content": {"color": "blue"}}})
    assert done == text("Alice likes blue")


async def test_an_answer_missing_or_malformed_asks_again() -> None:
    async with bridged() as (rounds, start):
        first = await start(name_then_color)
        again = await resume(rounds, first["requestState"], {"wrong_key": ACCEPT_ALICE})
        assert list(again["inputRequests"]) == ["user_name"]
        once_more = await resume(rounds, again["requestState"], {"user_name": 12345})
        assert list(once_more["inputRequests"]) == ["user_name"]
        second = await resume(rounds, once_more["requestState"], {"user_name": ACCEPT_ALICE})
        assert list(second["inputRequests"]) == ["user_color"]


async def test_a_first_call_may_carry_its_answers() -> None:
    """A call without a state whose `inputResponses` answer what the server asks, by key, runs to
    its end in one request (keys it does not ask are ignored; an answer that is no answer is not
    taken). Fails on the old code, which dropped them."""
    async with bridged() as (_rounds, start):
        done = await start(name_then_color, params={"inputResponses": {
            "user_name": ACCEPT_ALICE, "user_color": {"action": "accept", "content": {"color": "red"}},
            "unknown_extra_key": {"action": "accept", "content": {"foo": "bar"}}}})
        assert done == text("Alice likes red")
        asked = await start(name_then_color, params={"inputResponses": {"user_name": 12345}})
        assert list(asked["inputRequests"]) == ["user_name"]
        nothing = await start(name_then_color, params={"inputResponses": None})
        assert list(nothing["inputRequests"]) == ["user_name"]


# -- the state: signed, bound, expiring ----------------------------------------------------------------
@pytest.mark.parametrize("tamper", [
    lambda s: s + "-TAMPERED", lambda s: s[:-1] + ("A" if s[-1] != "A" else "B"),
    lambda s: ("e" if s[0] != "e" else "f") + s[1:], lambda s: s.split(".")[0],
    lambda s: "", lambda s: 42, lambda s: None, lambda s: "x" * 10_000,
    lambda s: "mcp-preconditions-gateway:guess"])
async def test_a_tampered_state_is_refused(tamper: Callable[[str], Any]) -> None:
    async with bridged() as (rounds, start):
        first = await start(name_then_color)
        with pytest.raises(RpcError, match=INVALID_STATE) as refused:
            await resume(rounds, tamper(first["requestState"]), {"user_name": ACCEPT_ALICE})
        assert refused.value.code == -32602
        assert refused.value.data == {"reason": "invalid_request_state"}
        # Refusing it spent nothing: the real state still continues the call.
        second = await resume(rounds, first["requestState"], {"user_name": ACCEPT_ALICE})
        assert list(second["inputRequests"]) == ["user_color"]


async def test_a_state_serves_its_own_caller_request_and_server_alone() -> None:
    async with bridged() as (rounds, start):
        first = await start(name_then_color)
        state, answer = first["requestState"], {"user_name": ACCEPT_ALICE}
        for other in ({"caller": BOB}, {"about": '{"name": "other"}'}, {"server": "another"}):
            with pytest.raises(RpcError, match=INVALID_STATE):
                await resume(rounds, state, answer, **other)
        second = await resume(rounds, state, answer)
        assert list(second["inputRequests"]) == ["user_color"]


async def test_a_state_expires() -> None:
    clock = Clock()
    async with bridged(clock) as (rounds, start):
        first = await start(name_then_color, timeout=30)
        clock.now += 30
        with pytest.raises(RpcError, match=INVALID_STATE):
            await resume(rounds, first["requestState"], {"user_name": ACCEPT_ALICE})
        second_call = await start(name_then_color, timeout=30)
        clock.now += 29
        ongoing = await resume(rounds, second_call["requestState"], {"user_name": ACCEPT_ALICE})
    assert list(ongoing["inputRequests"]) == ["user_color"]


def test_a_state_is_good_on_the_gateway_that_issued_it_alone() -> None:
    clock = Clock()
    bound = (ALICE, ABOUT, "upstream")
    state = Sealer(clock).issue(Round("c1", 1), 30, bound)
    assert Sealer(clock).check(state, bound) is None  # another gateway (another key)
    ours = Sealer(clock, key=b"k" * 32)
    assert ours.check(ours.issue(Round("c1", 1), 30, bound), bound) == Round("c1", 1)


# -- bounds ------------------------------------------------------------------------------------------
async def test_a_caller_loses_their_own_oldest_waiting_call_never_anothers() -> None:
    async with bridged() as (rounds, start):
        bobs = await start(name_then_color, caller=BOB)
        alices = [await start(name_then_color) for _ in range(MAX_WAITING_PER_CALLER + 1)]
        with pytest.raises(RpcError, match=INVALID_STATE):  # Alice's first call was ended
            await resume(rounds, alices[0]["requestState"], {"user_name": ACCEPT_ALICE})
        for kept in alices[1:]:
            assert (await resume(rounds, kept["requestState"], {"wrong": 1}))["inputRequests"]
        bob_goes_on = await resume(rounds, bobs["requestState"], {"user_name": ACCEPT_ALICE},
                                   caller=BOB)
    assert list(bob_goes_on["inputRequests"]) == ["user_color"]


# -- capabilities the client never declared ----------------------------------------------------------
async def test_a_call_that_fails_for_an_undeclared_capability_is_minus_32021() -> None:
    asked: list[str] = []

    async def needs_sampling(call: PendingCall) -> dict[str, Any]:
        try:
            await call.ask("sampling/createMessage", SAMPLE)
        except RpcError as exc:
            asked.append(exc.message)
            return {**text("sampling is required"), "isError": True}
        return text("sampled")

    async with bridged() as (_rounds, start):
        with pytest.raises(RpcError) as refused:
            await start(needs_sampling, capabilities={"elicitation": {}})
    assert refused.value.code == -32021
    assert refused.value.data == {"requiredCapabilities": {"sampling": {}}}
    assert asked == ["gateway: the calling client cannot answer sampling/createMessage"]


async def test_a_call_that_does_without_an_undeclared_capability_goes_on() -> None:
    """A server that asks what the client cannot answer and carries on without it is not refused:
    the round holds the questions the client can answer, and the result is the server's."""
    async def asks_both(call: PendingCall) -> dict[str, Any]:
        got: list[str] = []

        async def put(method: str, params: dict[str, Any]) -> None:
            try:
                await call.ask(method, params)
                got.append(method)
            except RpcError:
                pass
        async with anyio.create_task_group() as tg:
            tg.start_soon(put, "elicitation/create", NAME)
            tg.start_soon(put, "sampling/createMessage", SAMPLE)
        return text(f"received {got}")

    async with bridged() as (rounds, start):
        first = await start(asks_both, capabilities={"sampling": {}})
        assert list(first["inputRequests"]) == ["model_reply"]
        done = await resume(rounds, first["requestState"], {"model_reply": REPLY})
    assert done == text("received ['sampling/createMessage']")
