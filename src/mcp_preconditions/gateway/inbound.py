"""The 2026-07-28 wire rules both sides of the gateway read, ported from the MCP SDK's
`mcp/shared/inbound.py` under the same names (and tested against it on the same inputs): the
per-request envelope checks, the routing headers, the HTTP status of an error code, the methods
that name their target, the header-value codec and the `x-mcp-header` / `Mcp-Param-*` rules.
Pure: no I/O, and no import of the SDK (the gateway does not load it, for memory).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .jsonrpc import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
    RpcError,
)

MISSING_REQUIRED_CLIENT_CAPABILITY: Final = -32021
MCP_PROTOCOL_VERSION_HEADER: Final = "mcp-protocol-version"
MCP_METHOD_HEADER: Final = "mcp-method"
MCP_NAME_HEADER: Final = "mcp-name"
MCP_PARAM_HEADER_PREFIX: Final = "Mcp-Param-"
X_MCP_HEADER_KEY: Final = "x-mcp-header"
# Each method whose target a request repeats in `Mcp-Name`, and the params key it is read from.
NAME_BEARING_METHODS: Final[Mapping[str, str]] = MappingProxyType(
    {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"})
# The HTTP status of a JSON-RPC error code (any other: the caller's default, 200).
ERROR_CODE_HTTP_STATUS: Final[Mapping[int, int]] = MappingProxyType({
    PARSE_ERROR: 400, INVALID_REQUEST: 400, INVALID_PARAMS: 400, HEADER_MISMATCH: 400,
    MISSING_REQUIRED_CLIENT_CAPABILITY: 400, UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 404})

_ROUTING_HEADERS = frozenset({MCP_PROTOCOL_VERSION_HEADER, MCP_METHOD_HEADER, MCP_NAME_HEADER})
_SENTINEL = re.compile(r"=\?base64\?(.*)\?=")
_HEADER_SAFE = re.compile(r"[\x20-\x7E]*")
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # an RFC 9110 field name
_HEADER_TYPES = frozenset({"string", "integer", "boolean"})  # never "number": float -> str varies
_DECIMAL = re.compile(r"-?[0-9]+(\.[0-9]+)?")
# JSON Schema 2020-12 keywords whose values are schemas: one schema, a list, or a map of them.
# Only `properties` keeps the chain of property names a header can be declared on.
_ONE_SCHEMA = frozenset({"items", "contains", "unevaluatedItems", "additionalProperties",
                         "propertyNames", "unevaluatedProperties", "not", "if", "then", "else",
                         "contentSchema"})
_LIST_OF_SCHEMAS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_MAP_OF_SCHEMAS = frozenset({"patternProperties", "dependentSchemas", "$defs", "definitions"})


@dataclass(frozen=True)
class InboundModernRoute:
    """A 2026-07-28 request whose envelope passed every check (the values as sent)."""

    protocol_version: str
    client_info: Any
    client_capabilities: Any


@dataclass(frozen=True)
class InboundLadderRejection:
    """The first check a request failed, as the fields of a JSON-RPC error."""

    code: int
    message: str
    data: Any = None

    def error(self) -> RpcError:
        return RpcError(self.code, self.message, self.data)


# -- the header-value codec ------------------------------------------------------------------------
def encode_header_value(value: str) -> str:
    """`value` as an HTTP field carries it: as is when it is printable ASCII without edge spaces
    (and does not look like the sentinel), else its UTF-8 in base64 inside `=?base64?...?=`."""
    if _HEADER_SAFE.fullmatch(value) and value == value.strip() and not _SENTINEL.fullmatch(value):
        return value
    return "=?base64?" + base64.b64encode(value.encode("utf-8")).decode("ascii") + "?="


def decode_header_value(value: str | None) -> str | None:
    """The value `encode_header_value` was given; None for None and for a malformed sentinel
    (bad or non-canonical base64, not UTF-8), so a corrupt header matches nothing."""
    if value is None:
        return None
    found = _SENTINEL.fullmatch(value)
    if found is None:
        return value
    payload = found[1]
    try:
        raw = base64.b64decode(payload, validate=True)
        if base64.b64encode(raw).decode("ascii") != payload:  # only the canonical form is ours
            return None
        return raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


# -- x-mcp-header annotations and the Mcp-Param-* headers ----------------------------------------
def _positions(root: Any) -> Iterator[tuple[tuple[str, ...] | None, dict[str, Any]]]:
    """Every schema position in `root` with its chain of `properties` names (None once another
    keyword was crossed). Instance data (`const`, `default`, ...) is never entered, `$ref` never
    followed; an explicit stack keeps any finite JSON safe to walk."""
    stack: list[tuple[tuple[str, ...] | None, Any]] = [((), root)]
    while stack:
        path, node = stack.pop()
        if not isinstance(node, dict):
            continue
        yield path, node
        for keyword, value in node.items():
            if keyword == "properties" and isinstance(value, dict):
                stack.extend(((*path, name) if path is not None else None, sub)
                             for name, sub in value.items())
            elif keyword in _ONE_SCHEMA:
                stack.append((None, value))
            elif keyword in _LIST_OF_SCHEMAS and isinstance(value, list):
                stack.extend((None, sub) for sub in value)
            elif keyword in _MAP_OF_SCHEMAS and isinstance(value, dict):
                stack.extend((None, sub) for sub in value.values())


def _annotated(schema: Any) -> Iterator[tuple[tuple[str, ...], str, dict[str, Any]]]:
    """(property path, header token, its schema) of each annotation on a property chain."""
    for path, node in _positions(schema):
        token = node.get(X_MCP_HEADER_KEY)
        if path and isinstance(token, str):
            yield path, token, node


def find_invalid_x_mcp_header(input_schema: Any) -> str | None:
    """Why an `x-mcp-header` annotation in `input_schema` is unusable, or None when all are: each
    must sit on a property reached by `properties` alone, name an RFC 9110 token, be on a string,
    integer or boolean property, and be unique regardless of case."""
    seen: dict[str, str] = {}
    for path, node in _positions(input_schema):
        if X_MCP_HEADER_KEY not in node:
            continue
        if not path:
            return (f"{X_MCP_HEADER_KEY} found at a schema position not reachable via a pure "
                    "`properties` chain")
        where = ".".join(path)
        token = node[X_MCP_HEADER_KEY]
        if not isinstance(token, str):
            return f"property {where!r}: {X_MCP_HEADER_KEY} must be a string, not {type(token).__name__}"
        if not _TOKEN.fullmatch(token):
            return f"property {where!r}: {X_MCP_HEADER_KEY} {token!r} is not an RFC 9110 token"
        kind = node.get("type")
        if not isinstance(kind, str):
            return (f"property {where!r}: {X_MCP_HEADER_KEY} is only permitted on integer/string/"
                    f"boolean properties (the type keyword is {type(kind).__name__}, not a string)")
        if kind not in _HEADER_TYPES:
            return (f"property {where!r}: {X_MCP_HEADER_KEY} is only permitted on integer/string/"
                    f"boolean properties (got {kind!r})")
        if token.lower() in seen:
            return (f"{X_MCP_HEADER_KEY} {token!r} on property {where!r} duplicates property "
                    f"{seen[token.lower()]!r}")
        seen[token.lower()] = where
    return None


def x_mcp_header_map(input_schema: Any) -> dict[tuple[str, ...], str]:
    """Property path -> header token, for a schema `find_invalid_x_mcp_header` accepts."""
    return {path: token for path, token, _ in _annotated(input_schema)}


def _rendered(value: Any) -> str | None:
    """How an argument is written in its header (None: it cannot be: not a scalar, or an int
    past the interpreter's digit limit)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if not isinstance(value, str | int | float):
        return None
    try:
        return str(value)
    except ValueError:
        return None


def _at(arguments: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = arguments
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def mcp_param_headers(header_map: Mapping[tuple[str, ...], str], arguments: Mapping[str, Any]
                      ) -> dict[str, str]:
    """The `Mcp-Param-*` headers a `tools/call` carries: one per declared property that has a
    scalar value in `arguments`, encoded by the codec above."""
    headers: dict[str, str] = {}
    for path, token in header_map.items():
        value = _at(arguments, path)
        text = _rendered(value) if value is not None else None
        if text is not None:
            headers[MCP_PARAM_HEADER_PREFIX + token] = encode_header_value(text)
    return headers


def _agrees(kind: Any, value: Any, rendered: str, decoded: str) -> bool:
    """Whether a header value matches its argument: integers compare by value (`42` and `42.0`,
    exactly, whatever their size), anything else as rendered."""
    integral = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if kind == "integer" and not isinstance(value, bool) and integral and _DECIMAL.fullmatch(decoded):
        whole, _, fraction = decoded.partition(".")
        if fraction.strip("0"):
            return False
        try:
            return int(whole) == int(value)
        except ValueError:
            return False
    return decoded == rendered


def validate_mcp_param_headers(input_schema: Any, arguments: Mapping[str, Any],
                               headers: Mapping[str, str] | Iterable[tuple[str, str]]
                               ) -> InboundLadderRejection | None:
    """A `tools/call`'s `Mcp-Param-*` headers against its arguments: each declared one present
    exactly when its argument is (null counts as absent), equal once decoded, and given once.
    `headers`: a mapping, or the raw (name, value) pairs (where repeats are visible). A schema
    with an unusable annotation checks nothing (a conforming client sends no such header)."""
    if find_invalid_x_mcp_header(input_schema) is not None:
        return None
    folded: dict[str, str] = {}
    repeated: set[str] = set()
    for name, value in headers.items() if isinstance(headers, Mapping) else headers:
        key = name.lower()
        if key in folded:
            repeated.add(key)
        folded[key] = value
    for path, token, node in _annotated(input_schema):
        name = MCP_PARAM_HEADER_PREFIX + token
        raw = folded.get(name.lower())
        value = _at(arguments, path)
        argument = ".".join(path)
        if raw is not None and name.lower() in repeated:
            return _mismatch(f"{name} header appears more than once")
        if value is None:
            if raw is not None:
                return _mismatch(f"{name} header is present but the request body's {argument!r} "
                                 "argument is absent")
            continue
        rendered = _rendered(value)
        if rendered is None:
            if raw is not None:
                return _mismatch(f"{name} header does not match the request body's {argument!r} "
                                 "argument")
            continue
        if raw is None:
            return _mismatch(f"{name} header is missing but the request body's {argument!r} "
                             "argument is present")
        decoded = decode_header_value(raw)
        if decoded is None:
            return _mismatch(f"{name} header carries a malformed base64 sentinel value")
        if not _agrees(node.get("type"), value, rendered, decoded):
            return _mismatch(f"{name} header does not match the request body's {argument!r} argument")
    return None


def _mismatch(message: str) -> InboundLadderRejection:
    return InboundLadderRejection(HEADER_MISMATCH, message)


# -- the routing headers and the envelope ----------------------------------------------------------
_OWS = b" \t"


def without_ows(raw: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]] | None:
    """Raw (name, value) header pairs with the optional whitespace around each value removed, as
    RFC 9110 §5.5 reads a field value (the checks below take values already read so, as an HTTP
    server hands them on); None when no value has any."""
    if not any(v[:1] in (b" ", b"\t") or v[-1:] in (b" ", b"\t") for _, v in raw):
        return None
    return [(name, value.strip(_OWS)) for name, value in raw]


def find_duplicated_routing_header(headers: Iterable[tuple[str, str]]) -> str | None:
    """The routing header given more than once among raw (name, value) pairs, if any: readers of
    the first and of the last copy would disagree."""
    seen: set[str] = set()
    for name, _ in headers:
        key = name.lower()
        if key in _ROUTING_HEADERS:
            if key in seen:
                return key
            seen.add(key)
    return None


def unsupported_protocol_version_rejection(
        requested: str, supported_modern_versions: Sequence[str] = MODERN_PROTOCOL_VERSIONS
) -> InboundLadderRejection | None:
    """The refusal of a version this side does not serve (None when it does)."""
    if requested in supported_modern_versions:
        return None
    return InboundLadderRejection(UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version",
                                  {"supported": list(supported_modern_versions),
                                   "requested": requested})


def classify_inbound_request(body: Mapping[str, Any], *, headers: Mapping[str, str] | None = None,
                             supported_modern_versions: Sequence[str] = MODERN_PROTOCOL_VERSIONS
                             ) -> InboundModernRoute | InboundLadderRejection:
    """A 2026-07-28 request's envelope, checked in the spec's order, the first failure winning:
    `params._meta` carries the protocol version and client capabilities; over HTTP (`headers`, by
    lowercase name) the routing headers repeat the version, the method and the named target; the
    version is a string this side serves."""
    params = body.get("params")
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    if not isinstance(meta, Mapping):
        return InboundLadderRejection(INVALID_PARAMS, "params._meta must be an object carrying the "
                                      f"required {PROTOCOL_VERSION_META_KEY!r} and "
                                      f"{CLIENT_CAPABILITIES_META_KEY!r} envelope keys")
    missing = [k for k in (PROTOCOL_VERSION_META_KEY, CLIENT_CAPABILITIES_META_KEY) if k not in meta]
    if missing:
        return InboundLadderRejection(INVALID_PARAMS, "params._meta is missing the required "
                                      f"envelope key(s): {', '.join(missing)}")
    version = meta[PROTOCOL_VERSION_META_KEY]
    if headers is not None:
        disagreement = _headers_disagree(body, params, version, headers)
        if disagreement is not None:
            return _mismatch(disagreement)
    if not isinstance(version, str):  # a defect of shape, not a version to negotiate
        return InboundLadderRejection(INVALID_PARAMS,
                                      "the protocol-version envelope value must be a string")
    refused = unsupported_protocol_version_rejection(version, supported_modern_versions)
    if refused is not None:
        return refused
    return InboundModernRoute(version, meta.get(CLIENT_INFO_META_KEY),
                              meta[CLIENT_CAPABILITIES_META_KEY])


def _headers_disagree(body: Mapping[str, Any], params: Any, version: Any,
                      headers: Mapping[str, str]) -> str | None:
    said = headers.get(MCP_PROTOCOL_VERSION_HEADER)
    if said is None or said != version:  # absent is a mismatch even against a null version
        return f"{MCP_PROTOCOL_VERSION_HEADER} header does not match the request envelope's protocol version"
    method = body.get("method")
    if headers.get(MCP_METHOD_HEADER) != method:
        return f"{MCP_METHOD_HEADER} header does not match the request body's method"
    key = NAME_BEARING_METHODS.get(method) if isinstance(method, str) else None
    if key is not None:
        value = params.get(key)
        if value is not None and decode_header_value(headers.get(MCP_NAME_HEADER)) != value:
            return f"{MCP_NAME_HEADER} header does not match the request body's {key!r} parameter"
    return None
