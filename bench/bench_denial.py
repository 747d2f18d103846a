"""What a denial costs (issue 33: its SEP-2643 envelope must add <= 5 µs, an allowed call nothing).

Three figures, each measured the way the other benches measure: (1) the guard's decision on a
denied call of SEP-2487's `launch_rocket` plus the `isError` result it becomes
(`denials.denial_result`), next to the same tool's allowed decision, interleaved
(`bench.interleaved`); (2) what the envelope adds to that: the same result shaped with and without
it (the decision's context ID left out), plus drawing the ID; (3) a denied `tools/call` through the
MCP SDK's in-process client against a guarded MCPServer, paired call by call with an allowed call of
a tool with the same requirements (the median of the differences).

Run: .venv/bin/python -m bench.bench_denial
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import logging
import statistics
from collections.abc import Awaitable, Callable
from time import perf_counter_ns
from typing import Any

from mcp import Client

from bench import fresh, interleaved, percentile, summary_us
from mcp_preconditions.denials import denial_result
from mcp_preconditions.envelope import new_context_id
from mcp_preconditions.examples_server import LAUNCH_REQUIREMENTS, default_policy
from mcp_preconditions.guard import Guard
from mcp_preconditions.integrations.mcp_sdk import GuardedMCPServer
from mcp_preconditions.principal import Credentials, Identity, Principal

TOOL = "launch_rocket"
DENIED_TOOL = "launch_denied"  # the same six requirements, and one claim nobody has
NOBODY = "auth:claim:role:nobody"
SAMPLES = 40_000
PAIRS, WARMUP = 6_000, 300
CLAIMS = {"sub": "alice", "role": "mission_control", "scope": "mission:write"}
ALICE = Identity(principal=Principal.from_claims(CLAIMS))
ARGUMENTS = {"vehicle": "Falcon 9"}


def guard() -> Guard:
    return Guard(default_policy(), {TOOL: list(LAUNCH_REQUIREMENTS),
                                    DENIED_TOOL: [*LAUNCH_REQUIREMENTS, NOBODY]})


def decisions() -> dict[str, float]:
    """(1): a denial (decision + result) against the allowed decision, in microseconds."""
    g = guard()
    assert g.decide(TOOL, ALICE, ARGUMENTS, record=False).allowed
    assert not g.decide(DENIED_TOOL, ALICE, ARGUMENTS, record=False).allowed
    decision = g.decide(DENIED_TOOL, ALICE, ARGUMENTS, record=False)
    bare = dataclasses.replace(decision, context_id=None)  # no context ID: shaped without envelope
    assert "_meta" in denial_result(decision) and "_meta" not in denial_result(bare)
    raw = interleaved({
        "allowed": lambda: g.decide(TOOL, ALICE, ARGUMENTS, record=False),
        "denied": lambda: g.decide(DENIED_TOOL, ALICE, ARGUMENTS, record=False),
        "denial": lambda: denial_result(g.decide(DENIED_TOOL, ALICE, ARGUMENTS, record=False)),
        "shaped": lambda: denial_result(decision),
        "shaped_bare": lambda: denial_result(bare),
        "context_id": new_context_id,
    }, SAMPLES)
    stats = {name: summary_us(values) for name, values in raw.items()}
    added = stats["shaped"]["p50_us"] - stats["shaped_bare"]["p50_us"] + stats["context_id"]["p50_us"]
    return {"denial_allowed_decision_p50_us": stats["allowed"]["p50_us"],
            "denial_denied_decision_p50_us": stats["denied"]["p50_us"],
            "denial_with_result_p50_us": stats["denial"]["p50_us"],
            "denial_envelope_added_us": added}


async def launch(vehicle: str) -> str:
    return f"{vehicle} has cleared the tower."


async def round_trips() -> dict[str, float]:
    """(2): denied minus allowed `tools/call`, paired, through the SDK's in-process client."""
    server = GuardedMCPServer("guarded", guard=Guard(default_policy()), log_level="WARNING",
                              credentials=lambda _request: Credentials(principal=ALICE.principal))
    server.add_tool(launch, name=TOOL, structured_output=False, requirements=LAUNCH_REQUIREMENTS)
    server.add_tool(launch, name=DENIED_TOOL, structured_output=False,
                    requirements=[*LAUNCH_REQUIREMENTS, NOBODY])
    async with Client(server) as client:
        def call(name: str) -> Callable[[], Awaitable[Any]]:
            return lambda: client.call_tool(name, ARGUMENTS)
        allowed, denied = call(TOOL), call(DENIED_TOOL)
        assert not (await allowed()).is_error and (await denied()).is_error
        for _ in range(WARMUP):
            await allowed()
            await denied()
        clock = perf_counter_ns
        pairs: list[int] = []
        times: dict[str, list[int]] = {"allowed": [], "denied": []}
        gc.disable()
        try:
            for i in range(PAIRS):
                order = ((allowed, "allowed"), (denied, "denied"))
                took: dict[str, int] = {}
                for fn, name in (order if i % 2 else order[::-1]):
                    t0 = clock()
                    await fn()
                    took[name] = clock() - t0
                times["allowed"].append(took["allowed"])
                times["denied"].append(took["denied"])
                pairs.append(took["denied"] - took["allowed"])
                if i % 500 == 0:
                    gc.collect()
        finally:
            gc.enable()
    return {"denial_mcp_allowed_p50_us": percentile(times["allowed"], 50) / 1000,
            "denial_mcp_denied_p50_us": percentile(times["denied"], 50) / 1000,
            "denial_mcp_added_us": statistics.median(pairs) / 1000}


def measure() -> dict[str, float]:
    logging.getLogger("mcp_preconditions").setLevel(logging.ERROR)  # no records, no name warnings
    return {**decisions(), **asyncio.run(round_trips())}


def run() -> dict[str, float]:
    """The median of each figure over three fresh interpreters."""
    runs = [fresh("bench_denial", "measure") for _ in range(3)]
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
