"""The upstream's tools as the gateway knows them: their raw definitions, and each one's own
`execution.requirements` registered with the guard (which merges the policy's `[tools.NAME]`).

Reloaded when an upstream session starts and after every `notifications/tools/list_changed`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio

from ..errors import PolicyError, RequirementError
from ..guard import Guard
from ..policy.model import Policy
from ..wire import raw_requirements
from .upstream import Upstream, UpstreamUnavailable

log = logging.getLogger("mcp_preconditions.gateway")


class UpstreamTools:
    """Tool definitions by name. A tool whose own requirements are malformed or invalid is kept in
    `broken` (every call to it refused); a policy tool name that is a near miss of an upstream
    tool's sets `problem` (every call refused until the policy is fixed)."""

    def __init__(self, guard: Guard, upstream: Upstream, policy: Callable[[], Policy]) -> None:
        self._guard = guard
        self._upstream = upstream
        self._policy = policy
        self._tools: dict[str, dict[str, Any]] = {}
        self.broken: dict[str, str] = {}
        self.problem: str | None = None
        self.loaded = False
        self._lock = anyio.Lock()

    def has(self, name: str) -> bool:
        return name in self._tools

    async def current(self, wait: float) -> dict[str, dict[str, Any]]:
        """The tools now. Before any upstream session has delivered them, waits up to `wait`
        seconds for one; then UpstreamUnavailable (an empty list would read as "no tools")."""
        if not self.loaded:
            await self._upstream.wait_connected(wait)
            await self.reload_quietly()
        if not self.loaded:
            raise UpstreamUnavailable(self._upstream.last_error or "not connected")
        return self._tools

    async def reload_quietly(self) -> None:
        try:
            await self.reload()
        except Exception as exc:  # upstream down or slow: the old list stays
            log.warning("upstream %s: cannot list tools: %s", self._upstream.label, exc)

    async def reload(self) -> None:
        async with self._lock:
            timeout = self._policy().gateway.call_timeout_seconds
            self.apply(await self._upstream.list_tools(timeout))

    def apply(self, tools: list[dict[str, Any]]) -> None:
        """Register `tools` (raw definitions) with the guard, replacing the previous list."""
        new = {t["name"]: t for t in tools if isinstance(t.get("name"), str)}
        registered = set(self._guard.tool_names())
        broken: dict[str, str] = {}
        for name, tool in new.items():
            own, problem = _own_requirements(tool)
            if problem is not None:
                broken[name] = problem
                own = []
            if own or name in registered:
                try:
                    self._guard.add_tool(name, own)
                except RequirementError as exc:
                    broken[name] = str(exc)
        for name in registered - set(new):  # gone upstream: its old requirements go too
            self._guard.add_tool(name, [])
        for name, why in broken.items():
            log.error("upstream %s: tool %r refused: its requirements are unusable: %s",
                      self._upstream.label, name, why)
        try:
            self._guard.know_tools(new)
            self.problem = None
        except PolicyError as exc:
            self.problem = str(exc)
            log.error("%s; every tool call is refused until the policy is fixed", exc)
        self._tools, self.broken, self.loaded = new, broken, True


def _own_requirements(tool: dict[str, Any]) -> tuple[list[str], str | None]:
    """A tool definition's own requirements, or the reason they cannot be read (never "none")."""
    raw = raw_requirements(tool)
    if raw is None:
        return [], None
    if isinstance(raw, list) and all(isinstance(r, str) for r in raw):
        return list(raw), None
    return [], f"execution.requirements is {type(raw).__name__}, not a list of strings"
