"""Each decision uses one snapshot, never a mix: policies A and B swap continuously under load.

A allows t1 and denies t2, B the reverse, and every requirement's outcome differs between them: the
static part (env labels, compiled per snapshot) and the live part (a state callable imported per
snapshot, which awaits mid-decision). A decision that mixed two snapshots has an outcome tuple that
matches neither policy, or not the revision it reports.

Lookups get a generous deadline: on a loaded 2-core box a full garbage collection of this test
process freezes the event loop for 0.1-0.6 s, and every lookup in flight then times out (denied,
never mixed). Decisions are checked as they come, not kept, so the heap those collections walk
does not grow with the run.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from mcp_preconditions import Decision, Guard, Identity, Status, load_policy
from mcp_preconditions.drivers.reload import PolicyReloader
from mcp_preconditions.policy.load import revision_of

NOBODY = Identity()
S, U = Status.SATISFIED, Status.UNSATISFIED
ROUNDS, CONCURRENT, MIN_SWAPS = 30, 200, 10
LOOKUP_TIMEOUT = 10  # far above any stall of the loop, far below the test's own timeout
WAIT_SECONDS = 10.0  # the safety net of the rounds run until enough swaps were made


async def gate_a() -> bool:
    await asyncio.sleep(random.random() / 2000)  # a reload can land while this lookup is pending
    return True


async def gate_b() -> bool:
    await asyncio.sleep(random.random() / 2000)  # jitter by design, as in gate_a
    return False


def policy(label: str, gate: str) -> bytes:
    return f"""
environment = ["{label}"]
[guard]
lookup_timeout_seconds = {LOOKUP_TIMEOUT}
[state]
ttl_seconds = 0
[state.callables]
gate = "{__name__}:{gate}"
ungate = "{__name__}:{'gate_b' if gate == 'gate_a' else 'gate_a'}"
[tools.t1]
requirements = ["env:blue", "state:gate"]
[tools.t2]
requirements = ["env:green", "state:ungate"]
""".encode()


A, B = policy("blue", "gate_a"), policy("green", "gate_b")
EXPECTED = {  # (revision, tool) -> (allowed, per-requirement statuses)
    (revision_of(A), "t1"): (True, (S, S)), (revision_of(A), "t2"): (False, (U, U)),
    (revision_of(B), "t1"): (False, (U, U)), (revision_of(B), "t2"): (True, (S, S)),
}


@pytest.fixture(autouse=True)
def _no_environment_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)


class Tally:
    """Revisions seen and decisions matching neither policy (a few kept as examples)."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self.wrong = 0
        self.examples: list[Decision] = []

    def add(self, decisions: list[Decision]) -> None:
        for d in decisions:
            self.seen[d.revision] += 1
            if EXPECTED.get((d.revision, d.tool)) != (d.allowed, tuple(o.status for o in d.outcomes)):
                self.wrong += 1
                if len(self.examples) < 3:
                    self.examples.append(d)

    def check(self) -> Counter[str]:
        assert not self.wrong, f"{self.wrong} mixed decisions, e.g. {self.examples}"
        return self.seen


async def load(guard: Guard, swaps: Callable[[], int]) -> Tally:
    """ROUNDS rounds of CONCURRENT decisions, and more until several swaps happened under load."""
    tally = Tally()
    end = time.monotonic() + WAIT_SECONDS
    rounds = 0
    while rounds < ROUNDS or (swaps() < MIN_SWAPS and time.monotonic() < end):
        calls = [guard.check_identity(random.choice(["t1", "t2"]), NOBODY) for _ in range(CONCURRENT)]
        tally.add(await asyncio.gather(*calls))
        rounds += 1
    return tally


async def test_reloads_from_a_thread_never_mix_snapshots(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_bytes(A)
    guard = Guard(load_policy(path), entry_points=False)
    reloader = PolicyReloader(guard, path)
    done = threading.Event()
    swaps = 0

    def flip() -> None:
        nonlocal swaps
        while not done.is_set():
            path.write_bytes(B if guard.revision == revision_of(A) else A)
            swaps += reloader.reload() is not None
            # Yield the GIL now and then: a reload loop that never sleeps starves the event loop's
            # thread on 2 cores, and the lookups then time out (denied, never mixed, but not the
            # point of this test).
            time.sleep(0.002)  # yields the GIL (above), not a wait

    flipper = threading.Thread(target=flip)
    flipper.start()
    try:
        tally = await load(guard, lambda: swaps)
    finally:
        done.set()
        flipper.join()
    seen = tally.check()
    assert reloader.last_error is None
    assert swaps >= MIN_SWAPS and set(seen) == {revision_of(A), revision_of(B)}, (swaps, seen)


async def test_reloads_inside_the_loop_between_awaits_never_mix_snapshots(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_bytes(A)
    guard = Guard(load_policy(path), entry_points=False)
    reloader = PolicyReloader(guard, path)
    stop = asyncio.Event()

    swaps = 0

    async def flip() -> None:
        nonlocal swaps
        while not stop.is_set():
            path.write_bytes(B if guard.revision == revision_of(A) else A)
            swaps += reloader.reload() is not None
            await asyncio.sleep(random.random() / 2000)  # jitter by design: reloads among lookups

    flipper = asyncio.create_task(flip())
    try:
        tally = await load(guard, lambda: swaps)
    finally:
        stop.set()
    await flipper
    seen = tally.check()
    assert swaps >= MIN_SWAPS and set(seen) == {revision_of(A), revision_of(B)}, (swaps, seen)
