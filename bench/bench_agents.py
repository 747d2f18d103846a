"""The strict client filter inside agent frameworks: its cost per `list_tools` of 1,000 tools in
pydantic-ai (`RequirementsToolset`) and the OpenAI Agents SDK (`RequirementsFilter`), next to the
framework's own listing from a real stdio MCP server (goal: the filter <= 5 % of the listing).

`run() -> dict[str, float]` for bench/run.py; `python -m bench.bench_agents` prints the figures.
`python -m bench.bench_agents --serve` is the stdio server it measures against.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

TOOLS = 1_000
ROUNDS = 15
ROOT = Path(__file__).resolve().parents[1]
# A pool the tools draw from: some satisfied, some unsatisfiable, the rest unknown to the client.
POOL = [f"{ns}:{i}" for ns in ("auth:claim:role", "env", "state", "feature") for i in range(25)]
SATISFIED = POOL[0:40]
UNSATISFIABLE = POOL[40:50]


def tool_definitions(count: int = TOOLS, distinct: bool = False) -> list[dict[str, Any]]:
    """`count` tools as a guarded server lists them: requirements on the wire and in the mirror.
    76 distinct requirement lists (0 to 3 strings), as tools of a server share a few profiles; with
    `distinct`, every tool has a list of its own (two strings), the worst case for sharing."""
    from mcp_preconditions.wire import with_requirements

    tools = []
    for i in range(count):
        base = {"name": f"tool_{i:04d}", "description": f"Tool number {i}.",
                "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}}
        reqs = [POOL[(i * 7 + k * 13) % len(POOL)] for k in range(i % 4)]
        if distinct:  # (i mod 100, (i // 100 + i) mod 100) differs for every i below 10,000
            reqs = [POOL[i % len(POOL)], POOL[(i // len(POOL) + i) % len(POOL)]]
        tools.append(with_requirements(base, reqs))
    return tools


def serve() -> None:
    """A stdio MCP server (the SDK's lowlevel Server) that lists `tool_definitions()`."""
    import mcp_types
    from mcp.server.lowlevel.server import Server
    from mcp.server.stdio import stdio_server

    listed = mcp_types.ListToolsResult(tools=[mcp_types.Tool.model_validate(t) for t in tool_definitions()])

    async def list_tools(ctx: Any, params: Any) -> mcp_types.ListToolsResult:
        return listed

    async def call_tool(ctx: Any, params: mcp_types.CallToolRequestParams) -> mcp_types.CallToolResult:
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text="ok")])

    server: Server[Any] = Server("bench-agents", on_list_tools=list_tools, on_call_tool=call_tool)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)


SERVE = [sys.executable, "-m", "bench.bench_agents", "--serve"]


async def median_ms(call: Callable[[], Awaitable[Any]], rounds: int = ROUNDS) -> float:
    await call()  # warm-up: connection, caches, imports
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        await call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3


def knowledge() -> Any:
    from mcp_preconditions.client import Knowledge

    return Knowledge(SATISFIED, UNSATISFIABLE)


def listed_toolset(tools: dict[str, Any]) -> Any:
    """A toolset that hands over tools already listed, at no cost: what is timed around it is the
    filter's own work."""
    from pydantic_ai.toolsets import ExternalToolset

    class Listed(ExternalToolset[Any]):
        async def get_tools(self, ctx: Any) -> dict[str, Any]:
            return tools

    return Listed([])


async def pydantic_ai_figures() -> dict[str, float]:
    """MCPToolset.get_tools (uncached: a real tools/list; cached: the definitions rebuilt from its
    cache) and RequirementsToolset's own work on the same 1,000 tools."""
    from fastmcp.client.transports import StdioTransport
    from pydantic_ai import RunContext
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.usage import RunUsage

    from mcp_preconditions.integrations.pydantic_ai import RequirementsToolset

    ctx = RunContext(deps=None, model=TestModel(), usage=RunUsage())
    transport = StdioTransport(command=SERVE[0], args=SERVE[1:], cwd=str(ROOT))
    uncached, cached = MCPToolset(transport, cache_tools=False), MCPToolset(transport)
    async with uncached, cached:
        listed = await uncached.get_tools(ctx)
        assert len(listed) == TOOLS
        listing = await median_ms(lambda: uncached.get_tools(ctx))
        listing_cached = await median_ms(lambda: cached.get_tools(ctx))
    filtered = RequirementsToolset(listed_toolset(listed), knowledge=knowledge())
    cost = await median_ms(lambda: filtered.get_tools(ctx))
    kept = len(await filtered.get_tools(ctx))
    return {"agents_pydantic_ai_listing_ms": listing, "agents_pydantic_ai_listing_cached_ms": listing_cached,
            "agents_pydantic_ai_filter_ms": cost, "agents_pydantic_ai_filter_pct": 100 * cost / listing,
            "agents_pydantic_ai_filter_vs_cached_pct": 100 * cost / listing_cached,
            "agents_pydantic_ai_kept": float(kept)}


async def openai_agents_figures() -> dict[str, float]:
    """MCPServerStdio.list_tools (uncached and cached) and RequirementsFilter over the same 1,000
    typed tools, called per tool exactly as the SDK calls a `tool_filter`."""
    from agents import Agent, RunContextWrapper
    from agents.mcp import MCPServerStdio, ToolFilterContext
    from mcp_types import Tool

    from mcp_preconditions.integrations.openai_agents import RequirementsFilter

    params: Any = {"command": SERVE[0], "args": SERVE[1:], "cwd": str(ROOT)}
    run_context, agent = RunContextWrapper(context=None), Agent(name="bench")
    async with MCPServerStdio(params, cache_tools_list=False) as uncached, \
            MCPServerStdio(params, cache_tools_list=True) as cached:
        tools = await uncached.list_tools(run_context, agent)
        assert len(tools) == TOOLS
        listing = await median_ms(lambda: uncached.list_tools(run_context, agent))
        listing_cached = await median_ms(lambda: cached.list_tools(run_context, agent))
    rf = RequirementsFilter(knowledge())
    distinct = [Tool.model_validate(t) for t in tool_definitions(distinct=True)]

    async def apply(listed: list[Any]) -> list[Any]:
        context = ToolFilterContext(run_context=run_context, agent=agent, server_name="bench")
        return [t for t in listed if rf(context, t)]  # a new context per listing, as the SDK does

    cost = await median_ms(lambda: apply(tools))
    cost_distinct = await median_ms(lambda: apply(distinct))
    kept = len(await apply(tools))
    return {"agents_openai_listing_ms": listing, "agents_openai_listing_cached_ms": listing_cached,
            "agents_openai_filter_ms": cost, "agents_openai_filter_pct": 100 * cost / listing,
            "agents_openai_filter_vs_cached_pct": 100 * cost / listing_cached,
            "agents_openai_filter_distinct_ms": cost_distinct,
            "agents_openai_filter_distinct_pct": 100 * cost_distinct / listing,
            "agents_openai_kept": float(kept)}


def run() -> dict[str, float]:
    """Both frameworks' figures (milliseconds per list_tools of 1,000 tools, and percentages)."""
    results = anyio.run(pydantic_ai_figures)
    results.update(anyio.run(openai_agents_figures))
    return results


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        for key, value in run().items():
            print(f"{key:45s} {value:10.3f}")
