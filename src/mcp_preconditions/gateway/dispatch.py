"""The MCP protocol around the pipeline, for requests of either version on either listener: each
request checked against its version's schema, `initialize`, `ping`, `server/discover` and
`subscriptions/listen` answered here, the rest handed to the gateway; the 2026-07-28 per-request
envelope checked (and, over HTTP, its routing headers); errors in their wire form.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from mcp_types import PROTOCOL_VERSION_META_KEY, SERVER_INFO_META_KEY
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from . import bridge, jsonrpc
from .clients import Call, Client
from .errors import PeerFailed, UpstreamError
from .gateway import SERVED, SERVER_INFO, Gateway
from .inbound import (
    MCP_PARAM_HEADER_PREFIX,
    InboundLadderRejection,
    classify_inbound_request,
    validate_mcp_param_headers,
)
from .jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    UNSUPPORTED_PROTOCOL_VERSION,
    Message,
    RpcError,
)

log = logging.getLogger("mcp_preconditions.gateway")
_PARAM_PREFIX = MCP_PARAM_HEADER_PREFIX.lower().encode()


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
        except UpstreamError as exc:  # a server's failure, never the caller's (errors.py)
            log.warning("request %s: a server failed: %s", call.method, exc)
            return jsonrpc.error(call.id, PeerFailed(INTERNAL_ERROR, "a server behind the gateway "
                                                     "failed"))
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

    def param_refusal(self, message: Mapping[str, Any], raw: Iterable[tuple[bytes, bytes]]
                      ) -> RpcError | None:
        """A 2026-07-28 `tools/call`'s `Mcp-Param-*` headers (raw, repeats visible) against its
        arguments and the tool's `x-mcp-header` annotations as the gateway lists it: the SDK
        server's check, so an intermediary that routed on a header saw what the call does."""
        params = message.get("params")
        if message.get("method") != "tools/call" or not isinstance(params, Mapping):
            return None
        arguments = params.get("arguments")
        arguments = {} if arguments is None else arguments
        headers = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in raw
                   if n.lower().startswith(_PARAM_PREFIX)]
        if not isinstance(arguments, Mapping) or not (arguments or headers):
            return None
        fleet = self.gateway.fleet
        target = fleet.routes.tools.get(params.get("name"))  # type: ignore[arg-type]
        tool = fleet.members[target.server].catalog.tools.get(target.name) if target else None
        if tool is None:
            return None
        refused = validate_mcp_param_headers(tool.get("inputSchema"), arguments, headers)
        return refused.error() if refused is not None else None

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
    if method not in bridge.SPEC_CLIENT_METHODS:
        raise RpcError(METHOD_NOT_FOUND, "Method not found", method)
    if method == "tools/call" and version in HANDSHAKE_PROTOCOL_VERSIONS and plain_call(params):
        return  # the schema's verdict is known (test_gateway_dispatch_check holds it so)
    try:
        bridge.validate_client_request(method, version, params)
    except KeyError:
        raise RpcError(METHOD_NOT_FOUND, "Method not found", method) from None
    except ValidationError:
        raise RpcError(INVALID_PARAMS, "Invalid request parameters", "") from None


def plain_call(params: Any) -> bool:
    """Whether a `tools/call`'s params are a name and at most an object of arguments, and nothing
    else: valid at every handshake-era version (the other fields of its model are optional), so
    the most common call skips building the SDK's model to learn so (a few µs of every call)."""
    if type(params) is not dict or type(params.get("name")) is not str:
        return False
    arguments = params.get("arguments", None)
    return len(params) == (1 if "arguments" not in params else 2) and (
        arguments is None or (type(arguments) is dict and all(type(k) is str for k in arguments)))


def modern(params: Mapping[str, Any] | None) -> bool:
    """Whether a request carries the 2026-07-28 envelope (its protocol-version `_meta` key)."""
    meta = params.get("_meta") if params else None
    return isinstance(meta, Mapping) and PROTOCOL_VERSION_META_KEY in meta


def envelope(message: Mapping[str, Any], headers: Mapping[str, str] | None) -> str:
    """The protocol version of a 2026-07-28 request, after the spec's checks of its envelope
    (and, over HTTP, of the headers that repeat it); RpcError with the first that fails."""
    route = classify_inbound_request(message, headers=headers)
    if isinstance(route, InboundLadderRejection):
        raise route.error()
    return route.protocol_version


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
