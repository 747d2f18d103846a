"""Fail-open classes of the hosted adapters (issue 11), as generated cases through the SDK's own
in-process client: duplicate registration, advertised vs enforced requirements, and near-miss policy
tool names. The oracle: a call runs a tool only if the function that ran carries no requirement (none
holds here), and a denied or refused call never runs one.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import unicodedata
from collections import Counter
from typing import Any

import mcp_types
import pytest
from fastmcp import FastMCP
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.server.lowlevel.server import Server

from mcp_preconditions.errors import PolicyError
from mcp_preconditions.guard import Guard
from mcp_preconditions.integrations._server import Preconditions
from mcp_preconditions.integrations.fastmcp import guard_fastmcp
from mcp_preconditions.integrations.mcp_sdk import GuardedMCPServer, guard_server
from mcp_preconditions.names import skeleton
from mcp_preconditions.policy.load import parse_policy
from tests.properties.test_advertised_enforced import (
    FLAVOURS,
    STARTS,
    Built,
    Case,
    Registration,
    call,
    cases,
    expected,
    expected_refusal,
    observe,
)

from .tally import TALLY

HOWS = ("argument", "decorator", "by_name", "mirror")
STRENGTHS = ((("env:a",), ()), ((), ("env:a",)), (("env:a",), ("env:b",)))


def registration(how: str, reqs: tuple[str, ...]) -> Registration:
    if how == "mirror":
        return Registration("launch", (), "decorator", reqs)
    return Registration("launch", reqs, how, None)  # type: ignore[arg-type]


async def checked_call(client: Client, built: Built, shown: set[str]) -> int:
    """Call `launch` once; 1 if it was wrongly allowed: a denied call ran a tool, or an allowed
    call ran a function that carries a requirement, or one declared for the name (lowlevel: what
    the last listing showed, the only place its tools' requirements live)."""
    runs = len(built.ran)
    outcome = await call(client, "launch")
    if outcome is not None:
        return int(len(built.ran) > runs)
    need = set(built.by_name.get("launch", ())) | shown
    for reg in built.ran_by[runs:]:
        need |= set(reg.code) | set(reg.mirror or ())
    return int(bool(need))


async def duplicate_case(flavour: str, first: Registration, second: Registration,
                         mid_session: bool) -> tuple[int, int]:
    """Register `launch` twice (the second time while a client is connected, if `mid_session`);
    returns (calls, wrongly allowed)."""
    built = STARTS[flavour](Case((), {}))
    built.register(first)
    wrong = 0
    async with Client(built.target) as client:
        shown = set(built.extra.get("launch", ()))  # read before the session's first call
        if mid_session:
            wrong += await checked_call(client, built, shown)
        try:
            built.register(second)
        except ValueError:  # GuardedMCPServer refuses a second function for a name
            assert flavour == "MCPServer"
        if not mid_session:
            shown = set(built.extra.get("launch", ()))
        wrong += await checked_call(client, built, shown)
        await client.list_tools()
        wrong += await checked_call(client, built, set(built.extra.get("launch", ())))
    return 3 if mid_session else 2, wrong


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_duplicate_registration_never_weakens_a_tool(flavour: str) -> None:
    grid = list(itertools.product(HOWS, HOWS, STRENGTHS, (False, True)))

    async def run_all() -> tuple[int, int]:
        calls = wrong = 0
        for how1, how2, (reqs1, reqs2), mid in grid:
            made, bad = await duplicate_case(flavour, registration(how1, reqs1),
                                             registration(how2, reqs2), mid)
            calls, wrong = calls + made, wrong + bad
        return calls, wrong

    calls, wrong = asyncio.run(run_all())
    TALLY.add("duplicate registration", cases=len(grid), calls=calls, wrongly_allowed=wrong)
    assert wrong == 0


@settings(max_examples=60, deadline=None)
@given(cases(), st.sampled_from(FLAVOURS))
def test_advertised_requirements_are_enforced(case: Case, flavour: str) -> None:
    built, seen = asyncio.run(observe(case, flavour))
    names = case.names()
    allowed = Counter(n for n in names for o in (seen.before[n], seen.after[n]) if o is None)
    wrong = sum((Counter(seen.ran) - allowed).values())  # a denied call ran its tool
    mismatches = []
    for name in names:
        shown = seen.listed[name][0] | seen.listed[name][1]
        want = expected(case, built, name)  # what the function that runs carries, and the policy
        wrong += sum(1 for o in (seen.before[name], seen.after[name]) if o is None and shown | want)
        if (shown != want - set(case.confidential)
                or not seen.before[name] == seen.after[name] == expected_refusal(case, want)):
            mismatches.append((name, shown, want, seen.before[name], seen.after[name]))
    TALLY.add("advertised vs enforced", cases=1, calls=2 * len(names), wrongly_allowed=wrong)
    assert wrong == 0
    assert mismatches == [], flavour


# --- near-miss policy names ------------------------------------------------------------------------
TOOLS = ("launch_rocket", "café", "abort")
CYRILLIC = {"o": "о", "a": "а", "e": "е", "c": "с"}


def near_misses(name: str) -> list[str]:
    """Strings a policy author might type for `name`: other case, stray white space, a look-alike
    letter, another normalisation form, an invisible character."""
    variants = [name.upper(), name.title(), f" {name}", f"{name} ", f"{name}\t", f"{name}\u200b",
                unicodedata.normalize("NFD", name),
                chr(ord(name[0]) - ord("a") + 0xFF41) + name[1:]]  # a fullwidth first letter
    variants += [name.replace(latin, cyr, 1) for latin, cyr in CYRILLIC.items() if latin in name]
    found = [v for v in dict.fromkeys(variants) if v != name]
    assert all(skeleton(v) == skeleton(name) for v in found), name
    return found


NEAR = [(tool, variant) for tool in TOOLS for variant in near_misses(tool)]


def near_miss_policy(variant: str) -> bytes:
    return (f'environment = ["staging"]\n[tools.{json.dumps(variant)}]\n'
            f'requirements = ["env:production"]\n').encode()


def serve(flavour: str, guard: Guard, tool: str, ran: list[str]) -> tuple[Any, Preconditions]:
    """`tool`, with no requirements in code, on one hosted adapter."""

    def fn() -> str:
        ran.append(tool)
        return "ran"

    if flavour == "MCPServer":
        server = GuardedMCPServer("s", guard=guard)
        server.add_tool(fn, name=tool)
        return server, server.preconditions
    if flavour == "fastmcp":
        app: FastMCP[Any] = FastMCP("s")
        pre = guard_fastmcp(app, guard)
        app.tool(name=tool)(fn)
        return app._mcp_server, pre

    async def list_tools(ctx: Any, params: Any) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=[mcp_types.Tool(name=tool, input_schema={"type": "object"})])

    async def call_tool(ctx: Any, params: mcp_types.CallToolRequestParams) -> mcp_types.CallToolResult:
        fn()
        return mcp_types.CallToolResult(content=[])

    lowlevel: Server[Any] = Server("s", on_list_tools=list_tools, on_call_tool=call_tool)
    return lowlevel, guard_server(lowlevel, guard)


async def near_miss_case(flavour: str, tool: str, variant: str) -> tuple[int, int]:
    """At start: the server lists its tools and refuses every call (the policy is unusable for it,
    SPEC §10). On reload from the exact name: the old policy stays and still denies. Returns
    (calls, wrongly allowed)."""
    ran: list[str] = []
    bad = parse_policy(near_miss_policy(variant), "policy.toml")
    target, _ = serve(flavour, Guard(bad, entry_points=False), tool, ran)
    async with Client(target) as client:
        refused = await call(client, tool) == {"<refused>"}
        assert [t.name for t in (await client.list_tools()).tools] == [tool]
        refused = refused and await call(client, tool) == {"<refused>"}
    good = parse_policy(near_miss_policy(tool), "policy.toml")
    guard = Guard(good, entry_points=False)
    target, pre = serve(flavour, guard, tool, ran)
    async with Client(target) as client:
        await client.list_tools()
        with pytest.raises(PolicyError, match="nearly matches"):
            await pre.reload(bad)
        still = await call(client, tool) == {"env:production"}
    assert refused and still and guard.revision == good.revision
    return 2, len(ran)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_near_miss_policy_name_never_leaves_the_tool_unguarded(flavour: str) -> None:
    async def run_all() -> tuple[int, int]:
        calls = wrong = 0
        for tool, variant in NEAR:
            made, bad = await near_miss_case(flavour, tool, variant)
            calls, wrong = calls + made, wrong + bad
        return calls, wrong

    calls, wrong = asyncio.run(run_all())
    TALLY.add("near-miss policy name", cases=len(NEAR), calls=calls, wrongly_allowed=wrong)
    assert wrong == 0
    assert len(NEAR) >= 25
