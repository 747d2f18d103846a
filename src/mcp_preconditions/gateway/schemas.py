"""The MCP SDK's per-version schemas (mcp_types), each version's module imported when a request or
a server of that version first needs it: a gateway whose clients all speak 2025-11-25 never loads
the 2026-07-28 models (3.4 MB of RSS). `mcp_types.methods` imports every version at once, so only
the modern path reads it; the tables below mirror it and test_gateway_schemas holds them equal.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from functools import cache
from types import ModuleType
from typing import Any

import mcp_types
from mcp_types.version import KNOWN_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

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
