"""A server's tool whose `x-mcp-header` annotations are invalid is left out of the gateway's
catalog (SEP-2243: a client MUST exclude it, and keep the valid ones), so it is neither listed to
callers nor routed; the operator is told once why (the conformance suite's client scenario
`http-invalid-tool-headers`)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from mcp_preconditions.gateway.catalog import Catalog

pytestmark = pytest.mark.anyio


def tool(name: str, properties: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "inputSchema": {"type": "object", "properties": properties}}


LISTING = [
    tool("valid_tool", {"region": {"type": "string", "x-mcp-header": "Region"}}),
    tool("plain", {"a": {"type": "integer"}}),
    tool("invalid_empty_header", {"value": {"type": "string", "x-mcp-header": ""}}),
    tool("invalid_number_header", {"score": {"type": "number", "x-mcp-header": "Score"}}),
    tool("invalid_duplicate_diff_case", {"f1": {"type": "string", "x-mcp-header": "MyField"},
                                         "f2": {"type": "string", "x-mcp-header": "myfield"}}),
    tool("invalid_space_in_name", {"value": {"type": "string", "x-mcp-header": "My Region"}}),
]


async def test_invalid_x_mcp_header_tools_are_left_out_and_the_valid_ones_kept(
        caplog: pytest.LogCaptureFixture) -> None:
    async def fetch(_method: str, _key: str) -> list[dict[str, Any]]:
        return LISTING

    catalog = Catalog("crm", fetch, lambda: None, lambda: None)
    with caplog.at_level(logging.WARNING, logger="mcp_preconditions.gateway"):
        await catalog.listings["tools"].refresh()
        await catalog.listings["tools"].refresh()  # the same listing again: warned once per tool
    assert sorted(catalog.tools) == ["plain", "valid_tool"]
    assert catalog.names("tools") == ["valid_tool", "plain"]  # what the routes are built from
    warned = [r.getMessage() for r in caplog.records if "x-mcp-header" in r.getMessage()]
    assert len(warned) == 4
    assert warned[0].startswith("server crm lists the tool 'invalid_empty_header' with an invalid "
                                "x-mcp-header (")
    assert warned[0].endswith("): it is left out (SEP-2243)")
