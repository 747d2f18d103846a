"""Property (SPEC §12): for random prefixes (an empty one and equal ones included, so that names
collide), policies over the visible names, callers and calls, what reaches each of 2-3 servers
behind one gateway is exactly the calls a tiny reference allows whose visible name maps to that
server, under its original name. The reference: a visible name maps to a server when exactly one
server lists it and lists it once; a call is allowed when every requirement (the tool's own plus the
policy's) is met, and with none, when `unlisted_tools = "allow"` or the policy names it.

The gateway runs in-process (a `Gateway` object, its app over the streaming bridge to the SDK's own
client), in front of the logging upstream in memory (the third lists `dup` twice); each example has a
loop, gateway and servers of its own.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_preconditions.gateway import Gateway
from mcp_preconditions.guard import Guard
from mcp_preconditions.policy.load import parse_policy
from mcp_preconditions.principal import ANONYMOUS, Credentials, Principal
from tests.fixtures.gateway_upstream import SECRET_REQUIREMENTS, tool_calls
from tests.fixtures.memory_upstream import MemoryServers, logging_env
from tests.integration.test_gateway_property import (
    FLAGS,
    REQUIREMENTS,
    ROLES,
    client_of,
    in_memory,
    policy_text,
)

KEYS = ("a", "b", "c")
OWN = {"echo": [], "secret": SECRET_REQUIREMENTS, "slow": [], "env": []}  # tools called, own reqs
LISTED = {key: [*OWN, "crash", "garbage", "flip", "ask", "bad", "mirror", "typed"] for key in KEYS}
LISTED["c"] = [*LISTED["c"], "dup", "dup"]
PREFIXES = ("", "x__", "y__")

examples = st.integers(min_value=2, max_value=3).flatmap(lambda n: st.fixed_dictionaries({
    # Mostly distinct prefixes (names route), sometimes equal ones (names collide).
    "prefixes": st.one_of(st.permutations(PREFIXES).map(lambda p: p[:n]),
                          st.lists(st.sampled_from(PREFIXES), min_size=n, max_size=n)),
    "unlisted": st.sampled_from(["allow", "deny"]),
    "roles": st.lists(st.sampled_from([None, *ROLES]), min_size=1, max_size=2),
    "seed": st.randoms(use_true_random=False),
}))


def visible_names(prefixes: list[str]) -> list[str]:
    return sorted({p + t for p in prefixes for t in (*OWN, "dup")})


def listed_names(prefixes: list[str]) -> list[str]:
    """The visible names some server lists: what the random policies name. A policy name no server
    lists may be a near miss of one that does (`x__dup` of `y__dup`, or `dup`, the bare name of a
    prefixed server's own tool), which makes that server's policy unusable (SPEC §10; tested in
    test_fleet_routing.py), a rule this routing reference leaves out."""
    return sorted({p + t for key, p in zip(KEYS, prefixes, strict=False) for t in LISTED[key]
                   if t in (*OWN, "dup")})


def routes(prefixes: list[str]) -> dict[str, tuple[str, str]]:
    """visible name -> (server key, original name), for the names exactly one server lists once."""
    owners: dict[str, list[tuple[str, str]]] = {}
    for key, prefix in zip(KEYS, prefixes, strict=False):
        for name in dict.fromkeys(LISTED[key]):
            owners.setdefault(prefix + name, []).append((key, name))
    return {v: found[0] for v, found in owners.items()
            if len(found) == 1 and LISTED[found[0][0]].count(found[0][1]) == 1}


def reference_allows(policy: dict[str, Any], role: str | None, original: str, visible: str) -> bool:
    reqs = set(OWN.get(original, [])) | set(policy["tools"].get(visible, []))
    if not reqs:
        return policy["unlisted"] == "allow" or visible in policy["tools"]
    return all(FLAGS[r.removeprefix("feature:")] if r.startswith("feature:")
               else r == f"auth:claim:role:{role}" for r in reqs)


async def run_example(logs: dict[str, Path], prefixes: list[str], policy: dict[str, Any],
                      roles: list[str | None], calls: list[str]) -> None:
    caller: list[Credentials] = [ANONYMOUS]
    guard = Guard(parse_policy(policy_text(policy).encode(), "random.toml"))
    servers = MemoryServers()
    with servers.installed():
        for key in logs:
            servers.logging_upstream(key, **logging_env(logs[key], **(
                {"GATEWAY_UPSTREAM_DUP": "1"} if key == "c" else {})))
        specs = [replace(in_memory(k), prefix=p) for k, p in zip(logs, prefixes, strict=True)]
        gateway = Gateway(guard, specs, lambda _call: caller[0])
        async with client_of(gateway) as client:
            for role in roles:
                caller[0] = (Credentials(principal=Principal.from_claims({"sub": "p", "role": role}))
                             if role else ANONYMOUS)
                for name in calls:
                    await client.call_tool(name, {"seconds": 0})


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(example=examples)
def test_what_reaches_each_server_is_exactly_the_allowed_calls_mapped_to_it(
        tmp_path: Path, example: dict[str, Any]) -> None:
    prefixes, rng = example["prefixes"], example["seed"]
    names, named = visible_names(prefixes), listed_names(prefixes)
    policy = {"unlisted": example["unlisted"],
              "tools": {n: rng.sample(REQUIREMENTS, rng.randint(0, 2)) for n in rng.sample(
                  named, rng.randint(0, min(4, len(named))))}}
    calls = [*rng.sample(names, len(names)), "no_such_tool"]  # every name once, in any order
    keys = KEYS[:len(prefixes)]
    logs = {k: tmp_path / f"{k}.jsonl" for k in keys}
    before = {k: len(tool_calls(logs[k])) for k in keys}
    anyio.run(run_example, logs, prefixes, policy, example["roles"], calls)
    table = routes(prefixes)
    expected: dict[str, list[str]] = {k: [] for k in keys}
    for role in example["roles"]:
        for name in calls:
            if name in table and reference_allows(policy, role, table[name][1], name):
                expected[table[name][0]].append(table[name][1])
    reached = {k: tool_calls(logs[k])[before[k]:] for k in keys}
    assert reached == expected, (prefixes, policy, calls)
