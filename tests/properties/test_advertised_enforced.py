"""Property: for random tool registrations through every hosted adapter (code arguments, `@requires`,
by-name declarations, `_meta` mirrors, duplicate names, policy lists, confidential requirements),
what `tools/list` advertises is a subset of what a call enforces, and what is enforced but not
advertised is exactly the confidential requirements (SPEC §3), before any listing and after it; what
is enforced holds the requirements of the function that actually runs. The reliability suite reuses
these builders.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import mcp_types
from fastmcp import FastMCP
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError

from mcp_preconditions.guard import Guard
from mcp_preconditions.integrations.client_mcp import denial_of
from mcp_preconditions.integrations.fastmcp import guard_fastmcp
from mcp_preconditions.integrations.mcp_sdk import GuardedMCPServer, guard_server, requires
from mcp_preconditions.policy.load import parse_policy
from mcp_preconditions.requirements import merge
from mcp_preconditions.wire import META_KEY
from tests.fixtures.mcp_servers import raw_tools

NAMES = ("launch", "abort", "fuel")
REQUIREMENTS = ("env:a", "env:b", "env:c", "env:d")  # none holds: every one ends in `unmet`
FLAVOURS = ("MCPServer", "lowlevel", "fastmcp")
How = Literal["argument", "decorator", "by_name"]


@dataclass(frozen=True)
class Registration:
    """One tool registration: its requirements in code (`how` they are given) and its mirror."""

    name: str
    code: tuple[str, ...]
    how: How
    mirror: tuple[str, ...] | None


@dataclass(frozen=True)
class Case:
    registrations: tuple[Registration, ...]
    policy: Mapping[str, tuple[str, ...]]
    confidential: tuple[str, ...] = ()
    denial: Literal["result", "jsonrpc"] = "result"  # the policy's `[guard] denial`

    def names(self) -> list[str]:
        return list(dict.fromkeys(r.name for r in self.registrations))


@dataclass(frozen=True)
class Refusal:
    """What a denied call told its caller: the requirements it named, and how many it withheld."""

    unmet: frozenset[str]
    withheld: int


@dataclass
class Built:
    """A guarded server, which registration's function runs per name, and the calls that ran."""

    target: Any
    runs: dict[str, Registration] = field(default_factory=dict)
    ran: list[str] = field(default_factory=list)
    ran_by: list[Registration] = field(default_factory=list)  # whose function ran, per call
    by_name: dict[str, tuple[str, ...]] = field(default_factory=dict)
    extra: dict[str, tuple[str, ...]] = field(default_factory=dict)  # e.g. every listed mirror
    register: Callable[[Registration], None] = lambda reg: None  # one more registration, any time

    def declare(self, reg: Registration) -> None:
        self.by_name[reg.name] = merge(self.by_name.get(reg.name, ()), reg.code)


def policy_bytes(policy: Mapping[str, tuple[str, ...]], confidential: tuple[str, ...] = ()) -> bytes:
    tables = "".join(f"[tools.{n}]\nrequirements = {list(r)!r}\n" for n, r in policy.items())
    head = f'environment = ["z"]\nconfidential = {list(confidential)!r}\n'
    return (head + tables).replace("'", '"').encode()


def guard_for(case: Case) -> Guard:
    text = policy_bytes(case.policy, case.confidential) + f'[guard]\ndenial = "{case.denial}"\n'.encode()
    return Guard(parse_policy(text, "policy.toml"), entry_points=False)


def function(built: Built, reg: Registration) -> Callable[[], str]:
    def tool() -> str:
        built.ran.append(reg.name)
        built.ran_by.append(reg)
        return "ran"

    tool.__name__ = reg.name
    return requires(*reg.code)(tool) if reg.how == "decorator" else tool


def meta_of(reg: Registration) -> dict[str, Any] | None:
    return {META_KEY: list(reg.mirror)} if reg.mirror is not None else None


def start_mcpserver(case: Case) -> Built:
    server = GuardedMCPServer("s", guard=guard_for(case))
    built = Built(server)

    def register(reg: Registration) -> None:
        fn = function(built, reg)
        if reg.how == "by_name":
            server.preconditions.requires(*reg.code, name=reg.name)(fn)
            built.declare(reg)
        try:  # the SDK keeps the first function of a name: a second one raises
            server.add_tool(fn, name=reg.name, meta=meta_of(reg),
                            requirements=reg.code if reg.how == "argument" else None)
        except ValueError:
            assert reg.name in built.runs
            return
        built.runs[reg.name] = reg

    built.register = register
    return built


def start_fastmcp(case: Case) -> Built:
    app: FastMCP[Any] = FastMCP("s", on_duplicate="replace")
    pre = guard_fastmcp(app, guard_for(case))
    built = Built(app._mcp_server)

    def register(reg: Registration) -> None:
        fn = function(built, reg)
        if reg.how == "by_name":
            pre.requires(*reg.code, name=reg.name)(fn)
            built.declare(reg)
        elif reg.how == "argument":
            pre.requires(*reg.code)(fn)
        app.tool(name=reg.name, meta=meta_of(reg))(fn)
        built.runs[reg.name] = reg  # "replace": the last function of a name runs

    built.register = register
    return built


def start_lowlevel(case: Case) -> Built:
    built = Built(None)
    entries: list[dict[str, Any]] = []  # read by the list handler on every request

    async def list_tools(ctx: Any, params: Any) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=[mcp_types.Tool.model_validate(e) for e in entries])

    async def call_tool(ctx: Any, params: mcp_types.CallToolRequestParams) -> mcp_types.CallToolResult:
        built.ran.append(params.name)
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text="ran")])

    built.target = Server("s", on_list_tools=list_tools, on_call_tool=call_tool)
    pre = guard_server(built.target, guard_for(case))

    def register(reg: Registration) -> None:  # code requirements are given by name here
        pre.requires(*reg.code, name=reg.name)(function(built, reg))
        built.declare(reg)
        built.extra[reg.name] = merge(built.extra.get(reg.name, ()), reg.mirror or ())
        # One entry per name (a name listed twice is refused, SPEC §10: tests/integration/
        # test_one_rule_set.py), carrying every mirror registered for it.
        entries[:] = [e for e in entries if e["name"] != reg.name]
        entries.append({"name": reg.name, "inputSchema": {"type": "object"},
                        **({"_meta": {META_KEY: list(built.extra[reg.name])}}
                           if built.extra[reg.name] or reg.mirror is not None else {})})
        built.runs.setdefault(reg.name, reg)

    built.register = register
    return built


def build(case: Case, flavour: str) -> Built:
    built = STARTS[flavour](case)
    for reg in case.registrations:
        built.register(reg)
    return built


STARTS = {"MCPServer": start_mcpserver, "lowlevel": start_lowlevel, "fastmcp": start_fastmcp}


def expected(case: Case, built: Built, name: str) -> set[str]:
    """The oracle: the policy's list, the by-name declarations, and what the registration whose
    function runs carries (and, for a lowlevel server, every mirror its list shows)."""
    reg = built.runs[name]
    carried = reg.code if reg.how != "by_name" else ()
    return set(merge(case.policy.get(name, ()), built.by_name.get(name, ()), carried,
                     reg.mirror or (), built.extra.get(name, ())))


def expected_refusal(case: Case, enforced: set[str]) -> Refusal | None:
    """The denial a call gets when it must enforce `enforced` (none of them holds): the disclosed
    ones named, the confidential ones counted; None when there is nothing to enforce."""
    if not enforced:
        return None
    hidden = enforced & set(case.confidential)
    return Refusal(frozenset(enforced - hidden), len(hidden))


@dataclass
class Observed:
    before: dict[str, Refusal | None]  # per name: the call before any list (None: it ran)
    listed: dict[str, tuple[set[str], set[str]]]  # (execution.requirements, the _meta mirror)
    after: dict[str, Refusal | None]
    ran: list[str]


async def refusal(client: Client, name: str) -> Refusal | None:
    """What a call was denied for; None when it was allowed."""
    with contextlib.suppress(MCPError):
        result = await client.call_tool(name, {})
        if not result.is_error:
            return None
        denial = denial_of(result)  # under `_meta` for a tool that declares an outputSchema
        if denial is None:  # refused without a payload: the policy is unusable for the server
            return Refusal(frozenset({"<refused>"}), 0)
        return Refusal(frozenset(denial["unmet"]), denial["withheld"])
    return Refusal(frozenset({"<refused>"}), 0)


async def call(client: Client, name: str) -> set[str] | None:
    """The requirements a call was denied for by name; None when it was allowed."""
    found = await refusal(client, name)
    return set(found.unmet) if found is not None else None


async def observe(case: Case, flavour: str) -> tuple[Built, Observed]:
    built = build(case, flavour)
    async with Client(built.target) as client:
        before = {n: await refusal(client, n) for n in case.names()}
        tools = await raw_tools(client.session)
        after = {n: await refusal(client, n) for n in case.names()}
    listed = {t["name"]: (set((t.get("execution") or {}).get("requirements") or ()),
                          set((t.get("_meta") or {}).get(META_KEY) or ())) for t in tools}
    return built, Observed(before, listed, after, list(built.ran))


def registrations() -> st.SearchStrategy[Registration]:
    reqs = st.lists(st.sampled_from(REQUIREMENTS), max_size=3).map(tuple)
    return st.builds(Registration, st.sampled_from(NAMES), reqs,
                     st.sampled_from(("argument", "decorator", "by_name")), st.none() | reqs)


def cases() -> st.SearchStrategy[Case]:
    return st.builds(Case, st.lists(registrations(), min_size=1, max_size=5).map(tuple),
                     st.dictionaries(st.sampled_from(NAMES),
                                     st.lists(st.sampled_from(REQUIREMENTS), max_size=2).map(tuple)),
                     st.lists(st.sampled_from(REQUIREMENTS), max_size=3, unique=True).map(tuple))


@settings(max_examples=40, deadline=None)
@given(cases(), st.sampled_from(FLAVOURS))
def test_advertised_is_enforced_less_the_confidential(case: Case, flavour: str) -> None:
    built, seen = asyncio.run(observe(case, flavour))
    confidential = set(case.confidential)
    for name in case.names():
        execution, mirror = seen.listed[name]
        assert execution == mirror, name
        enforced = expected(case, built, name)
        assert mirror <= enforced, (name, flavour)
        assert enforced - mirror == enforced & confidential, (name, flavour)
        assert seen.before[name] == seen.after[name] == expected_refusal(case, enforced), (name, flavour)
    assert seen.ran == [n for n in [*case.names(), *case.names()] if not expected(case, built, n)]


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(NAMES), st.lists(st.sampled_from(REQUIREMENTS), max_size=4)),
       st.dictionaries(st.sampled_from(NAMES),
                       st.lists(st.sampled_from(REQUIREMENTS), max_size=3).map(tuple)),
       st.lists(st.sampled_from(REQUIREMENTS), max_size=4, unique=True).map(tuple))
def test_the_guards_advertised_list_is_its_enforced_list_less_the_confidential(
        code: dict[str, list[str]], policy: dict[str, tuple[str, ...]],
        confidential: tuple[str, ...]) -> None:
    guard = Guard(parse_policy(policy_bytes(policy, confidential), "policy.toml"), code,
                  entry_points=False)
    for name in NAMES:
        enforced, advertised = guard.requirements_for(name), guard.advertised_for(name)
        assert enforced == merge(code.get(name, ()), policy.get(name, ()))
        assert advertised == tuple(r for r in enforced if r not in confidential)  # order kept
