"""The filtering client: wraps an `mcp.Client`, a `ClientSession` or a fastmcp `Client`.

`list_tools` returns every tool with its requirements (read from `execution.requirements`, else the
`_meta` mirror, which survives the SDKs' typed models) and the strict SEP-2487 filter applied in the
chosen mode; `call_tool` learns the unmet requirements of a denied call, hands the application its
SEP-2643 envelope, and echoes the envelope's context ID when the same call is made again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ListToolsResult, PaginatedRequestParams

from ..client import DENIAL_META_KEY, FilterMode, FilterResult, Knowledge, ToolVerdict, filter_tools
from ..client_denials import Denials, DeniedCall, OnDenial
from ..envelope import AuthorizationDenial, ContextIds
from ..toolset import every_page
from ..wire import raw_requirements
from ._calls import DENIAL_CODE, STEP_UP_META_KEY

__all__ = ["RequirementsClient", "ToolList", "authorization_denial_of", "denial_of", "missing_scopes_of"]


@dataclass(frozen=True, slots=True)
class ToolList:
    """One `tools/list` as the client sees it: `tools` (every tool, wire form, server order) and
    `filtered` (the strict verdicts and what the mode keeps)."""

    tools: tuple[dict[str, Any], ...]
    filtered: FilterResult

    @property
    def kept(self) -> list[dict[str, Any]]:
        """The tools to present, in presentation order."""
        return list(self.filtered.kept)

    @property
    def names(self) -> list[str]:
        return [str(t.get("name")) for t in self.filtered.kept]

    @property
    def verdicts(self) -> dict[str, ToolVerdict]:
        return {v.name: v for v in self.filtered.verdicts}

    def requirements(self, name: str) -> Any:
        """The raw requirements of tool `name` as found on the wire (None when absent)."""
        for tool in self.tools:
            if tool.get("name") == name:
                return raw_requirements(tool)
        return None


def denial_of(result: CallToolResult) -> dict[str, Any] | None:
    """The denial payload of a result (its structuredContent, or `_meta[DENIAL_META_KEY]` for a tool
    with an outputSchema), or None when it is not an `unmet_requirements` denial."""
    content = result.structured_content
    if content is None and isinstance(result.meta, Mapping):
        content = result.meta.get(DENIAL_META_KEY)
    if result.is_error and isinstance(content, dict) and content.get("error") == "unmet_requirements":
        return content
    return None


def authorization_denial_of(denial: CallToolResult | MCPError) -> AuthorizationDenial | None:
    """The SEP-2643 envelope of a denial (a result's `_meta`, or `data["_meta"]` of a JSON-RPC
    denial); None when there is none or it is malformed (then with a warning)."""
    if isinstance(denial, MCPError):
        data = denial.data if denial.code == DENIAL_CODE else None
        return AuthorizationDenial.from_meta(data.get("_meta") if isinstance(data, Mapping) else None)
    return AuthorizationDenial.from_meta(denial.meta) if denial.is_error else None


def missing_scopes_of(denial: CallToolResult | MCPError) -> list[str]:
    """The scopes a step-up should ask for, from a denial's `_meta` hint (empty when none): the
    result's `_meta`, or `data["_meta"]` of a JSON-RPC denial."""
    if isinstance(denial, MCPError):
        data = denial.data if denial.code == DENIAL_CODE else None
        meta = data.get("_meta") if isinstance(data, Mapping) else None
    else:
        meta = denial.meta
    hint = meta.get(STEP_UP_META_KEY) if isinstance(meta, Mapping) else None
    scope = hint.get("scope") if isinstance(hint, Mapping) else None
    return scope.split(" ") if isinstance(scope, str) and scope else []


class RequirementsClient:
    """Strict client-side handling of SEP-2487 requirements over a connected MCP client.

    `on_denial` hears every denied call as a `DeniedCall` (its unmet requirements and SEP-2643
    envelope: whether the caller can do anything, and the hints); `last_denial` is the latest one.
    """

    def __init__(self, client: Any, knowledge: Knowledge | None = None,
                 mode: FilterMode | str = FilterMode.HIDE, *, on_denial: OnDenial | None = None,
                 context_ids: ContextIds | None = None) -> None:
        self.client = client
        self.knowledge = knowledge if knowledge is not None else Knowledge()
        self.mode = FilterMode(mode)
        self.denials = Denials(self.knowledge, self._heard, context_ids)
        self._on_denial = on_denial
        self.last_denial: DeniedCall | None = None

    def _heard(self, denied: DeniedCall) -> None:
        self.last_denial = denied
        if self._on_denial is not None:
            self._on_denial(denied)

    async def list_tools(self, mode: FilterMode | str | None = None) -> ToolList:
        """Every page of `tools/list` (`toolset.every_page`: ListingError for a listing that
        cannot be read whole), with requirements, filtered in `mode` (default: the client's)."""
        async def page(cursor: str | None) -> object:
            listed = await self._list_page(cursor)
            return listed.model_dump(by_alias=True, mode="json", exclude_none=True)
        tools = await every_page(page)
        return ToolList(tuple(tools), filter_tools(tools, self.knowledge, mode or self.mode))

    async def _list_page(self, cursor: str | None) -> ListToolsResult:
        if hasattr(self.client, "list_tools_mcp"):  # fastmcp.Client
            result: ListToolsResult = await self.client.list_tools_mcp(cursor=cursor)
        elif isinstance(self.client, ClientSession):
            result = await self.client.list_tools(params=PaginatedRequestParams(cursor=cursor))
        else:  # mcp.Client
            result = await self.client.list_tools(cursor=cursor)
        return result

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None, *,
                        meta: Mapping[str, Any] | None = None) -> CallToolResult:
        """Call a tool (with `meta` as the request's `_meta`, plus the context ID of this very
        call's last denial); a denial (isError result or JSON-RPC error) teaches the knowledge its
        unmet requirements and reaches `on_denial`, then is returned (or re-raised) unchanged."""
        args = dict(arguments or {})
        sent = self.denials.request_meta(name, args, meta)
        try:
            if hasattr(self.client, "call_tool_mcp"):  # fastmcp.Client: the raw result, no raise
                result: CallToolResult = await self.client.call_tool_mcp(name, args, meta=sent)
            else:
                result = await self.client.call_tool(name, args, meta=sent)
        except MCPError as exc:
            if exc.code == DENIAL_CODE:  # `data["_meta"]` names the `error` ones, not learned
                self.denials.error(name, args, exc.data)
            raise
        # `error` and argument-dependent ones are not learned (SPEC §6)
        self.denials.result(name, args, denial_of(result), result.meta)
        return result

    def learned(self) -> Sequence[str]:
        """The requirements currently learned unsatisfiable from this server's denials."""
        return sorted(self.knowledge.learned())
