"""Hypothesis: the agent-framework adapters keep exactly the tools `filter_tools` keeps, in the same
order, for random tools (requirements on the wire and in the `_meta` mirror, absent, or garbage)
and random knowledge (declared and learned): the adapters add no decision of their own.
"""

from __future__ import annotations

from typing import Any

import anyio
from agents import Agent, RunContextWrapper
from agents.mcp import ToolFilterContext
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp_types import Tool
from pydantic_ai import RunContext
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import ExternalToolset
from pydantic_ai.usage import RunUsage

from mcp_preconditions.client import FilterMode, Knowledge, filter_tools
from mcp_preconditions.integrations.openai_agents import RequirementsFilter
from mcp_preconditions.integrations.pydantic_ai import RequirementsToolset
from mcp_preconditions.wire import META_KEY, with_requirements

REQS = st.sampled_from([f"{ns}:{k}" for ns in ("auth", "env", "state", "x") for k in "abcd"])
GARBAGE = st.one_of(st.none(), st.integers(), st.text(max_size=3), st.lists(st.integers(), min_size=1),
                    st.lists(st.just(""), min_size=1))
FILTER_CONTEXT = ToolFilterContext(run_context=RunContextWrapper(context=None), agent=Agent(name="a"),
                                   server_name="s")


@st.composite
def wire_tools(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A `tools/list` as a server sends it: unique names; requirements on the wire and mirrored in
    `_meta` (what the guard and the gateway send), absent, or the same garbage in both places."""
    names = draw(st.lists(st.text("abcdefgh_", min_size=1, max_size=6), unique=True, max_size=12))
    tools: list[dict[str, Any]] = []
    for name in names:
        base = {"name": name, "inputSchema": {"type": "object"}}
        kind = draw(st.sampled_from(["list", "list", "none", "garbage"]))
        if kind == "list":
            tools.append(with_requirements(base, draw(st.lists(REQS, min_size=1, max_size=5))))
        elif kind == "garbage":
            junk = draw(GARBAGE)
            tools.append({**base, "execution": {"requirements": junk}, "_meta": {META_KEY: junk}})
        else:
            tools.append(base)
    return tools


@st.composite
def knowledge(draw: st.DrawFn) -> Knowledge:
    known = draw(st.dictionaries(REQS, st.booleans()))
    kn = Knowledge([r for r, ok in known.items() if ok], [r for r, ok in known.items() if not ok])
    learned = draw(st.lists(REQS, max_size=4))
    if learned:
        kn.learn_denial({"error": "unmet_requirements", "tool": "t", "unmet": learned, "withheld": 0})
    return kn


def expected(tools: list[dict[str, Any]], kn: Knowledge, mode: FilterMode) -> list[str]:
    return [t["name"] for t in filter_tools(tools, kn, mode).kept]


def pydantic_ai_kept(tools: list[dict[str, Any]], kn: Knowledge, mode: FilterMode) -> list[str]:
    """What `RequirementsToolset` offers, over tool definitions built as `MCPToolset` builds them
    (from the SDK's typed `Tool`, `_meta` under metadata["meta"])."""
    typed = [Tool.model_validate(t) for t in tools]
    defs = [ToolDefinition(name=t.name, parameters_json_schema=t.input_schema, metadata={"meta": t.meta})
            for t in typed]
    toolset = RequirementsToolset(ExternalToolset(defs), knowledge=kn, mode=mode)
    ctx = RunContext(deps=None, model=TestModel(), usage=RunUsage())
    return list(anyio.run(toolset.get_tools, ctx))


def openai_agents_kept(tools: list[dict[str, Any]], kn: Knowledge) -> list[str]:
    """What the Agents SDK keeps with `RequirementsFilter` as `tool_filter`: every typed tool for
    which it answers True, in the server's order."""
    rf = RequirementsFilter(kn)
    return [t.name for t in (Tool.model_validate(d) for d in tools) if rf(FILTER_CONTEXT, t)]


@settings(max_examples=60, deadline=None)
@given(wire_tools(), knowledge(), st.sampled_from(list(FilterMode)))
def test_pydantic_ai_keeps_what_filter_tools_keeps(tools: list[dict[str, Any]], kn: Knowledge,
                                                   mode: FilterMode) -> None:
    assert pydantic_ai_kept(tools, kn, mode) == expected(tools, kn, mode)


@settings(max_examples=150, deadline=None)
@given(wire_tools(), knowledge())
def test_openai_agents_keeps_what_filter_tools_keeps(tools: list[dict[str, Any]], kn: Knowledge) -> None:
    assert openai_agents_kept(tools, kn) == expected(tools, kn, FilterMode.HIDE)
