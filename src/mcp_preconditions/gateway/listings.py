"""Prompts, resources and completions across the servers (SPEC §12): listings merged from every
server (prompts under their visible names, URIs unchanged), and each routed request sent to the one
server that listed its name, URI or template. Whatever two servers claim is refused as ambiguous.

A server with credentials is listed to each caller as themselves, never through the gateway's own
session (SPEC §14): its prompts, resources and templates come from the caller's own listing, made
when they list or when a request of theirs is routed; a caller without a credential for it does
not see it, and a request that only it could take is refused with its `credential:KEY` refusal.
So is a listing that every server that might list refused them so (one slow or failing is left out).

Requests are routed by each server's last good listings: one that a server is listing again (after
its `list_changed`, or on a new session) holds nobody (SPEC §14); only a first listing is waited for.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio

from ..late import Sidecar
from ..outcomes import Outcome, Status
from ..toolset import every_page
from .callers import Downstream
from .clients import Call
from .credentialed import CallerCredentials
from .errors import CredentialRefused
from .fleet import Fleet, Member
from .forward import Forward
from .jsonrpc import INVALID_PARAMS, RpcError
from .route import Routes, build_routes, matcher_loaded, visible
from .subscriptions import Subscriptions
from .upstream.caller_sessions import Sender

log = logging.getLogger("mcp_preconditions.gateway")

# A listing asks every server again, and waits this long at most for a slow one, whose last good
# listing is used instead.
LIST_WAIT_SECONDS = 5.0
_KINDS = {"prompts/list": ("prompts", "prompts", "name"),
          "resources/list": ("resources", "resources", "uri"),
          "resources/templates/list": ("templates", "resourceTemplates", "uriTemplate")}
_LISTS = {kind: (method, field) for method, (kind, field, _) in _KINDS.items()}
# One caller's listings of the servers with credentials: server key -> kind -> items.
Theirs = dict[str, dict[str, list[dict[str, Any]]]]
Unmet = list[Outcome]  # the `credential:KEY` outcomes of servers a caller has no credential for


class Listings:
    """Merged listings and routed requests of one gateway."""

    def __init__(self, fleet: Fleet, forward: Forward, connect_wait: Callable[[], float],
                 callers: CallerCredentials) -> None:
        self._fleet = fleet
        self._forward = forward
        self._connect_wait = connect_wait
        self._callers = callers

    async def list(self, ctx: Call) -> dict[str, Any]:
        """`prompts/list`, `resources/list` or `resources/templates/list`: every server's items,
        all pages, in one page (the gateway hands out no cursor of its own). A server with
        credentials is listed as the caller, and left out for a caller without a credential for
        it; when every server that might list them refused them so, the answer is that refusal
        (`credential:KEY`, with its remedy), never an empty listing. A server that was slow or
        failed to list is no refusal: the listing is the others', whatever the timing."""
        kind, field, key = _KINDS[ctx.method]
        if (ctx.params or {}).get("cursor") is not None:
            raise RpcError(INVALID_PARAMS, "Invalid cursor: the gateway lists everything at once")
        fleet = self._fleet
        if not any(m.connected for m in fleet):
            await fleet.first_connection(self._connect_wait())
        theirs: Theirs = {}
        unmet: Unmet = []
        able = list(self._able("prompts" if kind == "prompts" else "resources"))
        with anyio.move_on_after(LIST_WAIT_SECONDS):
            async with anyio.create_task_group() as tg:
                for member in able:
                    if member.credential is None:
                        tg.start_soon(member.catalog.listings[kind].refresh)
                    else:
                        tg.start_soon(self._listed_as_caller, ctx, member, (kind,), theirs, unmet)
        listed = [(m, m.catalog.listings[kind].items if m.credential is None
                   else theirs.get(m.key, {}).get(kind)) for m in fleet]
        refusing = {outcome.requirement for outcome in unmet}  # (slow or failed: not refusing)
        if unmet and all(m.credential in refusing for m in able):  # every one that might: refused
            raise await self._callers.refusal(ctx, ctx.method, *unmet)
        routes = self._routes(theirs)
        refused = routes.prompt_collisions if kind == "prompts" else routes.ambiguous
        items: list[dict[str, Any]] = []
        for member, found in listed:
            for item in found or ():
                shown = visible(item, member.spec.prefix) if kind == "prompts" else item
                if isinstance(shown.get(key), str) and shown[key] not in refused:
                    items.append(shown)
        return {field: items}

    async def routed(self, ctx: Call, downstream: Downstream) -> dict[str, Any]:
        """A request for one prompt, resource or completion, sent to the server that has it (as
        the caller, to a server with credentials)."""
        params = dict(ctx.params or {})
        method = ctx.method
        if method == "prompts/get":
            member, params["name"] = await self._prompt(ctx, params.get("name"))
        elif method == "completion/complete":
            member, params["ref"] = await self._completion(ctx, params.get("ref"))
        else:
            member = await self._resource(ctx, params.get("uri"), method != "resources/read")
        if method not in ("resources/subscribe", "resources/unsubscribe"):
            return await self._forward(ctx, member, method, params)
        if member.credential is None:
            return await downstream.subscription(
                ctx, member.subscriptions, lambda: self._forward(ctx, member, method, params))
        sidecar, caller = await self._caller(ctx, member, method)
        try:
            return await downstream.subscription(
                ctx, member.subscriptions,
                lambda: self._forward(ctx, member, method, params, sidecar), caller)
        except CredentialRefused as exc:  # refused by the server, renewed once: not sent
            raise await self._callers.refusal(ctx, method, exc.outcome) from None

    async def holder(self, ctx: Call, uri: str) -> tuple[Subscriptions, Sender | None] | None:
        """Whose subscriptions hold `uri` for `ctx`'s listen stream, and as whom (None: no single
        server lists it for this caller). RpcError for a caller without the credential it needs."""
        routes, _, unmet = await self._resource_routes(ctx)
        owner = routes.resource(uri, subscription=True)
        if not isinstance(owner, str):
            if unmet and owner is None:
                raise await self._callers.refusal(ctx, "resources/subscribe", *unmet)
            return None
        member = self._fleet.members[owner]
        if member.credential is None:
            return member.subscriptions, None
        return member.subscriptions, (await self._caller(ctx, member, "resources/subscribe"))[1]

    async def _caller(self, ctx: Call, member: Member, method: str
                      ) -> tuple[Sidecar, Sender]:
        """`ctx`'s caller's credential for `member` (a sidecar, and whom it goes as), or their
        refusal (RpcError)."""
        assert member.credential is not None
        try:
            sidecar = await self._callers.sidecar(ctx, member.credential)
        except CredentialRefused as exc:
            raise await self._callers.refusal(ctx, method, exc.outcome) from None
        outbound = sidecar.held[member.credential].outbound  # (whom it goes as: `Held.outbound`)
        if outbound is None:  # (`sidecar` holds a credential: never, but never as anyone else)
            raise await self._callers.refusal(ctx, method, Outcome(
                member.credential, Status.UNSATISFIED, "no credential was obtained for this "
                "request", transient=True))
        return sidecar, outbound

    # -- routing -----------------------------------------------------------------------------------
    async def _prompt(self, ctx: Call, name: Any) -> tuple[Member, str]:
        if not isinstance(name, str):
            raise RpcError(INVALID_PARAMS, "Invalid request parameters")
        only = next(iter(self._fleet))
        if len(self._fleet.members) == 1 and not only.spec.prefix:  # nothing to choose or strip:
            return only, name  # the server decides
        await self._current("prompts", "prompts")
        theirs, unmet = await self._theirs(ctx, ("prompts",))
        routes = self._routes(theirs)
        if name not in routes.prompts and name not in routes.prompt_collisions:
            await self._relist("prompts", "prompts")
            routes = self._routes(theirs)
        if name in routes.prompt_collisions:
            raise RpcError(INVALID_PARAMS, f"Prompt {name!r} is listed by more than one server")
        target = routes.prompts.get(name)
        if target is None:
            if unmet:
                raise await self._callers.refusal(ctx, ctx.method, *unmet)
            raise RpcError(INVALID_PARAMS, f"Unknown prompt: {name!r}")
        return self._fleet.members[target.server], target.name

    async def _completion(self, ctx: Call, ref: Any) -> tuple[Member, Any]:
        if not isinstance(ref, dict):
            raise RpcError(INVALID_PARAMS, "Invalid request parameters")
        if ref.get("type") == "ref/prompt":
            member, name = await self._prompt(ctx, ref.get("name"))
            return member, {**ref, "name": name}
        uri = ref.get("uri")
        if len(self._fleet.members) == 1:  # URIs are never renamed: nothing to choose
            return next(iter(self._fleet)), ref
        routes, theirs, unmet = await self._resource_routes(ctx)
        owner = routes.template(uri) if isinstance(uri, str) else None
        if owner is None and isinstance(uri, str):
            await self._relist("resources", "resources", "templates")
            owner = self._routes(theirs).template(uri)
        return await self._owner(ctx, owner, uri, unmet), ref

    async def _resource(self, ctx: Call, uri: Any, subscription: bool) -> Member:
        if not isinstance(uri, str):
            raise RpcError(INVALID_PARAMS, "Invalid request parameters")
        if len(self._fleet.members) == 1:  # URIs are never renamed: the server decides
            return next(iter(self._fleet))
        routes, theirs, unmet = await self._resource_routes(ctx)
        owner = routes.resource(uri, subscription=subscription)
        if owner is None:  # a URI nobody lists: the shared listings asked for again (bounded);
            await self._relist("resources", "resources", "templates")  # the caller's are new
            owner = (await self._matching(theirs)).resource(uri, subscription=subscription)
        return await self._owner(ctx, owner, uri, unmet)

    async def _owner(self, ctx: Call, owner: str | tuple[str, ...] | None, uri: Any,
                     unmet: Unmet) -> Member:
        if isinstance(owner, tuple):
            raise RpcError(INVALID_PARAMS,
                           f"Resource {uri!r} is listed by more than one server ({', '.join(owner)})")
        if owner is None:
            if unmet:  # a server this caller has no credential for may have it: theirs to fix
                raise await self._callers.refusal(ctx, ctx.method, *unmet)
            raise RpcError(INVALID_PARAMS, f"No server lists the resource {uri!r}")
        return self._fleet.members[owner]

    async def _resource_routes(self, ctx: Call) -> tuple[Routes, Theirs, Unmet]:
        """The routes of resources for `ctx`'s caller: the servers without credentials by their
        listings as of now (`_current`), those with credentials by the caller's own (`theirs`;
        `unmet`: the `credential:KEY` outcomes of those they have none for)."""
        await self._current("resources", "resources", "templates")
        theirs, unmet = await self._theirs(ctx, ("resources", "templates"))
        return await self._matching(theirs), theirs, unmet

    async def _matching(self, theirs: Theirs) -> Routes:
        """`_routes`, their templates' matcher imported first (off the event loop)."""
        routes = self._routes(theirs)
        if routes.templates:
            await matcher_loaded()
        return routes

    def _routes(self, theirs: Theirs) -> Routes:
        fleet = self._fleet
        if not fleet.credentialed:
            return fleet.routes
        return build_routes(fleet.listing(m, theirs.get(m.key)) for m in fleet)

    async def _theirs(self, ctx: Call, kinds: tuple[str, ...]) -> tuple[Theirs, Unmet]:
        """`ctx`'s caller's own listings (`kinds`) of every connected server with credentials
        that serves them, listed as them now (a slow one waited for LIST_WAIT_SECONDS at most)."""
        theirs: Theirs = {}
        unmet: Unmet = []
        if not self._fleet.credentialed:
            return theirs, unmet
        capability = "prompts" if kinds == ("prompts",) else "resources"
        with anyio.move_on_after(LIST_WAIT_SECONDS):
            async with anyio.create_task_group() as tg:
                for member in self._able(capability):
                    if member.credential is not None:
                        tg.start_soon(self._listed_as_caller, ctx, member, kinds, theirs, unmet)
        return theirs, unmet

    async def _listed_as_caller(self, ctx: Call, member: Member, kinds: tuple[str, ...],
                                into: Theirs, unmet: Unmet) -> None:
        """`member`'s listings of `kinds` as `ctx`'s caller, all pages, into `into`; a caller
        without a credential for it is noted in `unmet` (and sees none of it); a listing that
        fails is left out (logged)."""
        assert member.credential is not None
        try:
            sidecar = await self._callers.sidecar(ctx, member.credential)
            listed: dict[str, list[dict[str, Any]]] = {}
            for kind in kinds:
                method, field = _LISTS[kind]
                listed[kind] = await every_page(self._pages(ctx, member, method, sidecar),
                                                method, field)
        except CredentialRefused as exc:
            unmet.append(exc.outcome)
            return
        except Exception as exc:  # down, slow, garbage: not listed for this caller now
            log.warning("server %s: listing as a caller failed: %s", member.key,
                        getattr(exc, "message", None) or type(exc).__name__)
            return
        into[member.key] = listed

    def _pages(self, ctx: Call, member: Member, method: str, sidecar: Sidecar
               ) -> Callable[[str | None], Awaitable[dict[str, Any]]]:
        """One page of `method` at `member`, as the caller whose credential `sidecar` holds."""
        def page(cursor: str | None) -> Awaitable[dict[str, Any]]:
            return self._forward(ctx, member, method, {"cursor": cursor} if cursor else None,
                                 sidecar)
        return page

    # -- the shared listings -------------------------------------------------------------------------
    async def _relist(self, capability: str, *kinds: str) -> None:
        """A name or URI nobody lists: each server's listings of those kinds are asked for again
        (bounded like unknown tool names: one listing at a time, at most once a second each)."""
        async with anyio.create_task_group() as tg:
            for member in self._shared(capability):
                for kind in kinds:
                    tg.start_soon(member.catalog.listings[kind].refresh_for_unknown)

    async def _current(self, capability: str, *kinds: str) -> None:
        """Before a request is routed by these listings: each connected server with `capability`
        has listed them once (a name or URI two servers list is refused, never sent to the one
        that happened to list first). Servers still starting get the handshake's grace, a first
        listing LIST_WAIT_SECONDS; one that failed is asked again like an unknown name (bounded).
        A listing the server said changed is never waited for (SPEC §14: a server's re-listing
        holds nobody): its last good one routes until the new one is in (`Fleet.relist`)."""
        fleet = self._fleet
        if not all(m.connected for m in fleet):
            await fleet.first_connection(self._connect_wait())
        with anyio.move_on_after(LIST_WAIT_SECONDS):
            async with anyio.create_task_group() as tg:
                for member in self._shared(capability):
                    for kind in kinds:
                        listing = member.catalog.listings[kind]
                        if not listing.loaded:  # (stale: never listed on this session yet)
                            tg.start_soon(listing.fresh if listing.stale
                                          else listing.refresh_for_unknown)
                        elif listing.stale:
                            fleet.relist(member, kind)

    def _shared(self, capability: str) -> Iterator[Member]:
        """The servers listed on the gateway's own session (those without credentials)."""
        return (m for m in self._able(capability) if m.credential is None)

    def _able(self, capability: str) -> Iterator[Member]:
        """The connected servers that declared `capability`."""
        for member in self._fleet:
            current = member.upstream.current
            if current is not None and capability in current.capabilities:
                yield member
