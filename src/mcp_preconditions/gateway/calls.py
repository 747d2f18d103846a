"""`tools/call` through the gateway: decided by the guard before anything goes upstream; an allowed
call's result is the upstream's own, a refused one is the SPEC §3 denial (or `unlisted_tool`), and
an upstream that fails mid-call gives a tool error, never an allow.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent

from ..guard import Guard
from ..integrations._calls import DENIAL_CODE, denial_error, denial_result
from ..outcomes import Decision, Outcome, new_decision
from ..policy.model import Policy
from ..principal import Credentials
from . import bridge
from .tools import UpstreamTools
from .upstream import Upstream

Request = Callable[[ServerRequestContext[Any, Any], str, Mapping[str, Any] | None],
                   Awaitable[dict[str, Any]]]
# Errors that mean "the upstream failed", not "the upstream refused": a tool error, not JSON-RPC.
_UPSTREAM_FAULTS = frozenset({types.CONNECTION_CLOSED, types.REQUEST_TIMEOUT, types.INTERNAL_ERROR})
MALFORMED = "(malformed requirements)"
# Where a refusal's SPEC §3 payload goes for a tool with an outputSchema (see ToolCalls._shaped).
DENIAL_META_KEY = "io.github.mcp-preconditions/denial"


class ToolCalls:
    """Decides and forwards tool calls for one gateway."""

    def __init__(self, guard: Guard, upstream: Upstream, tools: UpstreamTools,
                 policy: Callable[[], Policy]) -> None:
        self._guard = guard
        self._upstream = upstream
        self._tools = tools
        self._policy = policy

    def listed(self, name: str) -> bool:
        """Whether `[gateway] unlisted_tools` lets this tool be called at all."""
        return self._policy().gateway.unlisted_tools == "allow" or bool(
            self._guard.requirements_for(name))

    async def call(self, ctx: ServerRequestContext[Any, Any], name: str, arguments: Any,
                   credentials: Credentials, request: Request) -> dict[str, Any]:
        version = ctx.protocol_version
        # Looked up first: the first lookup may be what loads the tools and finds the problem.
        found = await self._tools.find(name, self._policy().gateway.call_timeout_seconds)
        if self._tools.problem is not None:
            return bridge.downstream_result("tools/call", _fault(f"the gateway's policy is unusable: "
                                                   f"{self._tools.problem}"), version)
        if not found:
            return self._unlisted(name, version, "the upstream has no tool of that name")
        if name in self._tools.broken:
            return self._refuse(self._broken(name), version)
        decision = await self._guard.check(name, credentials,
                                           arguments if isinstance(arguments, Mapping) else None)
        if not decision.allowed:
            return self._refuse(decision, version)
        if not self.listed(name):
            return self._unlisted(name, version, "the policy lists no requirements for it")
        try:
            result = await request(ctx, "tools/call", ctx.params)
        except MCPError as exc:
            if exc.error.code not in _UPSTREAM_FAULTS:
                raise  # the upstream's own answer (unknown tool, bad arguments): passed on as is
            return bridge.downstream_result("tools/call", _fault(f"upstream {self._upstream.label}: "
                                                   f"{exc.error.message}"), version)
        return bridge.downstream_result("tools/call", result, version)

    def _refuse(self, decision: Decision, version: str) -> dict[str, Any]:
        if self._policy().guard.denial == "jsonrpc":
            raise denial_error(decision)
        return self._shaped(decision.tool, _dump(denial_result(decision)), version)

    def _shaped(self, name: str, refusal: dict[str, Any], version: str) -> dict[str, Any]:
        """A refusal as this tool's clients can read it. A tool that declares an `outputSchema`
        gets the payload under `_meta` instead of `structuredContent`: TypeScript clients (the
        Inspector, most desktop apps) validate structuredContent against the schema even on an
        error, and would show a schema error instead of the denial."""
        if self._tools.output_schema(name) is not None and "structuredContent" in refusal:
            payload = refusal.pop("structuredContent")
            refusal["_meta"] = {**(refusal.get("_meta") or {}), DENIAL_META_KEY: payload}
        return bridge.downstream_result("tools/call", refusal, version)

    def _broken(self, name: str) -> Decision:
        why = self._tools.broken[name]
        decision = new_decision(name, False, (Outcome.unsatisfied(MALFORMED, why),), None,
                                self._guard.revision, 0, frozenset())
        self._guard.recorder.record(decision)
        return decision

    def _unlisted(self, name: str, version: str, why: str) -> dict[str, Any]:
        decision = new_decision(name, False, (), None, self._guard.revision, 0, frozenset())
        self._guard.recorder.record(decision)
        payload = {"error": "unlisted_tool", "tool": name, "unmet": [], "withheld": 0}
        text = f"Tool '{name}' was not run: {why}."
        if self._policy().guard.denial == "jsonrpc":
            raise MCPError(DENIAL_CODE, text, payload)
        result = CallToolResult(content=[TextContent(type="text", text=text)],
                                structured_content=payload, is_error=True)
        return self._shaped(name, _dump(result), version)


def _fault(text: str) -> dict[str, Any]:
    return _dump(CallToolResult(content=[TextContent(type="text", text=text)], is_error=True))


def _dump(result: CallToolResult) -> dict[str, Any]:
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)
