"""The MCP protocol around the pipeline, for requests of either version on either listener: each
request checked against its version's schema, `initialize`, `ping`, `server/discover` and
`subscriptions/listen` answered here, the rest handed to the gateway; the 2026-07-28 per-request
envelope checked (and, over HTTP, its routing headers); errors in their wire form.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from mcp_types import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY, SERVER_INFO_META_KEY
from mcp_types import methods as _methods
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from . import jsonrpc
from .downstream.clients import Call, Client
from .downstream.wire import header_value
from .gateway import SERVED, SERVER_INFO, Gateway
from .jsonrpc import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    UNSUPPORTED_PROTOCOL_VERSION,
    Message,
    RpcError,
)

log = logging.getLogger("mcp_preconditions.gateway")

# The methods whose target a 2026-07-28 request repeats in the `Mcp-Name` header.
NAMED = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


class Dispatch:
    """Answers the requests of every client of one gateway."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    async def answer(self, call: Call) -> Message:
        """The response to `call` (a result or an error), in its wire form; traced as one message
        when tracing is on (its span continues the caller's trace context)."""
        try:
            span = self.gateway.telemetry.message(call.method, call.params, call.headers, call.id,
                                                  call.version)
            if span is None:
                return jsonrpc.response(call.id, await self.request(call))
            with span:
                return jsonrpc.response(call.id, await self.request(call))
        except RpcError as exc:
            return jsonrpc.error(call.id, exc)
        except ValidationError:
            return jsonrpc.error(call.id, RpcError(INVALID_PARAMS, "Invalid request parameters", ""))
        except Exception:
            log.exception("request %s failed", call.method)
            return jsonrpc.error(call.id, RpcError(INTERNAL_ERROR, "Internal server error"))

    async def request(self, call: Call) -> dict[str, Any]:
        method = call.method
        check(method, call.version, call.params)
        if method in SERVED:
            return await self.gateway.handle(call)
        if method == "initialize":
            return await self._initialize(call)
        if method == "server/discover":
            result: dict[str, Any] = {
                "supportedVersions": list(MODERN_PROTOCOL_VERSIONS), "capabilities": {},
                "resultType": "complete", "ttlMs": 0, "cacheScope": "private",
                "_meta": {SERVER_INFO_META_KEY: dict(SERVER_INFO)}}
            await self.gateway.describe(result, call.version, discover=True)
            return result
        if method == "subscriptions/listen":
            gateway = self.gateway
            await gateway.listen(call)
            raise RpcError(INTERNAL_ERROR, "the listen stream ended")  # never: it ends cancelled
        if method == "ping":
            return {}
        raise RpcError(METHOD_NOT_FOUND, "Method not found", method)

    async def _initialize(self, call: Call) -> dict[str, Any]:
        """The handshake (2025-11-25 and older): the version negotiated, the servers'
        capabilities; the client's params are its connection's from now on."""
        params = call.params or {}
        requested = params.get("protocolVersion")
        version = requested if requested in HANDSHAKE_PROTOCOL_VERSIONS else LATEST_HANDSHAKE_VERSION
        result: dict[str, Any] = {"protocolVersion": version, "capabilities": {},
                                  "serverInfo": dict(SERVER_INFO)}
        await self.gateway.describe(result, version, discover=False)
        if call.client is not None:
            call.client.params = dict(params)
            call.client.version = version
        return result

    async def notified(self, client: Client | None, method: str, params: dict[str, Any] | None,
                       headers: Mapping[str, str] | None = None) -> None:
        """A client's notification (cancellations and answers are the listener's)."""
        span = self.gateway.telemetry.message(method, params, headers)
        if span is None:
            await self._notified(client, method, params)
            return
        with span:
            await self._notified(client, method, params)

    async def _notified(self, client: Client | None, method: str, params: dict[str, Any] | None
                        ) -> None:
        if method == "notifications/initialized" and client is not None:
            client.initialized = True
        elif method == "notifications/roots/list_changed":
            await self.gateway.roots_changed(params)


def check(method: str, version: str, params: dict[str, Any] | None) -> None:
    """A request as its protocol version defines it: an unknown method (at this version) is
    METHOD_NOT_FOUND, malformed params INVALID_PARAMS (the MCP SDK's own per-version schemas)."""
    if method not in _methods.SPEC_CLIENT_METHODS:
        raise RpcError(METHOD_NOT_FOUND, "Method not found", method)
    try:
        _methods.validate_client_request(method, version, params)
    except KeyError:
        raise RpcError(METHOD_NOT_FOUND, "Method not found", method) from None
    except ValidationError:
        raise RpcError(INVALID_PARAMS, "Invalid request parameters", "") from None


def modern(params: Mapping[str, Any] | None) -> bool:
    """Whether a request carries the 2026-07-28 envelope (its protocol-version `_meta` key)."""
    meta = params.get("_meta") if params else None
    return isinstance(meta, Mapping) and PROTOCOL_VERSION_META_KEY in meta


def envelope(message: Mapping[str, Any], headers: Mapping[str, str] | None) -> str:
    """The protocol version of a 2026-07-28 request, after the spec's checks of its envelope
    (and, over HTTP, of the headers that repeat it); RpcError with the first that fails."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    if not isinstance(meta, Mapping):
        raise RpcError(INVALID_PARAMS, "params._meta must be an object carrying the required "
                       f"{PROTOCOL_VERSION_META_KEY!r} and {CLIENT_CAPABILITIES_META_KEY!r} "
                       "envelope keys")
    missing = [k for k in (PROTOCOL_VERSION_META_KEY, CLIENT_CAPABILITIES_META_KEY) if k not in meta]
    if missing:
        raise RpcError(INVALID_PARAMS, "params._meta is missing the required envelope key(s): "
                       + ", ".join(missing))
    version = meta[PROTOCOL_VERSION_META_KEY]
    if headers is not None:
        _headers_agree(message, version, headers)
    if not isinstance(version, str):
        raise RpcError(INVALID_PARAMS, "the protocol-version envelope value must be a string")
    if version not in MODERN_PROTOCOL_VERSIONS:
        raise unsupported(version)
    return version


def _headers_agree(message: Mapping[str, Any], version: Any, headers: Mapping[str, str]) -> None:
    if headers.get("mcp-protocol-version") is None or headers.get("mcp-protocol-version") != version:
        raise RpcError(HEADER_MISMATCH, "mcp-protocol-version header does not match the request "
                       "envelope's protocol version")
    method = message.get("method")
    if headers.get("mcp-method") != method:
        raise RpcError(HEADER_MISMATCH, "mcp-method header does not match the request body's method")
    key = NAMED.get(method) if isinstance(method, str) else None
    if key is not None:
        value = message["params"].get(key)
        if value is not None and header_value(headers.get("mcp-name")) != value:
            raise RpcError(HEADER_MISMATCH, f"mcp-name header does not match the request body's "
                           f"{key!r} parameter")


def unsupported(version: str) -> RpcError:
    return RpcError(UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version",
                    {"supported": list(MODERN_PROTOCOL_VERSIONS), "requested": version})


def era_refusal(method: str, params: Mapping[str, Any] | None, *, modern_connection: bool
                ) -> RpcError | None:
    """A stdio connection serves the era its first request chose: the other era's requests are
    refused (as the MCP SDK's dual-era loop does)."""
    if modern_connection and method == "initialize":
        requested = (params or {}).get("protocolVersion")
        data: dict[str, Any] = ({"supported": list(MODERN_PROTOCOL_VERSIONS), "requested": requested}
                                if isinstance(requested, str)
                                else {"supported": list(MODERN_PROTOCOL_VERSIONS)})
        return RpcError(UNSUPPORTED_PROTOCOL_VERSION, "connection is serving the 2026-07-28 "
                        "protocol; the initialize handshake is not accepted", data)
    if not modern_connection and method != "initialize" and modern(params):
        return RpcError(INVALID_REQUEST, "this connection serves the handshake protocol era; "
                        "requests carrying the 2026-07-28 envelope are not accepted on it")
    return None
