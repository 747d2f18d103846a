"""Property: for random policies and callers, the tool calls that reach the upstream are exactly the
calls a tiny reference evaluator allows (every requirement met; `unlisted_tools = "deny"` refuses
tools with none that the policy does not name; a name the upstream lacks is never forwarded). The
gateway runs in-process (a `Gateway` object, its ASGI app over the streaming bridge to the SDK's own
client), in front of the logging upstream in memory; each example has a loop, gateway and upstream
of its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_preconditions.gateway import Gateway, ServerSpec
from mcp_preconditions.gateway.downstream.app import build_app
from mcp_preconditions.gateway.downstream.sessions import Sessions
from mcp_preconditions.guard import Guard
from mcp_preconditions.policy.load import parse_policy
from mcp_preconditions.principal import ANONYMOUS, Credentials, Principal
from tests.fixtures.asgi_bridge import AsgiBridge
from tests.fixtures.gateway_upstream import SECRET_REQUIREMENTS, tool_calls
from tests.fixtures.inprocess import BASE_URL
from tests.fixtures.memory_upstream import STUB, MemoryServers, logging_env

ROLES = ("admin", "observer", "operator")
FLAGS = {"on": True, "off": False}
REQUIREMENTS = [f"auth:claim:role:{r}" for r in ROLES] + [f"feature:{f}" for f in FLAGS]
UPSTREAM_TOOLS = {"echo": [], "secret": SECRET_REQUIREMENTS, "slow": [], "env": []}
CALLED = [*UPSTREAM_TOOLS, "no_such_tool"]

policies = st.fixed_dictionaries({
    "tools": st.dictionaries(st.sampled_from(list(UPSTREAM_TOOLS)),
                             st.lists(st.sampled_from(REQUIREMENTS), max_size=3, unique=True),
                             max_size=4),
    "unlisted": st.sampled_from(["allow", "deny"]),
})
callers = st.lists(st.sampled_from([None, *ROLES]), min_size=1, max_size=3)


def policy_text(policy: dict[str, Any]) -> str:
    lines = ['[features.flags]\non = true\noff = false\n',
             f'[gateway]\nunlisted_tools = "{policy["unlisted"]}"\n']
    for name, reqs in policy["tools"].items():
        lines.append(f"[tools.{name}]\nrequirements = {reqs!r}\n".replace("'", '"'))
    return "\n".join(lines)


def reference_allows(policy: dict[str, Any], role: str | None, tool: str) -> bool:
    """The obviously-correct rule, written without the guard."""
    if tool not in UPSTREAM_TOOLS:
        return False
    reqs = set(UPSTREAM_TOOLS[tool]) | set(policy["tools"].get(tool, []))
    if not reqs:  # SPEC §10: under "deny", `[tools.NAME] requirements = []` exposes an open tool
        return policy["unlisted"] == "allow" or tool in policy["tools"]
    return all(_met(r, role) for r in reqs)


def _met(requirement: str, role: str | None) -> bool:
    if requirement.startswith("feature:"):
        return FLAGS[requirement.removeprefix("feature:")]
    return requirement == f"auth:claim:role:{role}"


@asynccontextmanager
async def client_of(gateway: Gateway) -> AsyncIterator[Client]:
    """`gateway` running in this loop, and the SDK's client (2025-11-25) on its app."""
    app = build_app(gateway, "127.0.0.1", BASE_URL, None, Sessions())
    async with anyio.create_task_group() as tg:
        tg.start_soon(gateway.run)
        async with AsgiBridge(app, base_url=BASE_URL) as bridge, Client(streamable_http_client(
                f"{BASE_URL}/mcp", http_client=bridge.httpx2()), mode="legacy") as client:
            yield client
        tg.cancel_scope.cancel()


def in_memory(key: str) -> ServerSpec:
    """A server spec whose command is the in-memory server `key` (MemoryServers.installed)."""
    return ServerSpec(key, "", command=STUB, args=(key,))


async def run_example(log: Path, policy: dict[str, Any], roles: list[str | None]) -> None:
    caller: list[Credentials] = [ANONYMOUS]
    guard = Guard(parse_policy(policy_text(policy).encode(), "random.toml"),
                  labels={"upstream": "memory"})
    servers = MemoryServers()
    with servers.installed():
        servers.logging_upstream(**logging_env(log))
        gateway = Gateway(guard, [in_memory("upstream")], lambda _call: caller[0])
        async with client_of(gateway) as client:
            for role in roles:
                caller[0] = (Credentials(principal=Principal.from_claims({"sub": "p", "role": role}))
                             if role else ANONYMOUS)
                for tool in CALLED:
                    await client.call_tool(tool, {"seconds": 0})


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(policy=policies, roles=callers)
def test_what_reaches_the_upstream_is_exactly_what_the_reference_allows(
        tmp_path: Path, policy: dict[str, Any], roles: list[str | None]) -> None:
    log = tmp_path / "upstream.jsonl"
    before = len(tool_calls(log))
    anyio.run(run_example, log, policy, roles)
    reached = tool_calls(log)[before:]
    expected = [t for role in roles for t in CALLED if reference_allows(policy, role, t)]
    assert reached == expected
