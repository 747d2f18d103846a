"""The approval stores against a tiny reference model (SPEC §15), as a hypothesis state machine:
approvers' requests for a handful of bindings (callers x arguments x revisions) and `self`
questions under IDs of their own, decisions by approvers and by the caller, refusals, expiry by a
controlled clock, uses (two at once, from two replicas, must use one approval once), releases, and
floods of one caller's requests (at most 16 waiting and 16 ended kept per caller, the oldest
dropped: SPEC §14). Changed arguments, another caller or a new revision are other bindings, never
approved; a question's ID is never another binding's. Run on the memory store and on two Redis
stores (two replicas, two connections) sharing a real redis-server.

The Redis machine is interop, marked, with why: Redis is the component under test (its scripts and
transactions, two connections racing on one server), which no in-process stand-in would check; the
memory store's machine is the default tier's, with a quarter of its examples (the full count runs
in the interop pass of `make test`, so that the default tier stays fast on two loaded cores).
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from mcp_preconditions.approvals import Binding, Party
from mcp_preconditions.approvals.store import (
    MAX_ENDED_PER_CALLER,
    MAX_PENDING_PER_CALLER,
    Changed,
    MemoryApprovalStore,
)
from mcp_preconditions.approvals.store_redis import RedisApprovalStore
from mcp_preconditions.resolvers.state_redis import RedisStateSource
from tests.fixtures.redis import RedisServer

PEOPLE = [Party("https://idp", "alice"), Party("https://idp", "bob"), Party("https://other", "alice")]
BINDINGS = [Binding("deploy", "deploy_service", f'{{"env":"{env}"}}', caller, revision)
            for caller in PEOPLE[:2] for env in ("prod", "staging") for revision in ("r1", "r2")]
WAIT, SELF_WAIT, LIFETIME = 100, 30, 60


@dataclass
class Ref:
    """One request, obviously: its binding, who answers, state, when that state ends, when made."""

    binding: Binding
    self_approval: bool
    state: str
    ends: int
    created: int


class Reference:
    def __init__(self) -> None:
        self.requests: dict[str, Ref] = {}
        self.latest: dict[Binding, str] = {}
        self.dropped: set[str] = set()

    def age(self, rid: str, now: int) -> list[str]:
        ref = self.requests[rid]
        if ref.state in ("requested", "approved", "refused") and now >= ref.ends:
            ref.state = "expired"
            return ["expired"]
        return []

    def peek(self, rid: str, now: int) -> str:
        ref = self.requests[rid]
        live = ref.state in ("requested", "approved", "refused") and now >= ref.ends
        return "expired" if live else ref.state

    def blocks(self, ref: Ref) -> bool:
        return ref.state in ("requested", "approved") or (ref.state == "refused" and not ref.self_approval)

    def make(self, rid: str, ref: Ref, now: int) -> list[tuple[str, str]]:
        """Keep a new request of `ref.binding.caller`, dropping that caller's oldest beyond the
        bounds: of those waiting, all but the 15 newest; of those ended (not waiting, not an
        approver's decision that holds), all but the 16 newest. What the drops count."""
        mine = sorted(((r.created, i) for i, r in self.requests.items()
                       if i not in self.dropped and r.binding.caller == ref.binding.caller))
        waiting = [i for _, i in mine if self.peek(i, now) == "requested"]
        holding = [i for _, i in mine if not self.requests[i].self_approval
                   and self.peek(i, now) in ("approved", "refused")]
        ended = [i for _, i in mine if i not in waiting and i not in holding]
        drop = waiting[:max(0, len(waiting) - MAX_PENDING_PER_CALLER + 1)] + \
            ended[:max(0, len(ended) - MAX_ENDED_PER_CALLER)]
        events = []
        for i in drop:
            waited = i in waiting
            events += [("deploy", "expired")] if waited or self.age(i, now) else []
            self.dropped.add(i)
            if self.latest.get(self.requests[i].binding) == i:
                del self.latest[self.requests[i].binding]
        self.requests[rid] = ref
        return events


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> float:
        return float(self.now)


class ApprovalMachine(RuleBasedStateMachine):
    """Drives `stores` (one store, or replicas of one) and the reference with the same steps."""

    requests = Bundle("requests")
    make_stores: Any = None  # set by each test: (clock) -> (stores, cleanup coroutine)

    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.ref = Reference()
        self.loop = asyncio.new_event_loop()
        self.stores, self.cleanup = self.make_stores(self.clock, self.loop)
        self.flooded = 0
        self.checked: set[str] = set()  # dropped requests read as gone once

    def store(self, replica: int) -> Any:
        return self.stores[replica % len(self.stores)]

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.run(self.cleanup())
        self.loop.close()

    @initialize()
    def start(self) -> None:
        self.clock.now = 1000

    @rule(seconds=st.sampled_from([0, 1, 10, 29, 30, 59, 60, 100]))
    def tick(self, seconds: int) -> None:
        self.clock.now += seconds

    @rule(target=requests, b=st.integers(0, len(BINDINGS) - 1), replica=st.integers(0, 1))
    def open(self, b: int, replica: int) -> str:
        binding, now = BINDINGS[b], self.clock.now
        answer: Changed = self.run(self.store(replica).open(binding, WAIT, LIFETIME))
        made: list[str] = []
        found = self.ref.latest.get(binding)
        if found is not None:
            made += self.ref.age(found, now)
            if self.ref.blocks(self.ref.requests[found]):
                assert answer.request.id == found and list(answer.made) == made
                return found
        assert answer.request.id not in self.ref.requests and list(answer.made) == [*made, "requested"]
        dropped = self.ref.make(answer.request.id, Ref(binding, False, "requested", now + WAIT, now), now)
        assert [(n, s.value) for n, s in answer.dropped] == dropped
        self.ref.latest[binding] = answer.request.id
        assert answer.request.binding == binding and not answer.request.self_approval
        return answer.request.id

    @rule(target=requests, q=st.integers(0, 5), b=st.integers(0, len(BINDINGS) - 1),
          replica=st.integers(0, 1))
    def ask(self, q: int, b: int, replica: int) -> str:
        """A `self` question under an ID of its own: the same ID is that question as it stands;
        another binding's is refused; an unknown or dropped ID makes it anew."""
        rid, binding, now = f"question.{q}", BINDINGS[b], self.clock.now
        answer = self.run(self.store(replica).ask(rid, binding, SELF_WAIT, LIFETIME))
        known = rid in self.ref.requests and rid not in self.ref.dropped
        if known and self.ref.requests[rid].binding != binding:
            assert answer == "unbound"
            return rid
        assert isinstance(answer, Changed) and answer.request.id == rid
        if known:
            assert list(answer.made) == self.ref.age(rid, now)
            return rid
        self.ref.dropped.discard(rid)
        self.checked.discard(rid)
        self.ref.requests.pop(rid, None)  # made anew
        dropped = self.ref.make(rid, Ref(binding, True, "requested", now + SELF_WAIT, now), now)
        assert list(answer.made) == ["requested"]
        assert [(n, s.value) for n, s in answer.dropped] == dropped
        return rid

    @rule(caller=st.integers(0, 1), count=st.integers(14, 18))
    def flood(self, caller: int, count: int) -> None:
        """One caller makes many requests: their oldest are dropped, nobody else's."""
        for _ in range(count):
            self.clock.now += 1
            self.flooded += 1
            binding = Binding("deploy", "deploy_service", f'{{"n":{self.flooded}}}', PEOPLE[caller],
                              "r1")
            now = self.clock.now
            answer: Changed = self.run(self.store(0).open(binding, WAIT, LIFETIME))
            assert answer.request.id not in self.ref.requests and list(answer.made) == ["requested"]
            dropped = self.ref.make(answer.request.id,
                                    Ref(binding, False, "requested", now + WAIT, now), now)
            assert [(n, s.value) for n, s in answer.dropped] == dropped
            self.ref.latest[binding] = answer.request.id

    @rule(rid=requests, approve=st.booleans(), who=st.integers(0, len(PEOPLE)), replica=st.integers(0, 1))
    def decide(self, rid: str, approve: bool, who: int, replica: int) -> None:
        approver = PEOPLE[who] if who < len(PEOPLE) else None
        answer = self.run(self.store(replica).decide(rid, "approve" if approve else "refuse", approver))
        ref, now = self.ref.requests[rid], self.clock.now
        state = self.ref.peek(rid, now)
        if rid in self.ref.dropped or state == "expired":
            assert answer == "unknown"
        elif state != "requested":
            assert answer == "decided"
        elif not (approver == ref.binding.caller if ref.self_approval else
                  approver is not None and approver != ref.binding.caller):
            assert answer == "own"  # nobody approves their own call; only the caller answers `self`
        else:
            ref.state, ref.ends = ("approved" if approve else "refused"), now + LIFETIME
            assert isinstance(answer, Changed) and list(answer.made) == [ref.state]

    @rule(rid=requests, b=st.integers(0, len(BINDINGS) - 1), same=st.booleans(),
          replica=st.integers(0, 1))
    def use(self, rid: str, b: int, same: bool, replica: int) -> None:
        ref = self.ref.requests[rid]
        binding = ref.binding if same else BINDINGS[b]
        answer = self.run(self.store(replica).use(rid, binding))
        self.check_use(rid, binding, [answer])

    @rule(rid=requests)
    def race(self, rid: str) -> None:
        """Two replicas use one approval at the same instant: at most one wins."""
        binding = self.ref.requests[rid].binding

        async def both() -> list[Any]:
            return list(await asyncio.gather(*(self.store(i).use(rid, binding) for i in (0, 1))))
        self.check_use(rid, binding, self.run(both()))

    def check_use(self, rid: str, binding: Binding, answers: list[Any]) -> None:
        ref, now = self.ref.requests[rid], self.clock.now
        state = self.ref.peek(rid, now)
        wins = [a for a in answers if isinstance(a, Changed)]
        if rid in self.ref.dropped:
            assert answers == ["unknown"] * len(answers)
        elif ref.binding != binding:
            assert answers == ["unbound"] * len(answers)
        elif state != "approved":
            assert answers == ["not_approved"] * len(answers)
        else:
            assert len(wins) == 1 and list(wins[0].made) == ["used"]
            assert sorted(a for a in answers if not isinstance(a, Changed)) == ["not_approved"] * (
                len(answers) - 1)
            ref.state = "used"

    @rule(rid=requests)
    def release(self, rid: str) -> None:
        answer = self.run(self.stores[0].release(rid))
        if rid in self.ref.dropped:
            assert answer == "unknown"
            return
        ref = self.ref.requests[rid]
        assert isinstance(answer, Changed) and answer.made == ()
        if ref.state == "used" and self.clock.now < ref.ends:
            ref.state = "approved"
        assert answer.request.state.value == ref.state

    @rule(rid=requests)
    def expire(self, rid: str) -> None:
        answer = self.run(self.stores[-1].expire(rid))
        if rid in self.ref.dropped:
            assert answer == "unknown"
            return
        made = self.ref.age(rid, self.clock.now)
        ref = self.ref.requests[rid]
        if ref.state == "requested":
            ref.state, ref.ends, made = "expired", self.clock.now, ["expired"]
        assert isinstance(answer, Changed) and list(answer.made) == made

    @invariant()
    def every_request_reads_as_the_reference_says(self) -> None:
        """Each kept request as the reference has it, and each dropped one gone (read once, when
        it was just dropped: nothing brings a request back)."""
        now = self.clock.now
        for rid in self.ref.requests:
            if rid in self.ref.dropped and rid in self.checked:
                continue
            got = self.run(self.stores[-1].get(rid))
            if rid in self.ref.dropped:
                assert got is None, rid
                self.checked.add(rid)
            else:
                assert got is not None and got.state.value == self.ref.peek(rid, now), rid

    @invariant()
    def the_waiting_lists_are_the_references(self) -> None:
        now = self.clock.now
        waiting = {rid: r for rid, r in self.ref.requests.items() if rid not in self.ref.dropped
                   and self.ref.peek(rid, now) == "requested" and not r.self_approval}
        got = self.run(self.stores[0].waiting(1000))
        assert sorted((int(r.expires_at), r.id) for r in got) == sorted(
            (r.ends, rid) for rid, r in waiting.items())
        pages: list[Any] = []  # in batches, each after the last: the same list
        while batch := self.run(self.stores[-1].waiting(3, (pages[-1].expires_at, pages[-1].id)
                                                        if pages else None)):
            pages += batch
        assert [r.id for r in pages] == [r.id for r in got]
        for person in PEOPLE:
            mine = self.run(self.stores[-1].pending_of(person))
            assert sorted(r.id for r in mine) == sorted(
                rid for rid, r in waiting.items() if r.binding.caller == person)
            assert len(mine) <= MAX_PENDING_PER_CALLER


def memory_stores(clock: Clock, loop: asyncio.AbstractEventLoop) -> Any:
    async def nothing() -> None:
        return None
    return [MemoryApprovalStore(clock=clock)], nothing


class InMemory(ApprovalMachine):
    make_stores = staticmethod(memory_stores)


@pytest.mark.parametrize("examples", [pytest.param(30, id="default-tier"),
                                      pytest.param(120, id="full", marks=pytest.mark.interop)])
def test_the_memory_store_is_the_reference(examples: int) -> None:
    run_state_machine_as_test(InMemory, settings=settings(max_examples=examples,
                                                          stateful_step_count=40, deadline=None))


@pytest.fixture
def redis_machine(redis_server: RedisServer) -> type[ApprovalMachine]:
    def replicas(clock: Clock, loop: asyncio.AbstractEventLoop) -> Any:
        # Two replicas: each its own connection pool, one prefix (one shared set of requests).
        # Generous timeouts: what is checked is the transaction, not Redis's speed.
        prefix = f"props:{uuid.uuid4().hex}:"
        connections = [RedisStateSource(redis_server.url, connect_timeout=10, read_timeout=10)
                       for _ in range(2)]

        async def close() -> None:
            for connection in connections:
                await connection.aclose()
        return [RedisApprovalStore(c, prefix, clock=clock) for c in connections], close

    class OnRedis(ApprovalMachine):
        make_stores = staticmethod(replicas)
    return OnRedis


@pytest.mark.interop
def test_two_redis_replicas_are_the_reference(redis_machine: type[ApprovalMachine]) -> None:
    run_state_machine_as_test(redis_machine, settings=settings(max_examples=40, stateful_step_count=30,
                                                               deadline=None))
