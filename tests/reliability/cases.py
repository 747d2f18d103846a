"""The fault matrix's shared pieces: the policy and tools every case starts from (all allowed for
alice when nothing fails), the three ways a call reaches the guard, and the case runner that counts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from mcp_preconditions import Credentials, Decision, Guard, Identity, LiveSources, Principal, Status
from mcp_preconditions import parse_policy as _parse

from .tally import TALLY

LAUNCH = ("auth:oauth2", "auth:claim:role:mission_control", "capability:rocket.launch",
          "env:production", "state:weather.clear", "feature:launch_window.open")
POLICY = """
environment = ["production"]
environment_variable = "RELIABILITY_ENVIRONMENT"

[guard]
lookup_timeout_seconds = 0.05

[features.flags]
"launch_window.open" = true

[state.values]
"weather.clear" = true

[[capabilities.grants]]
capabilities = ["rocket.launch"]
when = ["auth:claim:role:mission_control"]

[[capabilities.grants]]
capabilities = ["live.cap"]
when = ["state:live.key"]
"""
# One tool per namespace (a fault stays in its namespace), plus SEP-2487's launch_rocket.
TOOLS: dict[str, list[str]] = {
    "auth": ["auth:oauth2", "auth:claim:role:mission_control"],
    "capability": ["capability:rocket.launch"],
    "env": ["env:production"],
    "feature": ["feature:launch_window.open"],
    "state": ["state:weather.clear"],
    "launch_rocket": list(LAUNCH),
    "feature_live": ["feature:live.flag"],
    "state_live": ["state:live.key"],
    "capability_live": ["capability:live.cap"],
}
ALICE_CLAIMS = {"sub": "alice", "role": "mission_control"}
ALICE = Principal.from_claims(ALICE_CLAIMS)
ERROR = frozenset({Status.ERROR})
NOT_SATISFIED = frozenset({Status.ERROR, Status.UNSATISFIED})

Path = Callable[[Guard, str], Awaitable[Decision]]


def guard(policy: str = POLICY, *, live: LiveSources | None = None, **kwargs: Any) -> Guard:
    return Guard(_parse(policy.encode(), "reliability.toml"), TOOLS, live=live,
                 entry_points=False, **kwargs)


async def via_check(g: Guard, tool: str) -> Decision:
    """What an MCP adapter does: credentials in, authentication, then the decision."""
    return await g.check(tool, Credentials(principal=ALICE))


async def via_identity(g: Guard, tool: str) -> Decision:
    return await g.check_identity(tool, Identity(principal=ALICE))


async def via_decide(g: Guard, tool: str) -> Decision:
    """The synchronous API (its own event loop for async lookups), from a worker thread."""
    return await asyncio.to_thread(g.decide, tool, Identity(principal=ALICE))


PATHS: tuple[Path, ...] = (via_check, via_identity, via_decide)


async def run_case(suite: str, g: Guard, tools: Iterable[str], requirement: str,
                   expect: frozenset[Status] = ERROR, paths: Iterable[Path] = PATHS) -> list[str]:
    """Every tool through every path: counted, then the problems returned (empty: all denied,
    `requirement` ended in `expect`, nothing raised)."""
    problems: list[str] = []
    calls = allowed = tracebacks = 0
    for tool in tools:
        for path in paths:
            calls += 1
            try:
                decision = await path(g, tool)
            except Exception as exc:  # a fault must never escape the guard
                tracebacks += 1
                problems.append(f"{tool} via {path.__name__}: raised {type(exc).__name__}: {exc}")
                continue
            outcome = decision.outcome(requirement)
            if decision.allowed:
                allowed += 1
                problems.append(f"{tool} via {path.__name__}: ALLOWED")
            if outcome is None or outcome.status not in expect:
                problems.append(f"{tool} via {path.__name__}: {requirement} ended as {outcome}")
    TALLY.add(suite, cases=1, calls=calls, wrongly_allowed=allowed, tracebacks=tracebacks)
    return problems


async def allowed_everywhere(g: Guard, tools: Iterable[str], paths: Iterable[Path] = PATHS) -> None:
    """The control: with healthy parts, the same calls are allowed (so a denial means the fault)."""
    for tool in tools:
        for path in paths:
            decision = await path(g, tool)
            assert decision.allowed, (tool, path.__name__, decision.outcomes)
