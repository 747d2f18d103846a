"""One server's listings as the gateway knows them (tools, prompts, resources, resource templates):
the last good answer of each, refreshed one at a time. The tools listing is read by the rules every
server shares (`toolset.read_listing`): a name listed twice, or requirements that cannot be read,
are kept here so that calls to them are refused (SPEC §10).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio

from ..toolset import Listed, read_listing
from .inbound import find_invalid_x_mcp_header

log = logging.getLogger("mcp_preconditions.gateway")

# A call to a name no server lists re-lists the tools, at most this often per server: a caller
# sending random names gets no more re-lists than this, whatever it sends (SPEC §10).
UNKNOWN_NAME_RELIST_SECONDS = 1.0

Fetch = Callable[[], Awaitable[list[dict[str, Any]]]]


class Listing:
    """One kind of listing of one server: its last good items (None until one arrives), and a
    refresh that runs one at a time. A refresh asked for while one runs makes that one run again
    when it ends (the change may have come after its request went out); everyone waiting is
    released once, after the last run. `applied` runs with every new answer before anyone is
    released. `stale` from the moment the server says the list changed until a listing asked
    for after that has come back. Nothing routed meanwhile waits for it: tools, prompts and
    resources are routed by `items`, the last good listing (SPEC §14); only a listing that has
    none yet is waited for (`fresh`, bounded by its caller)."""

    def __init__(self, kind: str, fetch: Fetch, applied: Callable[[list[dict[str, Any]]], None]
                 ) -> None:
        self.kind = kind
        self.items: list[dict[str, Any]] | None = None
        self.error: str | None = None
        self._fetch = fetch
        self._applied = applied
        self._running: anyio.Event | None = None
        self._again = False
        self._last_unknown = -math.inf
        self.stale = False
        self._marks = 0  # how many times the server said the list changed

    def outdated(self) -> None:
        """The server said this list changed (before anything it sends after that is read)."""
        self.stale = True
        self._marks += 1
        if self._running is not None:
            self._again = True

    async def fresh(self) -> None:
        """Return once no change the server announced is still unlisted."""
        while self.stale:
            running = self._running
            if running is not None:
                await running.wait()
            else:
                await self.refresh()

    @property
    def loaded(self) -> bool:
        return self.items is not None

    async def refresh(self) -> bool:
        """List again (or wait for the listing under way); whether the last attempt worked."""
        if self._running is not None:
            self._again = True
            await self._running.wait()
            return self.error is None
        running = self._running = anyio.Event()
        try:
            while True:
                self._again = False
                marks = self._marks
                try:
                    items = await self._fetch()
                except Exception as exc:  # down, slow, garbage: the last good listing stays
                    self.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                else:
                    self.error = None
                    self.items = items
                    self._applied(items)
                if self._marks == marks:
                    self.stale = False  # the last change announced is in (or the server failed)
                if not self._again:
                    break
        finally:
            self._running = None
            running.set()
        return self.error is None

    async def refresh_for_unknown(self) -> None:
        """A name nobody lists was asked for: list again, unless a listing is already under way
        (then wait for it: it may bring the name) or the last one for this reason was under a
        second ago."""
        running = self._running
        if running is not None:
            await running.wait()
            return
        now = anyio.current_time()
        if now - self._last_unknown < UNKNOWN_NAME_RELIST_SECONDS:
            return
        self._last_unknown = now
        await self.refresh()


class Catalog:
    """A server's tools (by original name), prompts, resources and templates."""

    def __init__(self, key: str, fetch: Callable[[str, str], Awaitable[list[dict[str, Any]]]],
                 tools_changed: Callable[[], None], other_changed: Callable[[], None]) -> None:
        self.key = key
        self.listed = read_listing(())  # its last tools listing, read
        self._unusable: set[str] = set()  # tools left out for their x-mcp-header (warned once)
        self._tools_changed = tools_changed
        self.listings = {
            "tools": Listing("tools", lambda: self._usable(fetch("tools/list", "tools")),
                             self.apply_tools),
            "prompts": Listing("prompts", lambda: fetch("prompts/list", "prompts"),
                               lambda _items: other_changed()),
            "resources": Listing("resources", lambda: fetch("resources/list", "resources"),
                                 lambda _items: other_changed()),
            "templates": Listing("templates", lambda: fetch("resources/templates/list",
                                                            "resourceTemplates"),
                                 lambda _items: other_changed()),
        }

    def names(self, kind: str, field: str = "name") -> list[str] | None:
        items = self.listings[kind].items
        if items is None:
            return None
        return [i[field] for i in items if isinstance(i.get(field), str)]

    @property
    def tools(self) -> Mapping[str, Mapping[str, Any]]:
        """Each tool's definition (its first copy), by the server's name for it."""
        return self.listed.tools

    @property
    def duplicates(self) -> frozenset[str]:
        """The names the server lists more than once: refused."""
        return self.listed.duplicates

    def apply_tools(self, items: list[dict[str, Any]]) -> None:
        """A new tools listing: definitions, duplicates, and the requirements each carries."""
        listed: Listed = read_listing(items)
        for name in sorted(listed.duplicates - self.listed.duplicates):
            log.error("server %s lists the tool %r more than once: every call to it is refused "
                      "until it lists it once", self.key, name)
        self.listed = listed
        self._tools_changed()

    async def _usable(self, fetched: Awaitable[list[dict[str, Any]]]) -> list[dict[str, Any]]:
        """The server's tools but those whose `x-mcp-header` annotations are invalid, left out as
        SEP-2243 asks of a client (neither listed to callers nor routed), with a WARNING naming
        why, once per tool."""
        items = await fetched
        kept = []
        for item in items:
            problem = find_invalid_x_mcp_header(item.get("inputSchema")) if isinstance(item, dict) \
                else None
            if problem is None:
                kept.append(item)
            elif item.get("name") not in self._unusable:
                self._unusable.add(str(item.get("name")))
                log.warning("server %s lists the tool %r with an invalid x-mcp-header (%s): it is "
                            "left out (SEP-2243)", self.key, item.get("name"), problem)
        return kept
