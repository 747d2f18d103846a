"""A live MCP server's `tools/list`, every page, as the raw definitions it sent: what
`mcp-preconditions tools` prints, so that `lint`, `check` and `policy test` run against a real
server's tools. Needs the `mcp` extra; a server that cannot be started or reached is an InputError.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from typing import Any, TextIO, cast

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client._transport import Transport
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import TypeAdapter

from . import __version__
from .credentials.resolver import requirement_for
from .errors import InputError, ListingError
from .gateway.config import ServerSpec
from .gateway.fleet import target_of
from .gateway.route import ServerListing, build_routes, visible
from .gateway.upstream.session import HttpTarget, StdioTarget
from .requirements import merge
from .tls import client_context
from .toolset import MAX_PAGES, every_page, read_listing
from .wire import with_requirements

_RAW: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])
_CLIENT = types.Implementation(name="mcp-preconditions-tools", version=__version__)
_SHOWN = 300  # characters of a server's last stderr line quoted in an error


async def list_tools(target: StdioTarget | HttpTarget, *, timeout: float = 30.0,
                     max_pages: int = MAX_PAGES) -> list[dict[str, Any]]:
    """Every tool `target` lists, all pages (`max_pages` at most), as the dicts it sent. Connects
    with the 2025-11-25 handshake first, then (a server that refuses it) the SDK's 2026-07-28
    negotiation. Raises InputError with one line naming the server when it cannot be started,
    reached or read within `timeout` seconds, or lists more pages."""
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
        try:
            with anyio.fail_after(timeout):
                try:
                    return await _listing(target, "legacy", errlog, max_pages)
                except Exception as exc:
                    if not isinstance(_innermost(exc), MCPError):
                        raise
                    return await _listing(target, "auto", errlog, max_pages)
        except TimeoutError:
            raise InputError(f"{target.label}: no tools/list answer within {timeout:g} s"
                             f"{_said(errlog)}") from None
        except Exception as exc:
            inner = _innermost(exc)
            if isinstance(inner, InputError):  # what the listing itself found wrong
                raise inner from None
            raise InputError(f"{target.label}: cannot list its tools: {_describe(exc)}"
                             f"{_said(errlog)}") from None


async def list_servers_tools(servers: Sequence[ServerSpec], environment: Mapping[str, str], *,
                             timeout: float = 30.0) -> list[dict[str, Any]]:
    """Every tool of a gateway's servers (a gateway.toml or a desktop config), listed in parallel,
    each under its visible name (PREFIX + name) as the gateway shows it, with the `credential:KEY`
    the gateway adds to every tool of a server with credentials; a name two servers share, or one
    server lists twice, is left out (the gateway refuses it). InputError as `list_tools`, for the
    first server that fails."""
    found: dict[str, list[dict[str, Any]]] = {}

    async def one(spec: ServerSpec) -> None:
        found[spec.key] = await list_tools(target_of(spec, dict(environment)), timeout=timeout)
    async with anyio.create_task_group() as tg:
        for spec in servers:
            tg.start_soon(one, spec)
    listed = {spec.key: read_listing(found[spec.key]) for spec in servers}
    routes = build_routes(ServerListing(spec.key, spec.prefix, listed[spec.key].tools,
                                        listed[spec.key].duplicates) for spec in servers)
    specs = {spec.key: spec for spec in servers}
    return [_carrying(visible(listed[target.server].tools[target.name], specs[target.server].prefix),
                      listed[target.server].own.get(target.name), specs[target.server])
            for name, target in routes.tools.items() if name not in routes.duplicates]


def _carrying(tool: dict[str, Any], own: tuple[str, ...] | None, spec: ServerSpec) -> dict[str, Any]:
    """The tool with the `credential:KEY` the gateway adds to it (gateway/fleet.py); one whose own
    requirements cannot be read is left as it is (the gateway refuses it)."""
    if spec.credentials is None or own is None:
        return tool
    return with_requirements(tool, merge(own, (requirement_for(spec.key),)))


async def _listing(target: StdioTarget | HttpTarget, mode: str, errlog: TextIO,
                   max_pages: int = MAX_PAGES) -> list[dict[str, Any]]:
    async with Client(_transport(target, errlog), mode=cast(Any, mode), cache=None,
                      client_info=_CLIENT) as client:
        async def page(cursor: str | None) -> object:
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            return await client.session.send_request(types.ListToolsRequest(params=params),
                                                     cast(Any, _RAW))
        try:
            return await every_page(page, max_pages=max_pages)
        except ListingError as exc:
            raise InputError(f"{target.label}: {exc}") from None


def _transport(target: StdioTarget | HttpTarget, errlog: TextIO) -> Transport:
    if isinstance(target, StdioTarget):
        params = StdioServerParameters(command=target.command, args=list(target.args),
                                       env=dict(target.env))
        return cast(Transport, stdio_client(params, errlog=errlog))
    http = httpx2.AsyncClient(headers=dict(target.headers), timeout=httpx2.Timeout(30.0),
                              verify=client_context())
    return cast(Transport, streamable_http_client(target.url, http_client=http))


def _innermost(exc: BaseException) -> BaseException:
    """The first leaf of nested exception groups (task groups wrap a transport's failure)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    inner = _innermost(exc)
    text = str(inner)
    return f"{type(inner).__name__}: {text}" if text else type(inner).__name__


def _said(errlog: TextIO) -> str:
    """The server's last stderr line, as a hint of why it failed (bounded, one line)."""
    errlog.seek(0)
    lines = [line.strip() for line in errlog.read().splitlines() if line.strip()]
    if not lines:
        return ""
    last = lines[-1] if len(lines[-1]) <= _SHOWN else lines[-1][:_SHOWN - 1] + "…"
    return f" (its stderr: {last})"


__all__ = ["MAX_PAGES", "list_servers_tools", "list_tools"]
