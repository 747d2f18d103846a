"""Approvals in a real redis-server shared by two replicas (SPEC §15): many concurrent uses of one
approval from both run it once; a request made on one is decided and used on the other; a caller
keeps at most 16 requests waiting and 16 ended (the oldest dropped, from either replica at once),
and 10,000 declines leave no more behind; a server that is down or holds garbage fails closed
(`error`); keys never hold a subject or an argument.

Interop, each marked, with why: Redis is the component under test (the stores' scripts and
transactions, two replicas racing on one server, its key expiry), which no in-process stand-in
would check. The Redis that is down is the default tier's: a port held bound and never listening,
every connection refused at once (as a killed redis-server's).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from mcp_preconditions import Identity, Principal
from mcp_preconditions.approvals import (
    MAX_ENDED_PER_CALLER,
    MAX_PENDING_PER_CALLER,
    ApprovalCall,
    ApprovalPlan,
    Changed,
    CompiledApproval,
    Party,
    State,
    bind,
)
from mcp_preconditions.approvals.store_redis import RedisApprovalStore
from mcp_preconditions.errors import BackendError
from mcp_preconditions.outcomes import Status
from mcp_preconditions.resolvers.state_redis import RedisStateSource
from tests.fixtures.hosted import redis_down
from tests.fixtures.redis import RedisServer

pytestmark = pytest.mark.integration
ALICE = Identity(Principal.from_claims({"iss": "https://idp", "sub": "alice-secret-subject"}))
BOB = Party("https://idp", "bob")
BOB_IDENTITY = Identity(Principal.from_claims({"iss": "https://idp", "sub": "bob"}))


@pytest.fixture
async def replicas(redis_server: RedisServer) -> AsyncIterator[list[RedisApprovalStore]]:
    prefix = f"it:{uuid.uuid4().hex}:"
    connections = [RedisStateSource(redis_server.url, connect_timeout=5, read_timeout=5)
                   for _ in range(2)]
    yield [RedisApprovalStore(c, prefix) for c in connections]
    for connection in connections:
        await connection.aclose()


def plan_on(store: RedisApprovalStore) -> ApprovalPlan:
    return ApprovalPlan(("approval:deploy",),
                        (CompiledApproval("deploy", ("auth:claim:role:rm",), 600, 120, store),))


CALL = ApprovalCall("deploy_service", {"env": "prod", "token_hint": "argument-secret"}, ALICE, "r1")


@pytest.mark.interop
async def test_two_replicas_honour_one_approval_once(replicas: list[RedisApprovalStore]) -> None:
    a, b = (plan_on(s) for s in replicas)
    request = (await a.decide(CALL)).steps[0].request
    assert request is not None
    assert (await b.decide(CALL)).steps[0].request == request  # one request, seen by both
    assert isinstance(await replicas[1].decide(request.id, "approve", BOB), Changed)
    rulings = await asyncio.gather(*(plan.decide(CALL) for _ in range(10) for plan in (a, b)))
    assert sum(r.allowed for r in rulings) == 1
    assert sum(1 for r in rulings for e in r.events if e[1] is State.USED) == 1


@pytest.mark.interop
async def test_keys_hold_no_subject_or_argument(replicas: list[RedisApprovalStore],
                                                redis_server: RedisServer) -> None:
    await plan_on(replicas[0]).decide(CALL)
    keys = await replicas[0].connection.call("KEYS", lambda r: r.keys(replicas[0].prefix + "*"))
    assert len(keys) == 4  # the request, its binding, the caller's requests, the page's waiting list
    assert not any(b"alice" in k or b"argument-secret" in k or b"prod" in k for k in keys)


@pytest.mark.interop
async def test_a_caller_keeps_at_most_16_waiting_from_both_replicas_at_once(
        replicas: list[RedisApprovalStore]) -> None:
    """SPEC §14: the oldest are dropped (atomically: two replicas adding at once still leave 16),
    and another caller is untouched (issue 39.10: the Redis store had no bound at all)."""
    plans = [plan_on(s) for s in replicas]
    await plans[0].decide(CALL._replace(identity=BOB_IDENTITY))
    rulings = await asyncio.gather(*(plans[i % 2].decide(CALL._replace(arguments={"i": i}))
                                     for i in range(40)))
    assert all(not r.allowed and r.steps[0].remedy == "approver" for r in rulings)
    assert sum(1 for r in rulings for e in r.events if e[1] is State.EXPIRED) == 40 - 16 + 1 - 1
    mine = await replicas[1].pending_of(Party("https://idp", "alice-secret-subject"))
    assert len(mine) == MAX_PENDING_PER_CALLER
    assert len(await replicas[0].pending_of(BOB)) == 1
    assert len(await replicas[1].waiting(1000)) == MAX_PENDING_PER_CALLER + 1


@pytest.mark.interop
async def test_declines_leave_a_bounded_few(replicas: list[RedisApprovalStore]) -> None:
    """One caller declining a `self` question 10,000 times kept 10,000 keys for an hour; 300
    declines (20 at a time) leave at most the bounds (the memory store's unit test does 10,000)."""
    store = replicas[0]
    plan = ApprovalPlan(("approval:confirm",), (CompiledApproval("confirm", None, 600, 120, store),))
    asking = CALL._replace(can_ask=True)

    async def one() -> None:
        step = (await plan.decide(asking)).steps[0]
        assert step.request is not None
        await plan.answer(step.request.id, asking, "decline")
    for _ in range(15):
        await asyncio.gather(*(one() for _ in range(20)))
    keys = await store.connection.call("KEYS", lambda r: r.keys(store.prefix + "*"))
    assert len(keys) <= MAX_PENDING_PER_CALLER + MAX_ENDED_PER_CALLER + 1  # and the caller's set


@pytest.mark.interop
async def test_garbage_under_a_request_key_is_an_error(replicas: list[RedisApprovalStore]) -> None:
    store = replicas[0]
    request = (await plan_on(store).decide(CALL)).steps[0].request
    assert request is not None
    key = f"{store.prefix}request:{request.id}"
    await store.connection.call("SET", lambda r: r.set(key, b"{not json"))
    with pytest.raises(BackendError, match="is not readable: JSONDecodeError"):
        await store.get(request.id)
    ruling = await plan_on(store).decide(CALL)
    assert ruling.steps[0].outcome.status is Status.ERROR


async def test_a_redis_that_is_down_is_an_error() -> None:
    with redis_down() as url:
        connection = RedisStateSource(url, connect_timeout=0.5, read_timeout=0.5)
        store = RedisApprovalStore(connection, "down:")
        try:
            ruling = await plan_on(store).decide(CALL)
            (step,) = ruling.steps
            assert step.outcome.status is Status.ERROR and not ruling.allowed
            assert step.outcome.reason.startswith("approval store 'redis' failed: BackendError: "
                                                  "redis approval open failed:")
        finally:
            await connection.aclose()


@pytest.mark.interop
async def test_an_approval_outlives_its_requests_wait(redis_server: RedisServer) -> None:
    """A request that waited 10 s and was approved for a day keeps its binding a day (and the
    keep time), so the retry finds the approval instead of asking anew."""
    now = [1000.0]
    connection = RedisStateSource(redis_server.url, connect_timeout=5, read_timeout=5)
    store = RedisApprovalStore(connection, f"ttl:{uuid.uuid4().hex}:", clock=lambda: now[0],
                               keep_seconds=60)
    try:
        binding = bind("deploy", "t", {}, ALICE, "r1")
        assert not isinstance(binding, str)
        opened = await store.open(binding, 10, 86_400)
        assert isinstance(opened, Changed)
        before = await connection.call("PTTL", lambda r: r.pttl(store._binding_key(binding)))
        assert before <= 70_000
        now[0] += 5
        assert isinstance(await store.decide(opened.request.id, "approve", BOB), Changed)
        after = await connection.call("PTTL", lambda r: r.pttl(store._binding_key(binding)))
        assert after > 86_400_000
    finally:
        await connection.aclose()
