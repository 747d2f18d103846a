"""Protocol versions: the MCP SDK's per-version schemas (mcp_types), and the few envelope fields
that differ between what the upstream speaks and what each downstream client negotiated
(2025-11-25 or 2026-07-28). Bodies are never touched.

Each version's module of models is imported when a request or a server of that version first
needs it: a gateway whose clients all speak 2025-11-25 never loads the 2026-07-28 models (3.4 MB of
RSS). `mcp_types.methods` imports every version at once, so only the modern path reads it; the
tables below mirror it and test_gateway_schemas holds them equal.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from functools import cache
from types import ModuleType
from typing import Any

import mcp_types
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    LOG_LEVEL_META_KEY,
    PROTOCOL_VERSION_META_KEY,
)
from mcp_types.version import KNOWN_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from .jsonrpc import INVALID_PARAMS, RpcError

_LEGACY_MODULE, _MODERN_MODULE = "mcp_types._v2025_11_25", "mcp_types._v2026_07_28"
# The request methods a client may send at each version, and their model's name in its module.
_SHARED = {"completion/complete": "CompleteRequest", "prompts/get": "GetPromptRequest",
           "prompts/list": "ListPromptsRequest", "resources/list": "ListResourcesRequest",
           "resources/read": "ReadResourceRequest", "tools/call": "CallToolRequest",
           "resources/templates/list": "ListResourceTemplatesRequest", "tools/list": "ListToolsRequest"}
LEGACY_REQUESTS: Mapping[str, str] = {
    **_SHARED, "initialize": "InitializeRequest", "logging/setLevel": "SetLevelRequest",
    "ping": "PingRequest", "resources/subscribe": "SubscribeRequest",
    "resources/unsubscribe": "UnsubscribeRequest"}
MODERN_REQUESTS: Mapping[str, str] = {
    **_SHARED, "server/discover": "DiscoverRequest", "subscriptions/listen": "SubscriptionsListenRequest"}
SPEC_CLIENT_METHODS = frozenset(LEGACY_REQUESTS) | frozenset(MODERN_REQUESTS)
# A server's requests to a client that the gateway relays, and their answers (the version-free
# models of `mcp_types`, as `mcp_types.methods.MONOLITH_REQUESTS` and `MONOLITH_RESULTS` give them).
SERVER_REQUESTS: Mapping[str, type[BaseModel]] = {
    "roots/list": mcp_types.ListRootsRequest, "sampling/createMessage": mcp_types.CreateMessageRequest,
    "elicitation/create": mcp_types.ElicitRequest}
SERVER_RESULTS: Mapping[str, Any] = {
    "roots/list": mcp_types.ListRootsResult, "elicitation/create": mcp_types.ElicitResult,
    "sampling/createMessage": mcp_types.CreateMessageResult | mcp_types.CreateMessageResultWithTools}


def version_module(version: str) -> ModuleType:
    """The module of `version`'s models (a known version; imported on first use)."""
    return importlib.import_module(_MODERN_MODULE if version in MODERN_PROTOCOL_VERSIONS
                                   else _LEGACY_MODULE)


@cache
def request_model(method: str, version: str) -> type[BaseModel]:
    """The model of `method`'s request at `version`; KeyError when that version has no such
    request (finitely many pairs are cached: a method outside the tables raises first)."""
    names = MODERN_REQUESTS if version in MODERN_PROTOCOL_VERSIONS else LEGACY_REQUESTS
    model: type[BaseModel] = getattr(version_module(version), names[method])
    return model


def validate_client_request(method: str, version: str, params: Mapping[str, Any] | None) -> None:
    """As `mcp_types.methods.validate_client_request`: ValueError for an unknown version,
    KeyError for a method the version lacks, pydantic's ValidationError for a malformed body."""
    if version not in KNOWN_PROTOCOL_VERSIONS:
        raise ValueError(f"version must be a known protocol version, got {version!r}")
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": 0, "method": method}
    if params is not None:
        body["params"] = params
    request_model(method, version).model_validate(body, by_name=False)


def is_input_required(result: object) -> bool:
    """As `mcp_types.methods.is_input_required`: an `input_required` interim result."""
    if isinstance(result, mcp_types.InputRequiredResult):
        return True
    return isinstance(result, Mapping) and result.get("resultType") == "input_required"


@cache
def input_required_methods() -> frozenset[str]:
    """The methods whose results may ask for input (read on the 2026-07-28 path only)."""
    from mcp_types.methods import INPUT_REQUIRED_METHODS
    return INPUT_REQUIRED_METHODS


@cache
def cacheable_methods() -> frozenset[str]:
    """The methods whose 2026-07-28 results carry cache hints (read on that path only)."""
    from mcp_types.methods import CACHEABLE_METHODS
    return CACHEABLE_METHODS


# Per-request `_meta` keys of the 2026-07-28 envelope: the gateway's own upstream session stamps
# its own; a downstream client's would claim a version and capabilities the upstream never agreed.
# `progressToken` is replaced by the upstream session's own token (progress is mapped back).
_ENVELOPE_META = frozenset({PROTOCOL_VERSION_META_KEY, CLIENT_INFO_META_KEY,
                            CLIENT_CAPABILITIES_META_KEY, LOG_LEVEL_META_KEY, "progressToken"})
# Result fields that exist only at 2026-07-28 (completion marker and cache hints).
_MODERN_RESULT_FIELDS = ("resultType", "ttlMs", "cacheScope")
# "Resource not found" as 2025-11-25 servers say it; 2026-07-28 says -32602 (SEP-2164).
LEGACY_RESOURCE_NOT_FOUND = -32002


def is_modern(version: str) -> bool:
    return version in MODERN_PROTOCOL_VERSIONS


def upstream_params(params: Mapping[str, Any] | None, *, modern: bool = True
                    ) -> dict[str, Any] | None:
    """A downstream request's params as sent upstream: envelope `_meta` keys removed (and, for
    an upstream older than 2026-07-28, the input-round fields it does not know), the rest kept."""
    if params is None:
        return None
    out = dict(params)
    if not modern:
        out.pop("inputResponses", None)
        out.pop("requestState", None)
    meta = out.get("_meta")
    if isinstance(meta, Mapping):
        kept = {k: v for k, v in meta.items() if k not in _ENVELOPE_META}
        if kept:
            out["_meta"] = kept
        else:
            del out["_meta"]
    return out


def progress_token(params: Mapping[str, Any] | None) -> str | int | None:
    meta = params.get("_meta") if params is not None else None
    token = meta.get("progressToken") if isinstance(meta, Mapping) else None
    return token if isinstance(token, str | int) and not isinstance(token, bool) else None


def downstream_result(method: str, result: Mapping[str, Any], version: str) -> dict[str, Any]:
    """An upstream result shaped for a client at `version`: 2026-07-28 requires `resultType`, and
    cache hints on the cacheable methods (filled as "do not cache" when the upstream, at an older
    version, gave none); an older client must not see fields its version does not define."""
    out = dict(result)
    if is_modern(version):
        out.setdefault("resultType", "complete")
        if method in cacheable_methods() and not is_input_required(out):  # interim: never cached
            out.setdefault("ttlMs", 0)
            out.setdefault("cacheScope", "private")
    else:
        for key in _MODERN_RESULT_FIELDS:
            out.pop(key, None)
    return out


def downstream_error(error: RpcError, params: Mapping[str, Any] | None, version: str) -> RpcError:
    """A server's error to a `resources/read` shaped for a client at `version`: at 2026-07-28 a
    resource that does not exist is -32602 with its URI in `data` (SEP-2164), where 2025-11-25
    servers answered -32002. Any other error is the server's own, as it sent it."""
    if error.code != LEGACY_RESOURCE_NOT_FOUND or not is_modern(version):
        return error
    data = dict(error.data) if isinstance(error.data, Mapping) else {}
    uri = (params or {}).get("uri")
    if isinstance(uri, str):
        data.setdefault("uri", uri)
    return RpcError(INVALID_PARAMS, error.message, data or None)


def downstream_capabilities(upstream: Mapping[str, Any], version: str) -> dict[str, Any]:
    """The upstream's capabilities as a client at `version` may see them. At 2026-07-28 change
    notifications ride `subscriptions/listen`, which the gateway serves for every version."""
    model = version_module(version).ServerCapabilities
    caps: dict[str, Any] = model.model_validate(dict(upstream)).model_dump(
        by_alias=True, mode="json", exclude_none=True)
    # The gateway itself serves tools (even when the upstream has none, a call is refused cleanly)
    # and tells its clients when the list changes (upstream list_changed, policy reloads).
    tools = dict(caps.get("tools") or {})
    tools["listChanged"] = True
    caps["tools"] = tools
    return caps


def union_capabilities(each: list[dict[str, Any]]) -> dict[str, Any]:
    """The capabilities of several servers as one (SPEC §12): every capability any of them has;
    within one, every flag any of them sets."""
    out: dict[str, Any] = {}
    for caps in each:
        for name, value in caps.items():
            if isinstance(value, dict) and isinstance(out.get(name), dict):
                merged = dict(out[name])
                for flag, on in value.items():
                    merged[flag] = merged.get(flag) or on
                out[name] = merged
            elif name not in out:
                out[name] = value
    return out
