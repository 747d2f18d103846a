"""Prompts, resources and completions across the servers (SPEC §12): listings merged from every
server (prompts under their visible names, URIs unchanged), and each routed request sent to the one
server that listed its name, URI or template. Whatever two servers claim is refused as ambiguous.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import anyio

from .downstream.callers import Downstream
from .downstream.clients import Call
from .fleet import Fleet, Member
from .forward import Forward
from .jsonrpc import INVALID_PARAMS, RpcError
from .route import visible
from .subscriptions import Subscriptions

log = logging.getLogger("mcp_preconditions.gateway")

# A listing asks every server again, and waits this long at most for a slow one, whose last good
# listing is used instead.
LIST_WAIT_SECONDS = 5.0
_KINDS = {"prompts/list": ("prompts", "prompts", "name"),
          "resources/list": ("resources", "resources", "uri"),
          "resources/templates/list": ("templates", "resourceTemplates", "uriTemplate")}


class Listings:
    """Merged listings and routed requests of one gateway."""

    def __init__(self, fleet: Fleet, forward: Forward, connect_wait: Callable[[], float]) -> None:
        self._fleet = fleet
        self._forward = forward
        self._connect_wait = connect_wait

    async def list(self, ctx: Call) -> dict[str, Any]:
        """`prompts/list`, `resources/list` or `resources/templates/list`: every server's items,
        all pages, in one page (the gateway hands out no cursor of its own)."""
        kind, field, key = _KINDS[ctx.method]
        if (ctx.params or {}).get("cursor") is not None:
            raise RpcError(INVALID_PARAMS, "Invalid cursor: the gateway lists everything at once")
        fleet = self._fleet
        if not any(m.connected for m in fleet):
            await fleet.first_connection(self._connect_wait())
        with anyio.move_on_after(LIST_WAIT_SECONDS):
            async with anyio.create_task_group() as tg:
                for member in self._able("prompts" if kind == "prompts" else "resources"):
                    tg.start_soon(member.catalog.listings[kind].refresh)
        routes = fleet.routes
        refused = routes.prompt_collisions if kind == "prompts" else routes.ambiguous
        items: list[dict[str, Any]] = []
        for member in fleet:
            for item in member.catalog.listings[kind].items or ():
                shown = visible(item, member.spec.prefix) if kind == "prompts" else item
                if isinstance(shown.get(key), str) and shown[key] not in refused:
                    items.append(shown)
        return {field: items}

    async def routed(self, ctx: Call, downstream: Downstream
                     ) -> dict[str, Any]:
        """A request for one prompt, resource or completion, sent to the server that has it."""
        params = dict(ctx.params or {})
        method = ctx.method
        if method == "prompts/get":
            member, params["name"] = await self._prompt(params.get("name"))
        elif method == "completion/complete":
            member, params["ref"] = await self._completion(params.get("ref"))
        else:
            member = await self._resource(params.get("uri"), method != "resources/read")
        if method in ("resources/subscribe", "resources/unsubscribe"):
            return await downstream.subscription(
                ctx, member.subscriptions, lambda: self._forward(ctx, member, method, params))
        return await self._forward(ctx, member, method, params)

    def holder(self, uri: str) -> Subscriptions | None:
        """Whose subscriptions hold `uri` for a listen stream (None: no single server lists it)."""
        owner = self._fleet.routes.resource(uri, subscription=True)
        return self._fleet.members[owner].subscriptions if isinstance(owner, str) else None

    async def _prompt(self, name: Any) -> tuple[Member, str]:
        if not isinstance(name, str):
            raise RpcError(INVALID_PARAMS, "Invalid request parameters")
        only = next(iter(self._fleet))
        if len(self._fleet.members) == 1 and not only.spec.prefix:  # nothing to choose or strip:
            return only, name  # the server decides
        await self._current("prompts", "prompts")
        routes = self._fleet.routes
        if name not in routes.prompts and name not in routes.prompt_collisions:
            await self._relist("prompts", "prompts")
            routes = self._fleet.routes
        if name in routes.prompt_collisions:
            raise RpcError(INVALID_PARAMS, f"Prompt {name!r} is listed by more than one server")
        target = routes.prompts.get(name)
        if target is None:
            raise RpcError(INVALID_PARAMS, f"Unknown prompt: {name!r}")
        return self._fleet.members[target.server], target.name

    async def _completion(self, ref: Any) -> tuple[Member, Any]:
        if not isinstance(ref, dict):
            raise RpcError(INVALID_PARAMS, "Invalid request parameters")
        if ref.get("type") == "ref/prompt":
            member, name = await self._prompt(ref.get("name"))
            return member, {**ref, "name": name}
        uri = ref.get("uri")
        if len(self._fleet.members) == 1:  # URIs are never renamed: nothing to choose
            return next(iter(self._fleet)), ref
        await self._current("resources", "resources", "templates")
        owner = self._fleet.routes.template(uri) if isinstance(uri, str) else None
        if owner is None and isinstance(uri, str):
            await self._relist_resources()
            owner = self._fleet.routes.template(uri)
        return self._owner(owner, uri), ref

    async def _resource(self, uri: Any, subscription: bool) -> Member:
        if not isinstance(uri, str):
            raise RpcError(INVALID_PARAMS, "Invalid request parameters")
        if len(self._fleet.members) == 1:  # URIs are never renamed: the server decides
            return next(iter(self._fleet))
        await self._current("resources", "resources", "templates")
        owner = self._fleet.routes.resource(uri, subscription=subscription)
        if owner is None:
            await self._relist_resources()
            owner = self._fleet.routes.resource(uri, subscription=subscription)
        return self._owner(owner, uri)

    def _owner(self, owner: str | tuple[str, ...] | None, uri: Any) -> Member:
        if isinstance(owner, tuple):
            raise RpcError(INVALID_PARAMS,
                           f"Resource {uri!r} is listed by more than one server ({', '.join(owner)})")
        if owner is None:
            raise RpcError(INVALID_PARAMS, f"No server lists the resource {uri!r}")
        return self._fleet.members[owner]

    async def _relist_resources(self) -> None:
        await self._relist("resources", "resources", "templates")

    async def _relist(self, capability: str, *kinds: str) -> None:
        """A name or URI nobody lists: each server's listings of those kinds are asked for again
        (bounded like unknown tool names: one listing at a time, at most once a second each)."""
        async with anyio.create_task_group() as tg:
            for member in self._able(capability):
                for kind in kinds:
                    tg.start_soon(member.catalog.listings[kind].refresh_for_unknown)

    async def _current(self, capability: str, *kinds: str) -> None:
        """Before a request is routed by these listings: each connected server with `capability`
        has listed them since it connected, or since it said they changed (a name or URI two
        servers list is refused, never sent to the one that happened to list first). Servers
        still starting get the handshake's grace; a slow listing gets LIST_WAIT_SECONDS, then its
        last good one is used. One that failed is asked again like an unknown name (bounded)."""
        fleet = self._fleet
        if not all(m.connected for m in fleet):
            await fleet.first_connection(self._connect_wait())
        with anyio.move_on_after(LIST_WAIT_SECONDS):
            async with anyio.create_task_group() as tg:
                for member in self._able(capability):
                    for kind in kinds:
                        listing = member.catalog.listings[kind]
                        if listing.stale:
                            tg.start_soon(listing.fresh)
                        elif not listing.loaded:
                            tg.start_soon(listing.refresh_for_unknown)

    def _able(self, capability: str) -> Iterator[Member]:
        """The connected servers that declared `capability`."""
        for member in self._fleet:
            current = member.upstream.current
            if current is not None and capability in current.capabilities:
                yield member
