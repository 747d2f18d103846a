"""Thousands of decisions at once, over threads (the sync API) and asyncio (the adapters' API),
while policies reload underneath, state caches churn (1 ms TTL) and live state callables flap
between answering, raising, sending garbage and hanging. An oracle checks every outcome.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable
from typing import Any

from mcp_preconditions import (
    ANONYMOUS,
    Credentials,
    Decision,
    Guard,
    Identity,
    LiveSources,
    Principal,
    Status,
    parse_policy,
)
from mcp_preconditions.principal import ANONYMOUS_IDENTITY

from .tally import TALLY

THREADS, PER_THREAD, TASKS = 4, 400, 2000

POLICY = """
environment = ["{env}"]
environment_variable = "CONCURRENCY_UNSET"
[guard]
lookup_timeout_seconds = 0.02
[features.flags]
f = {flag}
[state]
ttl_seconds = 0.001
[state.values]
s = {flag}
[[capabilities.grants]]
capabilities = ["c"]
when = ["auth:claim:role:x"]
"""
POLICIES = {name: parse_policy(POLICY.format(env=env, flag=flag).encode(), f"{name}.toml")
            for name, env, flag in (("A", "production", "true"), ("B", "staging", "false"))}
REVISION = {source.revision: name for name, source in POLICIES.items()}
TOOLS = {
    "facts": ["env:production", "feature:f", "state:s"],  # true only under A
    "who": ["auth:oauth2", "auth:claim:role:x", "capability:c"],  # true only for alice
    "live": ["auth:oauth2", "state:live.yes"],  # true unless the callable flaps
    "never": ["state:live.no"],
    "all": ["auth:oauth2", "capability:c", "env:production", "feature:f", "state:s", "state:live.yes"],
}
CALLERS = {"alice": Identity(principal=Principal.from_claims({"sub": "alice", "role": "x"})),
           "bob": Identity(principal=Principal.from_claims({"sub": "bob", "role": ["y", "X"]})),
           "anonymous": ANONYMOUS_IDENTITY}
FLAPPING = {"state:live.yes", "state:live.no"}


def flapping(truth: bool) -> Callable[[], Any]:
    async def state() -> Any:
        roll = random.random()
        if roll < 0.1:
            raise ConnectionError("flap: backend down")
        if roll < 0.2:
            return "garbage"
        if roll < 0.25:
            await asyncio.sleep(1)  # beyond the lookup timeout
        return truth
    return state


def truth(requirement: str, revision: str, caller: str) -> bool:
    """The oracle: whether a requirement holds under a policy revision for a caller."""
    if requirement in ("env:production", "feature:f", "state:s"):
        return REVISION[revision] == "A"
    if requirement == "auth:oauth2":
        return caller != "anonymous"
    if requirement in ("auth:claim:role:x", "capability:c"):
        return caller == "alice"
    return requirement == "state:live.yes"


def wrong(decision: Decision, caller: str) -> list[str]:
    """What is wrong with a decision (empty: nothing): every outcome against the oracle, for the
    one revision that decided it (a mix of two snapshots would show as a contradiction)."""
    if decision.revision not in REVISION:
        return [f"unknown revision {decision.revision}"]
    problems = []
    for o in decision.outcomes:
        holds = truth(o.requirement, decision.revision, caller)
        if o.status is Status.ERROR and o.requirement not in FLAPPING:
            problems.append(f"{o.requirement}: unexpected error {o.reason}")
        elif o.status is not Status.ERROR and (o.status is Status.SATISFIED) != holds:
            problems.append(f"{o.requirement}: {o.status.value} but the truth is {holds}")
    if [o.requirement for o in decision.outcomes] != TOOLS[decision.tool]:
        problems.append(f"outcomes {decision.outcomes} do not match the tool's requirements")
    if decision.allowed and not all(truth(r, decision.revision, caller) for r in TOOLS[decision.tool]):
        problems.append("ALLOWED against the oracle")
    if decision.allowed != all(o.status is Status.SATISFIED for o in decision.outcomes):
        problems.append("allowed does not follow the outcomes")
    return problems


class Run:
    """Collects problems and counts from every worker."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.decisions = self.allowed_wrongly = self.raised = 0
        self.revisions: set[str] = set()
        self.flaps: set[tuple[str, Status]] = set()  # what the flapping lookups ended as
        self.lock = threading.Lock()

    def judge(self, decision: Decision | BaseException, caller: str) -> None:
        with self.lock:
            self.decisions += 1
            if isinstance(decision, BaseException):
                self.raised += 1
                self.problems.append(f"raised {type(decision).__name__}: {decision}")
                return
            self.revisions.add(decision.revision)
            self.flaps.update((o.requirement, o.status) for o in decision.outcomes
                              if o.requirement in FLAPPING)
            found = wrong(decision, caller)
            self.allowed_wrongly += any("ALLOWED" in p for p in found)
            self.problems += [f"{decision.tool} for {caller}: {p}" for p in found]


def make_guard() -> Guard:
    live = LiveSources(state_callables={"live.yes": flapping(True), "live.no": flapping(False)})
    return Guard(POLICIES["A"], TOOLS, live=live, entry_points=False)


def reloader(guard: Guard, stop: threading.Event) -> None:
    flip = False
    while not stop.is_set():
        guard.reload(POLICIES["B" if flip else "A"])
        flip = not flip
        stop.wait(0.001)


def thread_worker(guard: Guard, run: Run, seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(PER_THREAD):
        caller, tool = rng.choice(list(CALLERS)), rng.choice(list(TOOLS))
        try:
            run.judge(guard.decide(tool, CALLERS[caller], record=False), caller)
        except Exception as exc:
            run.judge(exc, caller)


async def task(guard: Guard, run: Run, rng: random.Random) -> None:
    caller, tool = rng.choice(list(CALLERS)), rng.choice(list(TOOLS))
    principal = CALLERS[caller].principal
    credentials = ANONYMOUS if principal is None else Credentials(principal=principal)
    try:
        run.judge(await guard.check(tool, credentials, record=False), caller)
    except Exception as exc:
        run.judge(exc, caller)


async def test_thousands_of_concurrent_decisions_are_all_right() -> None:
    guard, run, stop = make_guard(), Run(), threading.Event()
    workers = [threading.Thread(target=reloader, args=(guard, stop))]
    workers += [threading.Thread(target=thread_worker, args=(guard, run, seed)) for seed in range(THREADS)]
    for w in workers:
        w.start()
    try:
        rng = random.Random(99)
        for start in range(0, TASKS, 250):  # bursts of 250 concurrent calls on this loop
            await asyncio.gather(*(task(guard, run, rng) for _ in range(min(250, TASKS - start))))
    finally:
        for w in workers[1:]:
            await asyncio.to_thread(w.join)
        stop.set()
        workers[0].join()
    TALLY.add("concurrency", cases=run.decisions, calls=run.decisions,
              wrongly_allowed=run.allowed_wrongly, tracebacks=run.raised)
    assert run.problems[:10] == []
    assert run.decisions == THREADS * PER_THREAD + TASKS
    assert run.revisions == set(REVISION)  # both snapshots really decided calls
    assert {("state:live.yes", Status.SATISFIED), ("state:live.yes", Status.ERROR),
            ("state:live.no", Status.UNSATISFIED), ("state:live.no", Status.ERROR)} <= run.flaps


def test_the_oracle_catches_a_wrong_decision() -> None:
    good = Guard(POLICIES["B"], TOOLS, entry_points=False).decide("facts", CALLERS["alice"])
    assert wrong(good, "alice") == []
    forged = Decision("facts", True, good.outcomes, "alice", good.revision)
    assert "ALLOWED against the oracle" in wrong(forged, "alice")
