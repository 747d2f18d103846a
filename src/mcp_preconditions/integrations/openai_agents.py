"""OpenAI Agents SDK adapter (extra `openai-agents`): SEP-2487's strict client filter as the
`tool_filter` of its MCP servers, and the hooks that teach the same `Knowledge` the unmet
requirements of each denied call, hand the application its SEP-2643 envelope and echo its context
ID on a retry. Thin: verdicts are `verdict_for`'s, a denial is `client_denials.Denials`'s.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping
from typing import Any

from agents import RunContextWrapper, default_tool_error_function
from agents.mcp import MCPToolCustomDataContext, MCPToolMetaContext, ToolFilterContext
from agents.tool import ToolErrorFunction
from mcp.shared.exceptions import MCPError
from mcp_types import Tool

from ..client import DENIAL_META_KEY, Knowledge, verdict_for
from ..client_denials import Denials, OnDenial
from ..envelope import ContextIds
from ..knowledge import KnowledgeView
from ..wire import raw_requirements
from ._calls import DENIAL_CODE

__all__ = ["RequirementsFilter", "wire_form"]

log = logging.getLogger(__name__)


def wire_form(tool: Tool) -> dict[str, Any]:
    """The part of a typed MCP tool the strict verdict reads: its name and its `_meta` (the
    requirements mirror; the SDK's typed model drops `execution.requirements` itself)."""
    return {"name": tool.name, "_meta": tool.meta}


def _key(raw: Any) -> tuple[str, ...] | None:
    """A requirement list as a dictionary key: () when absent, None (not shared) when malformed."""
    if raw is None:
        return ()
    if type(raw) is not list or not all(type(r) is str for r in raw):
        return None
    return tuple(raw)


class RequirementsFilter:
    """SEP-2487's strict filter for the MCP servers of the OpenAI Agents SDK.

    Pass `**requirements.server_options()` to `MCPServerStdio`, `MCPServerStreamableHttp` or
    `MCPServerSse`: the instance is the server's `tool_filter` (a tool whose verdict is will-fail
    is not offered to the model; unknown, absent or malformed requirements keep it), and its hooks
    learn from denials: `learn` (the `custom_data_extractor`) from `isError` results, and the
    `failure_error_function` from JSON-RPC denials; each denial, with its SEP-2643 envelope, also
    reaches `on_denial`, and `request_meta` (the `tool_meta_resolver`) echoes the envelope's context
    ID when the same call is made again. A `tool_filter` can only keep or drop a tool,
    so `hide` is the only mode here (no demote, no annotate: the SDK has no hook to reorder or
    rewrite the list)."""

    def __init__(self, knowledge: Knowledge | None = None, *,
                 on_failure: ToolErrorFunction = default_tool_error_function,
                 on_denial: OnDenial | None = None, context_ids: ContextIds | None = None) -> None:
        self.knowledge = knowledge if knowledge is not None else Knowledge()
        self.on_failure = on_failure
        self.denials = Denials(self.knowledge, on_denial, context_ids)
        # The SDK asks once per tool, with one context object per listing. Tools that share a
        # requirement list share its verdict within that listing (bench_agents: 1,000 tools with
        # 76 distinct lists cost about a third of what 1,000 distinct lists cost).
        self._listing: ToolFilterContext | None = None
        self._answers: dict[tuple[str, ...], bool] = {}
        self._view: KnowledgeView | None = None  # the knowledge as of this listing

    def __call__(self, context: ToolFilterContext, tool: Tool) -> bool:
        """The `tool_filter`: offer the tool unless the strict verdict is will-fail."""
        if context is not self._listing or self._view is None:
            self._listing, self._answers, self._view = context, {}, self.knowledge.view()
        wire = wire_form(tool)
        key = _key(raw_requirements(wire))
        answer = self._answers.get(key) if key is not None else None
        if answer is None:
            verdict = verdict_for(wire, self._view)
            for warning in verdict.warnings:  # malformed requirements, failing client resolvers
                log.warning("%s", warning)
            answer = not verdict.will_fail
            if key is not None:
                self._answers[key] = answer
        return answer

    def learn(self, context: MCPToolCustomDataContext) -> None:
        """The `custom_data_extractor`: learn a denied call's unmet requirements from its raw
        result (its structuredContent, or the `_meta` copy of a tool with an outputSchema), except
        those its `_meta` marks as `error` or argument-dependent, and hand on its envelope. Adds no
        data."""
        payload: Any = context.structured_content
        meta = context.result_meta
        if payload is None and isinstance(meta, Mapping):
            payload = meta.get(DENIAL_META_KEY)
        denied = context.is_error and isinstance(payload, Mapping) and \
            payload.get("error") == "unmet_requirements"
        self.denials.result(context.tool_name, context.arguments, payload if denied else None, meta)

    def request_meta(self, context: MCPToolMetaContext) -> dict[str, Any] | None:
        """The `tool_meta_resolver`: the context ID of this very call's last denial, echoed once."""
        return self.denials.request_meta(context.tool_name, context.arguments)

    async def failure_error_function(self, context: RunContextWrapper[Any], error: Exception) -> str:
        """Learn from a JSON-RPC denial (its `data` carries the payload, the `_meta` lists and the
        envelope), then answer the model as `on_failure` does."""
        if isinstance(error, MCPError) and error.code == DENIAL_CODE:
            data = error.data
            tool = data.get("tool") if isinstance(data, Mapping) else None
            self.denials.error(tool if isinstance(tool, str) else "", None, data)
        answer = self.on_failure(context, error)
        return await answer if inspect.isawaitable(answer) else answer

    def server_options(self) -> dict[str, Any]:
        """Keyword arguments for an Agents SDK MCP server: the filter, the learning hooks and the
        echo of context IDs."""
        return {"tool_filter": self, "custom_data_extractor": self.learn,
                "failure_error_function": self.failure_error_function,
                "tool_meta_resolver": self.request_meta}
