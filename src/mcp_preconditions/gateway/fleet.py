"""The servers behind one gateway (SPEC §12): each started, supervised and listed on its own, its
tools registered with the guard under their visible names, and the routing tables rebuilt from the
last good listings whenever one changes. Every tool of a server with `credentials` carries
`credential:KEY` (SPEC §14), registered as one of its own requirements: advertised like any other,
part of the effective list, decided after every other one.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from ..credentials.resolver import requirement_for
from ..guard import Guard
from ..names import near_miss_message, near_misses, unusable_line
from ..policy.model import Policy
from ..requirements import merge
from ..telemetry.gateway import GatewayTelemetry
from ..toolset import enforce, unusable
from .catalog import Catalog
from .config import ServerSpec
from .route import Routes, ServerListing, build_routes
from .subscriptions import Subscriptions
from .upstream.client import Bounds
from .upstream.session import HttpTarget, StdioTarget, Target, Upstream

log = logging.getLogger("mcp_preconditions.gateway")

# What a caller is told when the policy cannot be applied to a server's tools (the details, which
# name the policy's entries and its file, go to the gateway's log only).
UNUSABLE = unusable("gateway")
_KINDS = {"notifications/tools/list_changed": ("tools",),
          "notifications/prompts/list_changed": ("prompts",),
          "notifications/resources/list_changed": ("resources", "templates")}
# After the first listing, a server that is still starting delays the others' listing this long at
# most; its tools come later, with a list_changed notification.
LATE_SERVER_GRACE = 2.0
HANDSHAKE_SECONDS = 30.0


@dataclass
class Member:
    """One server: how it is reached, what it listed, and what the gateway thinks of it."""

    spec: ServerSpec
    upstream: Upstream
    catalog: Catalog
    subscriptions: Subscriptions
    problem: str | None = None  # set: the policy is unusable for this server (why, for the log)
    # `credential:KEY` when the server has per-caller credentials (each tools/call goes with the
    # one its decision obtained), else None: made once, read by every call (forward.py).
    credential: str | None = field(init=False, default=None)
    key: str = field(init=False, repr=False, compare=False)  # its spec's (a field: read per call)

    def __post_init__(self) -> None:
        self.key = self.spec.key
        if self.spec.credentials is not None:
            self.credential = requirement_for(self.spec.key)

    @property
    def connected(self) -> bool:
        return self.upstream.current is not None


def target_of(spec: ServerSpec, environment: dict[str, str]) -> Target:
    """How to reach a server: a stdio command (the gateway's environment, less its secrets, plus
    the server's own `env`) or a URL with its headers."""
    if spec.command is not None:
        return StdioTarget(spec.command, spec.args, {**environment, **spec.env})
    assert spec.url is not None
    return HttpTarget(spec.url, dict(spec.headers))


class Fleet:
    """Every member, the routes through them, and the guard's view of their tools."""

    def __init__(self, guard: Guard, specs: Sequence[ServerSpec], environment: dict[str, str],
                 policy: Callable[[], Policy], notify: Callable[[str], Awaitable[None]],
                 telemetry: GatewayTelemetry) -> None:
        self._guard = guard
        self._policy = policy
        self._notify = notify  # sends a list_changed notification of a kind to every client
        self._telemetry = telemetry
        self.members: dict[str, Member] = {}
        for spec in specs:
            upstream = Upstream(target_of(spec, environment), key=spec.key,
                                connect_timeout=self._handshake_timeout, telemetry=telemetry,
                                bounds=self._bounds)
            telemetry.connected(spec.key, False)  # down until its first session
            catalog = Catalog(spec.key, self._fetcher(upstream, spec.credentials is not None),
                              self._tools_changed, self._others_changed)
            self.members[spec.key] = Member(spec, upstream, catalog, Subscriptions(upstream))
        self.routes = Routes(servers=tuple(self.members))
        # Whether some server takes per-caller credentials (SPEC §14).
        self.credentialed = any(m.credential is not None for m in self.members.values())
        self.invalid: dict[str, str] = {}  # visible tool name -> why its requirements are refused
        self._registered: frozenset[str] = frozenset()
        self.listed = False  # every server's tools listed once (`update_listed`): once true, stays
        self._pending: set[str] = set()  # kinds whose list_changed the clients are owed
        self._warned: set[str] = set()  # policy tool names already logged as matching nothing
        # Per wait: the connection attempt of each server that was given its grace already (a
        # server that never answers is waited for once per attempt, not by every request).
        self._graced: dict[str, dict[str, int]] = {"listing": {}, "connection": {}}
        self._declare()

    def _handshake_timeout(self) -> float:
        """How long a server may take to start and answer `initialize`: the call timeout, but
        never less than HANDSHAKE_SECONDS (an interpreter's imports on a loaded host, a first npx
        run). One that takes longer is dropped and started again with backoff."""
        return max(self._policy().gateway.call_timeout_seconds, HANDSHAKE_SECONDS)

    def _bounds(self) -> Bounds:
        """What an HTTP server's responses may hold (`[gateway]`; read at each connection)."""
        gateway = self._policy().gateway
        return Bounds(body=gateway.max_response_bytes, event=gateway.max_event_bytes,
                      line=gateway.max_event_bytes)

    def __iter__(self) -> Iterator[Member]:
        return iter(self.members.values())

    def _fetcher(self, upstream: Upstream, personal: bool
                 ) -> Callable[[str, str], Awaitable[list[dict[str, Any]]]]:
        """A listing on the gateway's own session. A server with credentials lists only its tools
        there (the catalog); the rest is listed to each caller as themselves (`Listings`)."""
        async def fetch(method: str, field: str) -> list[dict[str, Any]]:
            if personal and method != "tools/list":
                raise RuntimeError(f"{method} of a server with credentials goes as each caller")
            return await upstream.list_all(method, field, self._policy().gateway.call_timeout_seconds)
        return fetch

    # -- the servers' life -----------------------------------------------------------------------
    async def connected(self, member: Member) -> None:
        """A new session to `member`: list its tools (the guard needs their own requirements) and
        hold its clients' subscriptions again. Clients hear of the new tools. Its prompts and
        resources may have changed too: they are listed again when something is routed by them
        (in the background: their last good listings route meanwhile) or a client lists them."""
        for kind in ("prompts", "resources", "templates"):
            member.catalog.listings[kind].outdated()
        caps = member.upstream.current.capabilities if member.upstream.current else {}
        listing = member.catalog.listings["tools"]
        if "tools" in caps:
            await listing.refresh()
        else:  # a server without tools has none (not "unknown")
            listing.items = []
            listing.error = None
            member.catalog.apply_tools([])
        await member.subscriptions.renew()
        await self.flush()

    def outdated(self, member: Member, method: str) -> None:
        """A `notifications/*/list_changed` from `member`, seen before anything the server sends
        after it: its listing is stale until listed again (`changed`). Nothing waits for that:
        while a server re-lists, its calls (tools, prompts, resources, completions) use its last
        good catalog, and the other servers' calls are not its business (SPEC §14)."""
        for kind in _KINDS[method]:
            member.catalog.listings[kind].outdated()

    def relist(self, member: Member, kind: str) -> None:
        """A listing `member` said changed (or that a new session may have changed), listed again
        in the background unless that is under way; meanwhile its last good one stands."""
        member.upstream.spawn_once(f"relist {kind}", member.catalog.listings[kind].fresh)

    async def changed(self, member: Member, method: str) -> None:
        """A `notifications/*/list_changed` from `member`: that server alone is listed again."""
        kinds = _KINDS[method]
        for kind in kinds:
            await member.catalog.listings[kind].refresh()
        self._pending.add(kinds[0])
        await self.flush()

    async def flush(self) -> None:
        """Send the list_changed notifications the clients are owed, once per kind."""
        pending, self._pending = self._pending, set()
        for kind in sorted(pending):
            await self._notify(kind)

    async def unknown_tool(self, name: str) -> None:
        """A call to a name no server lists: each server's tools are listed again (at most once a
        second each, one listing at a time), in parallel."""
        async with anyio.create_task_group() as tg:
            for member in self:
                if member.connected:
                    tg.start_soon(member.catalog.listings["tools"].refresh_for_unknown)

    def update_listed(self) -> bool:
        """Whether every server's tools were listed at least once (`listed`). A listing is never
        unloaded (a re-listing is read by its last good catalog), so once true it stays: a call
        reads the flag, and looks at every catalog only while it is false."""
        if not self.listed:
            self.listed = all(m.catalog.listings["tools"].loaded for m in self)
        return self.listed

    async def first_listing(self, wait: float) -> None:
        """Wait (at most `wait` seconds) until some server's tools are listed; then at most a short
        grace for servers still starting, whose tools come later with a list_changed."""
        await self._settle(wait, lambda m: m.catalog.listings["tools"].loaded, self._graced["listing"])

    async def first_connection(self, wait: float) -> None:
        """The same for connections (the handshake shows the connected servers' capabilities)."""
        await self._settle(wait, lambda m: m.connected, self._graced["connection"])

    async def _settle(self, wait: float, ready: Callable[[Member], bool], graced: dict[str, int]
                      ) -> None:
        # A server that refused the gateway's own session for want of a credential is not waited
        # for: only a person connecting an account brings it up (a 401 would stall every handshake).
        with anyio.move_on_after(wait):
            while not any(ready(m) for m in self) \
                    and not all(m.upstream.refused_credential for m in self):
                await anyio.sleep(0.02)
        # Servers that are starting (not failing) get a short grace, once per attempt to connect:
        # one that failed its last attempt, or that had its grace and is still not there (it
        # hangs), is not waited for again.
        starting = [m for m in self if not ready(m) and m.upstream.last_error is None
                    and graced.get(m.key) != m.upstream.attempts]
        with anyio.move_on_after(min(wait, LATE_SERVER_GRACE)):
            while any(not ready(m) and m.upstream.last_error is None for m in starting):
                await anyio.sleep(0.02)
        graced.update((m.key, m.upstream.attempts) for m in starting)

    # -- keeping routes and the guard in step with the listings -----------------------------------
    def listing(self, member: Member, theirs: Mapping[str, list[dict[str, Any]]] | None = None
                ) -> ServerListing:
        """What `member` listed last, for the routes. A server with credentials lists its prompts,
        resources and templates to each caller as themselves, never on the gateway's own session
        (SPEC §14): those come from `theirs` (one caller's listings, by kind), else are unknown."""
        catalog = member.catalog
        resources = member.upstream.current.capabilities.get("resources") \
            if member.upstream.current is not None else None
        serves = frozenset() if not isinstance(resources, dict) else \
            frozenset({"resources", *(["subscribe"] if resources.get("subscribe") else [])})
        if member.credential is None:
            prompts, uris, templates = (catalog.names("prompts"), catalog.names("resources", "uri"),
                                        catalog.names("templates", "uriTemplate"))
        else:
            theirs = theirs or {}
            prompts, uris, templates = (_names(theirs.get("prompts"), "name"),
                                        _names(theirs.get("resources"), "uri"),
                                        _names(theirs.get("templates"), "uriTemplate"))
        return ServerListing(member.key, member.spec.prefix, catalog.names("tools"),
                             catalog.duplicates, prompts, uris, templates, serves)

    def _others_changed(self) -> None:
        self.routes = build_routes(self.listing(m) for m in self)
        self._pending.update(("prompts", "resources"))

    def _tools_changed(self) -> None:
        """A server's tools changed: routes rebuilt, every routable tool's own requirements
        registered with the guard (one swap), and the policy's names checked against them."""
        self.routes = build_routes(self.listing(m) for m in self)
        self._register()
        self.check_names()
        self._pending.add("tools")

    def _register(self) -> None:
        """Each routable tool's own requirements held by the guard (`toolset.enforce`, one swap);
        a tool whose requirements cannot be read or enforced is refused (`invalid`)."""
        wanted: dict[str, tuple[str, ...]] = {}
        for visible, target in self.routes.tools.items():
            member = self.members[target.server]
            listed = member.catalog.listed
            if target.name in listed.unreadable:
                continue  # refused for that already (`Decide.refusal`)
            own = merge(listed.own.get(target.name, ()), _carried(member.spec))
            if own:
                wanted[visible] = own
        invalid = enforce(self._guard, wanted, self._registered)
        own_requirements = self._guard.own_requirements
        self._registered = frozenset(n for n in self._registered | wanted.keys() if own_requirements(n))
        for visible in sorted(invalid.keys() - self.invalid.keys()):
            log.error("tool %r refused: its requirements are unusable: %s", visible, invalid[visible])
        self.invalid = invalid
        self._declare()

    def _declare(self) -> None:
        """The metrics' and spans' label values: each server's routable tools (a name it lists
        twice is refused, so it counts as unlisted) with their effective requirements, and the
        policy."""
        guard, routes = self._guard, self.routes
        tools: dict[str, dict[str, tuple[str, ...]]] = {key: {} for key in self.members}
        for visible, target in routes.tools.items():
            if visible not in routes.duplicates:
                tools[target.server][visible] = guard.requirements_for(visible)
        snapshot = guard.snapshot
        self._telemetry.listed(tools, snapshot.confidential, snapshot.revision)

    def declared(self, name: str) -> bool:
        """Whether a routable tool has requirements beyond the `credential:KEY` the gateway adds
        (its own or the policy's): under `[gateway] unlisted_tools = "deny"` only those are
        exposed, as without credentials (how a server is reached is not whether it may be)."""
        target = self.routes.tools.get(name)
        carried = _carried(self.members[target.server].spec) if target is not None else ()
        return any(r not in carried for r in self._guard.requirements_for(name))

    def check_names(self) -> None:
        """The policy's `[tools.NAME]` against each server's visible tool names: a near miss makes
        the policy unusable for that server (every call to it refused) until one of them changes.
        A server's own name of a tool it shows under a prefix is a near miss too: a one-server
        policy reused in a fleet would otherwise leave that tool unguarded."""
        policy = self._policy()
        # Names two servers list are refused, but they are listed: a policy entry for one is no
        # typo of a third server's name.
        everywhere = set(self.routes.tools) | set(self.routes.collisions)
        unmatched = [name for name in policy.tools if name not in everywhere]
        prefixes = {m.spec.prefix for m in self if m.spec.prefix}
        for member in self:
            mine = [n for n in unmatched if _addressed(n, member.spec.prefix, prefixes)]
            near = near_misses(mine, self.routes.tool_of(member.key))
            problem = None
            if near:
                problems = [near_miss_message(p, t) for p, t in near]
                problem = "; ".join(problems)
                if problem != member.problem:
                    log.error("%s", unusable_line(f"server {member.key}", problems))
            member.problem = problem
        if all(m.catalog.listings["tools"].loaded for m in self):
            for name in sorted(set(unmatched) - self._warned):
                log.warning("tools.%s: names no tool of any server", name)
            self._warned.update(unmatched)

    def policy_changed(self) -> None:
        """A new policy is in force: its names are checked again, and clients re-list (the
        requirements they are shown may have changed)."""
        self._register()
        self.check_names()
        self._pending.add("tools")


def _names(items: list[dict[str, Any]] | None, field: str) -> list[str] | None:
    return None if items is None else [i[field] for i in items if isinstance(i.get(field), str)]


def _carried(spec: ServerSpec) -> tuple[str, ...]:
    """What every tool of a server carries besides its own requirements: `credential:KEY` when
    each caller reaches it with a credential of their own."""
    return (requirement_for(spec.key),) if spec.credentials is not None else ()


def _addressed(name: str, prefix: str, prefixes: set[str]) -> bool:
    """Whether a policy name is judged against the server with `prefix`. A name that carries
    other servers' prefixes and not this one's is meant for them (whose tools may not be listed
    yet, or ever) and is no typo of this server's. The empty prefix is carried by every name, so a
    server without one is judged against every name, and a name that carries no server's prefix
    (`fs_write_file`, `write_file`) against every server."""
    return not prefix or name.startswith(prefix) or not any(name.startswith(p) for p in prefixes)
