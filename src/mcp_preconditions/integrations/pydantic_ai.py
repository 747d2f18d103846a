"""pydantic-ai adapter (extra `pydantic-ai`): SEP-2487's strict client filter as a toolset wrapper,
and a fastmcp client that teaches the same `Knowledge` the unmet requirements of each denied call,
hands the application its SEP-2643 envelope and echoes its context ID on a retry. Thin: the
verdicts are `filter_tools`'s, a denial is `client_denials.Denials`'s.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any

from fastmcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.tools import AgentDepsT, RunContext, ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from ..client import FilterMode, Knowledge, ToolVerdict, filter_tools
from ..client_denials import Denials, OnDenial
from ..envelope import ContextIds
from ..errors import InputError
from ._calls import DENIAL_CODE
from .client_mcp import denial_of

__all__ = ["LearningClient", "RequirementsToolset", "mcp_toolset", "wire_form"]

log = logging.getLogger(__name__)


def wire_form(tool_def: ToolDefinition) -> dict[str, Any]:
    """The part of a tool definition the strict verdict reads: its name and its `_meta` (where
    `MCPToolset` keeps the server's `_meta`, with the requirements mirror; the typed MCP models drop
    `execution.requirements` itself)."""
    metadata = tool_def.metadata
    return {"name": tool_def.name, "_meta": metadata.get("meta") if metadata else None}


def annotated(description: str | None, verdict: ToolVerdict) -> str:
    """A will-fail tool's description with the verdict appended, for `annotate` mode."""
    note = ("[Will fail: the client knows these requirements are not met: "
            + ", ".join(verdict.unsatisfiable) + "]")
    return f"{description}\n\n{note}" if description else note


def _filter_mode(mode: FilterMode | str) -> FilterMode:
    try:
        return FilterMode(mode)
    except ValueError:
        raise InputError(f"unknown filter mode {mode!r} (expected 'hide', 'demote' or 'annotate')"
                         ) from None


@dataclass
class RequirementsToolset(WrapperToolset[AgentDepsT]):
    """The wrapped toolset's tools through SEP-2487's strict filter, at every step of a run.

    `hide` drops the tools whose verdict is will-fail; `demote` offers them last; `annotate` offers
    every tool and appends the verdict to a will-fail tool's description. A tool with unknown,
    absent or malformed requirements is always offered. Requirements are read from each tool's
    `_meta` mirror; learning happens in the `LearningClient` that shares this `knowledge`."""

    knowledge: Knowledge = field(default_factory=Knowledge)
    mode: FilterMode | str = FilterMode.HIDE

    def __post_init__(self) -> None:
        self.mode = _filter_mode(self.mode)

    async def get_tools(self, ctx: RunContext[AgentDepsT]) -> dict[str, ToolsetTool[AgentDepsT]]:
        tools = await super().get_tools(ctx)
        keys = list(tools)
        result = filter_tools([wire_form(tools[k].tool_def) for k in keys], self.knowledge, self.mode)
        for warning in result.warnings:  # malformed requirements, failing client resolvers
            log.warning("%s", warning)
        kept: dict[str, ToolsetTool[AgentDepsT]] = {}
        for i in result.kept_index:
            tool, verdict = tools[keys[i]], result.verdicts[i]
            if verdict.will_fail and result.mode is FilterMode.ANNOTATE:
                described = replace(tool.tool_def, description=annotated(tool.tool_def.description, verdict))
                tool = replace(tool, tool_def=described)
            kept[keys[i]] = tool
        return kept


class LearningClient(Client[Any]):
    """A fastmcp `Client` whose denied calls teach `knowledge` their unmet requirements, exactly as
    `RequirementsClient.call_tool` does (never the ones that ended as `error` or that depended on
    the arguments), reach `on_denial` with their SEP-2643 envelope, and whose retry of a denied
    call echoes the envelope's context ID. `MCPToolset` calls tools through `call_tool_mcp`, so
    every call of a run is seen with its raw result (pydantic-ai itself keeps only the text of an
    error)."""

    def __init__(self, *args: Any, knowledge: Knowledge, on_denial: OnDenial | None = None,
                 context_ids: ContextIds | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.knowledge = knowledge
        self.denials = Denials(knowledge, on_denial, context_ids)

    async def call_tool_mcp(self, name: str, arguments: dict[str, Any], progress_handler: Any = None,
                            timeout: Any = None, meta: dict[str, Any] | None = None) -> CallToolResult:
        sent = self.denials.request_meta(name, arguments, meta)
        try:
            result = await super().call_tool_mcp(name, arguments, progress_handler, timeout, sent)
        except MCPError as exc:
            if exc.code == DENIAL_CODE:  # `data["_meta"]` names the ones not to learn
                self.denials.error(name, arguments, exc.data)
            raise
        self.denials.result(name, arguments, denial_of(result), result.meta)
        return result


def mcp_toolset(transport: Any, knowledge: Knowledge, mode: FilterMode | str = FilterMode.HIDE, *,
                on_denial: OnDenial | None = None, **options: Any) -> RequirementsToolset[Any]:
    """An `MCPToolset` over `transport` (anything fastmcp's `Client` accepts: a URL, a
    `StdioTransport`, ...) that learns from denials (each one, with its SEP-2643 envelope, also
    reaches `on_denial`), wrapped in the strict filter; `options` go to `MCPToolset` (`id`,
    `tool_error_behavior`, `max_retries`, ...)."""
    client = LearningClient(transport, knowledge=knowledge, on_denial=on_denial)
    inner: AbstractToolset[Any] = MCPToolset(client, **options)
    return RequirementsToolset(inner, knowledge=knowledge, mode=mode)
