"""The resolver registry (SPEC §4): sync and async custom resolvers, one resolver per namespace, and
discovery through the `mcp_preconditions.resolvers` entry-point group (examples/custom_resolver).
"""

from __future__ import annotations

import json
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

import mcp_preconditions.resolvers.env as env_module
from mcp_preconditions import (
    ANONYMOUS,
    CallContext,
    Guard,
    Outcome,
    Registry,
    RegistryError,
    RequirementError,
    Resolver,
    parse_policy,
)
from mcp_preconditions.resolvers import EnvResolver
from mcp_preconditions.resolvers.base import ENTRY_POINT_GROUP, load_entry_point_resolvers

HERE = "tests.unit.test_registry"
BUILTINS = "'approval', 'auth', 'capability', 'env', 'feature', 'pdp', 'quota', 'state'"


class Ticket:
    """A sync custom resolver: `ticket:KEY` holds for the keys it was given."""

    namespace = "ticket"

    def __init__(self, approved: tuple[str, ...] = ("OPS-1",)) -> None:
        self.approved = approved

    def __repr__(self) -> str:
        return "Ticket()"

    def validate(self, requirement: str) -> str | None:
        return None if requirement[len("ticket:"):] else "needs a key"

    def resolve(self, requirement: str, context: CallContext) -> Outcome | bool:
        return requirement[len("ticket:"):] in self.approved


class AsyncClock:
    """An async custom resolver: `time:business_hours` holds when the caller's arguments say so."""

    namespace = "time"
    forms = ("time:business_hours",)

    def __repr__(self) -> str:
        return "AsyncClock()"

    def validate(self, requirement: str) -> str | None:
        return None if requirement == "time:business_hours" else "unknown time window"

    async def resolve(self, requirement: str, context: CallContext) -> Outcome:
        if context.arguments.get("hour") in range(9, 17):
            return Outcome.satisfied(requirement, "within business hours")
        return Outcome.unsatisfied(requirement, "outside business hours")


class ShadowEnv:
    namespace = "env"

    def __repr__(self) -> str:
        return "ShadowEnv()"

    def validate(self, requirement: str) -> str | None:
        return None

    def resolve(self, requirement: str, context: CallContext) -> bool:
        return True  # would open every env: requirement; must never be registered


class RaisingValidate(Ticket):
    def validate(self, requirement: str) -> str | None:
        raise ValueError("validator crashed")


NOT_A_RESOLVER = object()


def make_guard(tools: dict[str, Any], resolvers: tuple[Any, ...] = (), entry_points: bool = False,
               policy: str = "") -> Guard:
    return Guard(parse_policy(policy.encode(), "p.toml"), tools, resolvers=resolvers,
                 entry_points=entry_points)


# -- custom resolvers in code -------------------------------------------------------------------
async def test_a_sync_custom_resolver_returning_booleans() -> None:
    g = make_guard({"deploy": ["ticket:OPS-1"], "other": ["ticket:OPS-2"]}, (Ticket(),))
    yes = await g.check("deploy")
    assert yes.allowed
    assert yes.outcomes == (Outcome.satisfied("ticket:OPS-1", "resolver 'ticket' said yes"),)
    no = await g.check("other")
    assert not no.allowed
    assert no.outcomes == (Outcome.unsatisfied("ticket:OPS-2", "resolver 'ticket' said no"),)


async def test_an_async_custom_resolver_reads_the_call_arguments() -> None:
    g = make_guard({"book": ["time:business_hours"]}, (AsyncClock(),))
    assert (await g.check("book", ANONYMOUS, {"hour": 10})).allowed
    late = await g.check("book", ANONYMOUS, {"hour": 22})
    assert late.outcomes == (Outcome.unsatisfied("time:business_hours", "outside business hours"),)


def test_a_custom_namespace_is_listed_among_the_known_ones() -> None:
    with pytest.raises(RequirementError) as info:
        make_guard({"t": ["zz:a", "time:night"]}, (AsyncClock(),))
    assert info.value.messages == [
        f"tool 't': requirement 'zz:a': unknown namespace 'zz' (known namespaces: {BUILTINS}, 'time')",
        "tool 't': requirement 'time:night': unknown time window (accepted forms: time:business_hours)",
    ]


def test_without_forms_the_message_shows_the_namespace() -> None:
    with pytest.raises(RequirementError) as info:
        make_guard({"t": ["ticket:"]}, (Ticket(),))
    assert info.value.messages == ["tool 't': requirement 'ticket:': needs a key (accepted forms: "
                                   "ticket:...)"]


def test_a_validate_that_raises_rejects_the_form() -> None:
    with pytest.raises(RequirementError) as info:
        make_guard({"t": ["ticket:OPS-1"]}, (RaisingValidate(),))
    assert info.value.messages == ["tool 't': requirement 'ticket:OPS-1': the 'ticket' resolver's "
                                   "validate() raised ValueError: validator crashed"]


def test_two_resolvers_for_one_namespace() -> None:
    with pytest.raises(RegistryError) as info:
        Registry([Ticket(), Ticket()])
    assert str(info.value) == (f"two resolvers for namespace 'ticket': Ticket ({__file__}) and "
                               f"Ticket ({__file__})")


def test_a_custom_resolver_may_not_replace_a_builtin() -> None:
    with pytest.raises(RegistryError) as info:
        make_guard({}, (ShadowEnv(),))
    assert str(info.value) == (f"two resolvers for namespace 'env': EnvResolver ({env_module.__file__}) "
                               f"and ShadowEnv ({__file__})")


@pytest.mark.parametrize(("resolver", "message"), [
    (type("NoNs", (), {"validate": lambda s, r: None, "resolve": lambda s, r, c: True,
                       "__repr__": lambda s: "NoNs()"})(),
     f"resolver NoNs ({__file__}) has no valid 'namespace' (a non-empty string without ':')"),
    (type("Colon", (Ticket,), {"namespace": "a:b", "__repr__": lambda s: "Colon()"})(),
     f"resolver Colon ({__file__}) has no valid 'namespace' (a non-empty string without ':')"),
    (type("NoResolve", (), {"namespace": "x", "validate": lambda s, r: None})(),
     "resolver for namespace 'x' has no resolve() method"),
])
def test_malformed_resolvers_are_refused(resolver: Any, message: str) -> None:
    with pytest.raises(RegistryError) as info:
        Registry([resolver])
    assert str(info.value) == message


def test_registry_lookups() -> None:
    env, ticket = EnvResolver(["a"]), Ticket()
    registry = Registry([env, ticket])
    assert registry.namespaces() == ("env", "ticket")
    assert registry.get("ticket") is ticket
    assert registry.for_requirement("env:a") is env
    assert registry.for_requirement("nope") is None
    assert registry.for_requirement("Env:a") is None
    assert list(registry) == [env, ticket]
    assert registry.check_form("ticket:X") is None
    assert registry.check_form("zz:X") == "unknown namespace 'zz' (known namespaces: 'env', 'ticket')"


# -- entry points: the installed example package (examples/custom_resolver) ---------------------
def test_the_example_package_is_discovered() -> None:
    from mcp_preconditions_ticket import TicketResolver

    found = [r for r in load_entry_point_resolvers() if r.namespace == "ticket"]
    assert len(found) == 1
    assert isinstance(found[0], TicketResolver)
    assert isinstance(found[0], Resolver)


async def test_the_example_resolver_decides_through_the_guard(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "tickets.json"
    store.write_text(json.dumps({"OPS-1": "approved", "OPS-2": "open"}))
    monkeypatch.setenv("MCP_PRECONDITIONS_TICKETS", str(store))
    g = make_guard({"a": ["ticket:OPS-1"], "b": ["ticket:OPS-2"], "c": ["ticket:OPS-3"]},
                   entry_points=True)
    assert (await g.check("a")).outcomes == (Outcome.satisfied("ticket:OPS-1", "ticket OPS-1 is approved"),)
    assert (await g.check("b")).outcomes == (Outcome.unsatisfied(
        "ticket:OPS-2", "ticket OPS-2 is 'open', not 'approved'"),)
    assert (await g.check("c")).outcomes == (Outcome.unsatisfied("ticket:OPS-3",
                                                                 "ticket OPS-3 does not exist"),)


async def test_the_example_resolver_fails_closed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_PRECONDITIONS_TICKETS", raising=False)
    g = make_guard({"a": ["ticket:OPS-1"]}, entry_points=True)
    denied = await g.check("a")
    assert denied.outcomes == (Outcome.error("ticket:OPS-1",
                                             "no ticket store configured (MCP_PRECONDITIONS_TICKETS)"),)
    monkeypatch.setenv("MCP_PRECONDITIONS_TICKETS", str(tmp_path / "missing.json"))
    missing = await g.check("a")
    assert not missing.allowed
    assert missing.errors == ("ticket:OPS-1",)
    assert missing.outcomes[0].reason.startswith("resolver 'ticket' raised FileNotFoundError: ")


def test_the_example_resolver_validates_its_form() -> None:
    with pytest.raises(RequirementError) as info:
        make_guard({"t": ["ticket:ops-1", "ticket:OPS-１"]}, entry_points=True)
    forms = "(accepted forms: ticket:KEY (e.g. ticket:OPS-123))"
    assert info.value.messages == [
        f"tool 't': requirement 'ticket:ops-1': ticket: needs a ticket key such as OPS-123 {forms}",
        f"tool 't': requirement 'ticket:OPS-１': ticket: needs a ticket key such as OPS-123 {forms}",
    ]


def test_without_entry_points_the_namespace_is_unknown() -> None:
    with pytest.raises(RequirementError, match="unknown namespace 'ticket'"):
        make_guard({"t": ["ticket:OPS-1"]}, entry_points=False)


def test_an_entry_point_resolver_clashes_with_one_given_in_code() -> None:
    import mcp_preconditions_ticket

    with pytest.raises(RegistryError) as info:
        make_guard({}, (Ticket(),), entry_points=True)
    assert str(info.value) == (f"two resolvers for namespace 'ticket': Ticket ({__file__}) and "
                               f"TicketResolver ({mcp_preconditions_ticket.__file__})")


def fake_entry_points(*values: str) -> Any:
    def entry_points(group: str) -> list[EntryPoint]:
        assert group == ENTRY_POINT_GROUP
        return [EntryPoint(f"ep{i}", v, group) for i, v in enumerate(values)]
    return entry_points


def test_an_entry_point_may_not_replace_a_builtin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mcp_preconditions.resolvers.base.entry_points",
                        fake_entry_points(f"{HERE}:ShadowEnv"))
    with pytest.raises(RegistryError) as info:
        make_guard({"t": ["env:production"]}, entry_points=True)
    assert str(info.value) == (f"two resolvers for namespace 'env': EnvResolver ({env_module.__file__}) "
                               f"and ShadowEnv ({__file__})")


@pytest.mark.parametrize(("value", "message"), [
    ("nowhere_module_y:R", "entry point 'ep0' (nowhere_module_y:R) failed to load: ModuleNotFoundError: "
                           "No module named 'nowhere_module_y'"),
    (f"{HERE}:NOT_A_RESOLVER", f"entry point 'ep0' ({HERE}:NOT_A_RESOLVER) is not a resolver"),
])
def test_broken_entry_points_refuse_start_up(monkeypatch: pytest.MonkeyPatch, value: str,
                                             message: str) -> None:
    monkeypatch.setattr("mcp_preconditions.resolvers.base.entry_points", fake_entry_points(value))
    with pytest.raises(RegistryError) as info:
        make_guard({}, entry_points=True)
    assert str(info.value) == message


def test_entry_points_may_name_a_class_a_factory_or_an_instance(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mcp_preconditions.resolvers.base.entry_points",
                        fake_entry_points(f"{HERE}:Ticket", f"{HERE}:clock_factory", f"{HERE}:INSTANCE"))
    assert [r.namespace for r in load_entry_point_resolvers()] == ["ticket", "time", "other"]


def clock_factory() -> AsyncClock:
    return AsyncClock()


INSTANCE = type("Other", (Ticket,), {"namespace": "other"})()
