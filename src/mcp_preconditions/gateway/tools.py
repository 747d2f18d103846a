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
from ..wire import wire_requirements
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

    def output_schema(self, name: str) -> Any:
        """The tool's declared `outputSchema`, or None."""
        return self._tools.get(name, {}).get("outputSchema")

    async def find(self, name: str, wait: float) -> bool:
        """Whether the upstream has tool `name`. A name not seen yet is looked up again (it may be
        new), waiting up to `wait` seconds for an upstream that is still starting."""
        if name in self._tools:
            return True
        if not self.loaded:
            await self._upstream.wait_connected(wait)
        await self.reload_quietly()
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
            try:  # the tool's own list: execution.requirements ∪ the _meta mirror
                own = list(wire_requirements(tool))
            except RequirementError as exc:  # garbage is never read as "no requirements"
                broken[name] = str(exc)
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

