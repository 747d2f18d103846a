"""Where a request goes (SPEC §12): every server's tools and prompts under their visible names
(PREFIX + name), resources by URI, completions by reference. Built from the servers' last good
listings; anything two servers claim is refused, never guessed.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:  # the MCP SDK's matcher is imported before a template is first matched
    # (`matcher_loaded`; its package costs 30 MB of memory, which a gateway without templates
    # never needs)
    from mcp.shared.uri_template import UriTemplate

MATCHER = "mcp.shared.uri_template"
_LOADED: set[str] = set()  # MATCHER, once it is imported (`matcher_loaded`)


async def matcher_loaded() -> None:
    """The MCP SDK's URI template matcher imported (before `Routes.resource` first matches a
    template), in a worker thread: its package takes seconds to import on a loaded machine
    (1.3-3.4 s on two loaded cores), which on the event loop held every request of every caller."""
    if MATCHER not in _LOADED:
        await anyio.to_thread.run_sync(importlib.import_module, MATCHER)
        _LOADED.add(MATCHER)


@dataclass(frozen=True, slots=True)
class Target:
    """A visible name's server and the name that server knows it by."""

    server: str
    name: str


@dataclass(frozen=True)
class ServerListing:
    """What one server listed last (original names; `None`: never listed) and its prefix."""

    key: str
    prefix: str
    tools: Iterable[str] | None = None
    duplicates: frozenset[str] = frozenset()  # tool names the server listed more than once
    prompts: Iterable[str] | None = None
    resources: Iterable[str] | None = None
    templates: Iterable[str] | None = None
    # What it declared: "resources" (it serves them), "subscribe" (it takes subscriptions).
    serves: frozenset[str] = frozenset()


@dataclass
class Routes:
    """The routing tables of one moment. Rebuilt whole when any listing changes (cheap: a dict
    per kind), so a request reads one consistent set."""

    tools: dict[str, Target] = field(default_factory=dict)
    prompts: dict[str, Target] = field(default_factory=dict)
    resources: dict[str, str] = field(default_factory=dict)  # URI -> server
    templates: dict[str, str] = field(default_factory=dict)  # URI template -> server
    # Refused: visible names two servers share (tools, prompts), names a server lists twice,
    # URIs and templates two servers list. Each maps to the servers involved.
    collisions: dict[str, tuple[str, ...]] = field(default_factory=dict)  # tools
    prompt_collisions: dict[str, tuple[str, ...]] = field(default_factory=dict)
    duplicates: dict[str, str] = field(default_factory=dict)  # visible tool name -> its server
    ambiguous: dict[str, tuple[str, ...]] = field(default_factory=dict)
    servers: tuple[str, ...] = ()
    resource_servers: tuple[str, ...] = ()  # the servers that serve resources at all
    subscribe_servers: tuple[str, ...] = ()  # ... and those that take subscriptions
    _parsed: dict[str, UriTemplate | None] = field(default_factory=dict)

    def tool_of(self, server: str) -> dict[str, str]:
        """A server's tools: visible name -> original name (routable ones only)."""
        return {v: t.name for v, t in self.tools.items() if t.server == server}

    def resource(self, uri: str, *, subscription: bool = False) -> str | tuple[str, ...] | None:
        """The server that serves `uri`: the one that listed it, else the one whose template
        matches it, else the only server that serves resources at all (for a subscription: that
        takes subscriptions), where there is nothing to choose. A tuple of servers: ambiguous;
        None: no server claims it."""
        if uri in self.ambiguous:
            return self.ambiguous[uri]
        owner = self.resources.get(uri)
        if owner is not None:
            return owner
        matching = sorted({server for template, server in self.templates.items()
                           if self._matches(template, uri)})
        if len(matching) == 1:
            return matching[0]
        if matching:
            return tuple(matching)
        return self._only(self.subscribe_servers if subscription else self.resource_servers)

    def template(self, uri_template: str) -> str | tuple[str, ...] | None:
        """The server that listed a resource template (a completion's `ref/resource`)."""
        if uri_template in self.ambiguous:
            return self.ambiguous[uri_template]
        owner = self.templates.get(uri_template)
        return owner if owner is not None else self._only(self.resource_servers)

    def _only(self, able: tuple[str, ...]) -> str | None:
        """A URI nobody listed goes to the one server there is, or to the one server able to take
        it; with two that might, it is never guessed."""
        candidates = self.servers if len(self.servers) == 1 else able
        return candidates[0] if len(candidates) == 1 else None

    def _matches(self, template: str, uri: str) -> bool:
        if template not in self._parsed:
            from mcp.shared.uri_template import InvalidUriTemplate, UriTemplate

            try:
                self._parsed[template] = UriTemplate.parse(template)
            except (InvalidUriTemplate, ValueError):
                self._parsed[template] = None
        parsed = self._parsed[template]
        try:
            return parsed is not None and parsed.match(uri) is not None
        except ValueError:  # a URI longer than the matcher's bound: no match
            return False


def build_routes(listings: Iterable[ServerListing]) -> Routes:
    """The tables for these servers' listings."""
    listings = list(listings)
    routes = Routes(servers=tuple(s.key for s in listings),
                    resource_servers=tuple(s.key for s in listings if "resources" in s.serves),
                    subscribe_servers=tuple(s.key for s in listings if "subscribe" in s.serves))
    tools: dict[str, list[Target]] = {}
    prompts: dict[str, list[Target]] = {}
    for listing in listings:
        for name in listing.tools or ():
            tools.setdefault(listing.prefix + name, []).append(Target(listing.key, name))
            if name in listing.duplicates:
                routes.duplicates[listing.prefix + name] = listing.key
        for name in listing.prompts or ():
            prompts.setdefault(listing.prefix + name, []).append(Target(listing.key, name))
    _split(tools, routes.tools, routes.collisions)
    _split(prompts, routes.prompts, routes.prompt_collisions)
    for kind, table in (("resources", routes.resources), ("templates", routes.templates)):
        owners: dict[str, set[str]] = {}
        for listing in listings:
            for uri in getattr(listing, kind) or ():
                owners.setdefault(uri, set()).add(listing.key)
        for uri, servers in owners.items():
            if len(servers) == 1:
                table[uri] = next(iter(servers))
            else:
                routes.ambiguous[uri] = tuple(sorted(servers))
    return routes


def _split(found: Mapping[str, list[Target]], routable: dict[str, Target],
           collisions: dict[str, tuple[str, ...]]) -> None:
    for visible, targets in found.items():
        servers = {t.server for t in targets}
        if len(servers) == 1:
            routable[visible] = targets[0]
        else:
            collisions[visible] = tuple(sorted(servers))


def visible(item: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """A tool or prompt definition under its visible name (the definition otherwise untouched)."""
    if not prefix:
        return dict(item)
    return {**item, "name": prefix + str(item.get("name"))}
