"""JSON-RPC 2.0 as the gateway relays it: messages stay the dicts they arrived as, encoded and decoded
once per hop (orjson when installed, else the standard library), errors as `RpcError`. No model is
built for a message the gateway only passes on.
"""

from __future__ import annotations

import json
from typing import Any, Final, TypeGuard

import mcp_types as types

from .errors import RpcError as RpcError  # (defined with the gateway's other errors)

try:  # a third of the relay's own CPU per call is JSON (docs/gateway-performance.md)
    import orjson
except ImportError:  # pragma: no cover - orjson comes with the mcp extra
    orjson = None  # type: ignore[assignment]

Message = dict[str, Any]
RequestId = str | int

PARSE_ERROR: Final = types.PARSE_ERROR
INVALID_REQUEST: Final = types.INVALID_REQUEST
METHOD_NOT_FOUND: Final = types.METHOD_NOT_FOUND
INVALID_PARAMS: Final = types.INVALID_PARAMS
INTERNAL_ERROR: Final = types.INTERNAL_ERROR
CONNECTION_CLOSED: Final = types.CONNECTION_CLOSED
REQUEST_TIMEOUT: Final = types.REQUEST_TIMEOUT
HEADER_MISMATCH: Final = types.HEADER_MISMATCH
UNSUPPORTED_PROTOCOL_VERSION: Final = types.UNSUPPORTED_PROTOCOL_VERSION
# A request the gateway refused for want of the caller's credential (SPEC §14: not a tool call, so
# no tool result to carry the denial; `data` holds its unmet requirements and SEP-2643 envelope).
# SPEC §14's number; the MCP SDK's REQUEST_TIMEOUT has it too, so a client reads `data` to tell.
AUTHORIZATION_DENIED: Final = -32001
# A 2025-11-25 request that ended without an answer (the client cancelled it) is still ended on its
# HTTP stream, with this code (LSP's RequestCancelled, as the MCP SDK's transport does).
REQUEST_CANCELLED: Final = -32800

# ASCII out: a lone surrogate the standard library read ("\ud800") is written back as that escape,
# so the server reads the string the guard decided on (UTF-8 cannot carry it: it would arrive as
# U+FFFD, or as bytes that are not UTF-8 at all).
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True)


def loads(data: bytes | str) -> Any:
    """One JSON document; ValueError when it is not one (RecursionError is a ValueError too here)."""
    if orjson is not None:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass  # what orjson refuses (NaN, integers past 64 bits) the standard library may read
    try:
        return json.loads(data)
    except RecursionError as exc:
        raise ValueError("nested too deeply") from exc


def dumps(message: Any) -> bytes:
    if orjson is not None:
        try:
            return orjson.dumps(message)
        except (TypeError, orjson.JSONEncodeError):
            pass  # an integer past 64 bits, a float sent as NaN, a lone surrogate: written as read
    return _ENCODER.encode(message).encode("ascii")


def is_id(value: Any) -> TypeGuard[RequestId]:
    return isinstance(value, str | int) and not isinstance(value, bool)


def kind(message: Any) -> str | None:
    """"request", "notification", "response" or "error" for a well-formed JSON-RPC 2.0 message,
    else None (a batch, a wrong version, a malformed envelope)."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return None
    params = message.get("params")
    if "method" in message:
        if not isinstance(message["method"], str) or not (params is None or isinstance(params, dict)):
            return None
        if "id" not in message:
            return "notification"
        return "request" if is_id(message["id"]) else None
    if "result" in message and "error" not in message:
        return "response" if is_id(message.get("id")) and isinstance(message["result"], dict) else None
    if "error" in message and "result" not in message:
        error = message["error"]
        ok_id = message.get("id") is None or is_id(message.get("id"))
        ok = isinstance(error, dict) and isinstance(error.get("code"), int) \
            and isinstance(error.get("message"), str)
        return "error" if ok_id and ok else None
    return None


def invalid_request(message: Any) -> Message | None:
    """The answer to JSON that is no JSON-RPC 2.0 message (`kind` is None): -32600 Invalid Request
    when it is an object with an id it can be answered with and no result or error (a request, then);
    None otherwise (a batch, `"id": null`, a malformed response: there is no one to answer)."""
    if not isinstance(message, dict) or not is_id(message.get("id")) \
            or "result" in message or "error" in message:
        return None
    return error(message["id"], RpcError(INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 "
                                         "request (jsonrpc \"2.0\", a string method, params an object)"))


def request(request_id: RequestId, method: str, params: dict[str, Any] | None) -> Message:
    out: Message = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        out["params"] = params
    return out


def notification(method: str, params: dict[str, Any] | None) -> Message:
    out: Message = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        out["params"] = params
    return out


def response(request_id: RequestId, result: dict[str, Any]) -> Message:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error(request_id: RequestId | None, exc: RpcError) -> Message:
    return {"jsonrpc": "2.0", "id": request_id, "error": exc.wire()}
