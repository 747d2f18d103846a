"""`state:KEY` (SPEC §4): static policy values, sync and async Python callables (in code or named in
the policy), a live source, and the TTL cache: hits, negative results, 0 disables, failures never cached.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from mcp_preconditions import (
    ANONYMOUS,
    Guard,
    Identity,
    LiveSources,
    Outcome,
    PolicyError,
    RequirementError,
    parse_policy,
)
from mcp_preconditions.outcomes import Status
from mcp_preconditions.resolvers.base import CallContext
from mcp_preconditions.resolvers.state import StateResolver
from tests.fixtures.clock import FakeClock

VALUES = '[state.values]\n"weather.clear" = true\n"range.safe" = false\n'
HERE = "tests.unit.test_resolvers_state"


def clear_sky() -> bool:
    return True


async def async_cloudy() -> bool:
    return False


NOT_CALLABLE = 42


class Counter:
    """A state callable that returns queued results (or raises them) and counts its calls."""

    def __init__(self, *results: object) -> None:
        self.results = list(results)
        self.calls = 0

    def __call__(self) -> bool:
        self.calls += 1
        result = self.results.pop(0) if len(self.results) > 1 else self.results[0]
        if isinstance(result, Exception):
            raise result
        return result  # type: ignore[return-value]


def guard(policy: str = "", callables: dict[str, Callable[[], object]] | None = None) -> Guard:
    tools = {"t": ["state:k"]}
    return Guard(parse_policy(policy.encode(), "p.toml"), tools, entry_points=False,
                 live=LiveSources(state_callables=callables or {}))  # type: ignore[arg-type]


async def outcome_of(g: Guard, requirement: str = "state:k") -> Outcome:
    g.add_tool("probe", [requirement])
    found = (await g.check("probe", ANONYMOUS)).outcome(requirement)
    assert found is not None
    return found


# -- static values ------------------------------------------------------------------------------
async def test_static_values() -> None:
    g = guard(VALUES)
    assert await outcome_of(g, "state:weather.clear") == Outcome.satisfied(
        "state:weather.clear", "state 'weather.clear' is true (policy)")
    assert await outcome_of(g, "state:range.safe") == Outcome.unsatisfied(
        "state:range.safe", "state 'range.safe' is not true (policy)")
    for missing in ("state:unknown", "state:Weather.clear", "state:weather.clear "):
        assert await outcome_of(g, missing) == Outcome.unsatisfied(
            missing, f"state '{missing[6:]}' is not known to any state source")


@pytest.mark.parametrize("value", ['1', '"yes"', '"true"', '"on"', '0'])
def test_a_non_boolean_static_value_is_rejected(value: str) -> None:
    # A state value that is not a TOML boolean must not be coerced (feature flags treat the same
    # values as non-boolean, i.e. unsatisfied): the policy is refused instead.
    with pytest.raises(PolicyError) as info:
        parse_policy(f'[state.values]\n"k" = {value}\n'.encode(), "p.toml")
    assert info.value.problems == ["state.values.k: Input should be a valid boolean"]


# -- callables ----------------------------------------------------------------------------------
async def test_sync_and_async_callables_given_in_code() -> None:
    async def opened() -> bool:
        return True

    g = guard(callables={"k": opened, "sync": lambda: False})
    assert await outcome_of(g) == Outcome.satisfied("state:k", "state 'k' is true (callable)")
    assert await outcome_of(g, "state:sync") == Outcome.unsatisfied(
        "state:sync", "state 'sync' is not true (callable)")


async def test_callables_named_in_the_policy() -> None:
    g = guard(f'[state.callables]\n"k" = "{HERE}:clear_sky"\n"cloudy" = "{HERE}:async_cloudy"\n')
    assert await outcome_of(g) == Outcome.satisfied("state:k", "state 'k' is true (callable)")
    assert not (await outcome_of(g, "state:cloudy")).ok


async def test_code_callables_take_precedence_over_the_policy() -> None:
    g = guard(f'[state.callables]\n"k" = "{HERE}:clear_sky"\n', {"k": lambda: False})
    assert not (await outcome_of(g)).ok


async def test_static_values_take_precedence_over_callables() -> None:
    counter = Counter(True)
    assert not (await outcome_of(guard('[state.values]\n"k" = false\n', {"k": counter}))).ok
    assert counter.calls == 0


@pytest.mark.parametrize(("spec", "message"), [
    ("nowhere_module_x:f", "p.toml: state.callables.k: cannot import 'nowhere_module_x:f': "
                           "No module named 'nowhere_module_x'"),
    (f"{HERE}:missing", f"p.toml: state.callables.k: cannot import '{HERE}:missing': module "
                        f"'{HERE}' has no attribute 'missing'"),
    (f"{HERE}:NOT_CALLABLE", f"p.toml: state.callables.k: '{HERE}:NOT_CALLABLE' is not a callable "
                             "('module:function')"),
    (HERE, f"p.toml: state.callables.k: '{HERE}' is not a callable ('module:function')"),
])
def test_a_bad_callable_reference_refuses_start_up(spec: str, message: str) -> None:
    with pytest.raises(RequirementError) as info:
        guard(f'[state.callables]\n"k" = "{spec}"\n')
    assert info.value.messages == [message]


async def test_a_failing_callable_is_an_error() -> None:
    g = guard(callables={"k": Counter(OSError("sensor offline"))})
    assert await outcome_of(g) == Outcome.error("state:k", "resolver 'state' raised OSError: "
                                                           "sensor offline")


@pytest.mark.parametrize(("value", "kind"), [(1, "int"), ("true", "str"), (None, "NoneType")])
async def test_a_callable_returning_a_non_boolean_is_an_error(value: object, kind: str) -> None:
    g = guard(callables={"k": lambda: value})
    assert await outcome_of(g) == Outcome.error(
        "state:k", f"state source callable returned {kind}, not a boolean")


async def test_a_slow_async_callable_times_out() -> None:
    async def slow() -> bool:
        await asyncio.sleep(5)  # a callable slower than the lookup timeout, by design
        return True

    g = guard("[guard]\nlookup_timeout_seconds = 0.05\n", {"k": slow})
    assert await outcome_of(g) == Outcome.error("state:k", "resolver 'state' timed out after 0.05 s")


async def test_a_blocking_sync_callable_times_out_without_blocking_the_loop() -> None:
    def blocking() -> bool:
        time.sleep(0.3)  # a callable that blocks its thread past the timeout, by design
        return True

    g = guard("[guard]\nlookup_timeout_seconds = 0.05\n", {"k": blocking})
    assert await outcome_of(g) == Outcome.error("state:k", "resolver 'state' timed out after 0.05 s")


# -- the TTL cache ------------------------------------------------------------------------------
async def test_a_cache_hit_does_not_call_again() -> None:
    counter = Counter(True)
    g = guard("[state]\nttl_seconds = 60\n", {"k": counter})
    assert (await g.check("t")).allowed
    second = await g.check("t")
    assert second.allowed
    assert second.outcomes == (Outcome.satisfied("state:k", "state 'k' is true (callable, cached)"),)
    assert counter.calls == 1


async def test_negative_results_are_cached_too() -> None:
    counter = Counter(False, True)
    g = guard("[state]\nttl_seconds = 60\n", {"k": counter})
    assert not (await g.check("t")).allowed
    second = await g.check("t")
    assert second.outcomes == (Outcome.unsatisfied("state:k",
                                                   "state 'k' is not true (callable, cached)"),)
    assert counter.calls == 1


async def test_ttl_zero_disables_the_cache() -> None:
    counter = Counter(True, False)
    g = guard("[state]\nttl_seconds = 0\n", {"k": counter})
    assert (await g.check("t")).allowed
    assert not (await g.check("t")).allowed
    assert counter.calls == 2


async def test_entries_expire_after_the_ttl() -> None:
    """On the resolver's clock (a fake one here: the guard builds its own on the real clock)."""
    counter, clock = Counter(True, False), FakeClock()
    resolver = StateResolver({}, {"k": counter}, ttl_seconds=0.05, timer=clock)

    async def outcome() -> Outcome:
        found = resolver.resolve("state:k", CallContext("t", Identity()))
        return found if isinstance(found, Outcome) else await found
    assert (await outcome()).status is Status.SATISFIED
    clock.advance(0.049)
    assert await outcome() == Outcome.satisfied("state:k", "state 'k' is true (callable, cached)")
    clock.advance(0.001)
    assert (await outcome()).status is Status.UNSATISFIED
    assert counter.calls == 2


@pytest.mark.parametrize("failure", [OSError("down"), 7])
async def test_failures_are_never_cached(failure: object) -> None:
    counter = Counter(failure, True)
    g = guard("[state]\nttl_seconds = 60\n", {"k": counter})
    first = await g.check("t")
    assert first.errors == ("state:k",) and not first.allowed
    assert (await g.check("t")).allowed
    assert counter.calls == 2


async def test_timeouts_are_never_cached() -> None:
    calls = 0

    async def slow_then_fast() -> bool:
        nonlocal calls
        calls += 1
        if calls == 1:
            await asyncio.sleep(5)  # the first lookup slower than its timeout, by design
        return True

    g = guard("[state]\nttl_seconds = 60\n[guard]\nlookup_timeout_seconds = 0.05\n",
              {"k": slow_then_fast})
    assert (await g.check("t")).errors == ("state:k",)
    assert (await g.check("t")).allowed


# -- a live shared source (Redis in production; an in-memory double here) ------------------------
class Source:
    name = "memory"

    def __init__(self, values: dict[str, object]) -> None:
        self.values = values

    async def get(self, key: str) -> bool:
        value = self.values.get(key, False)
        if isinstance(value, Exception):
            raise value
        return value  # type: ignore[return-value]


async def test_a_live_source_knows_every_key() -> None:
    live = LiveSources(state=Source({"k": True, "down": ConnectionError("refused")}))
    g = Guard(parse_policy(b"", "p.toml"), {}, live=live, entry_points=False)
    assert await outcome_of(g) == Outcome.satisfied("state:k", "state 'k' is true (memory)")
    assert await outcome_of(g, "state:other") == Outcome.unsatisfied(
        "state:other", "state 'other' is not true (memory)")
    assert await outcome_of(g, "state:down") == Outcome.error(
        "state:down", "resolver 'state' raised ConnectionError: refused")
