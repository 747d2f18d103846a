"""`denial_of`: a denial's payload from structuredContent, or from `_meta` for a tool with an
outputSchema (the gateway moves it there so schema-validating clients still show the denial)."""

from __future__ import annotations

from mcp_types import CallToolResult, TextContent

from mcp_preconditions import Knowledge
from mcp_preconditions.client import DENIAL_META_KEY
from mcp_preconditions.integrations.client_mcp import denial_of

PAYLOAD = {"error": "unmet_requirements", "tool": "convert_time", "unmet": ["env:staging"],
           "withheld": 0}
TEXT = [TextContent(type="text", text="Tool 'convert_time' was not run: unmet requirements: env:staging.")]


def test_the_payload_under_meta_is_read_and_learned() -> None:
    result = CallToolResult(content=TEXT, is_error=True, _meta={DENIAL_META_KEY: PAYLOAD})
    assert denial_of(result) == PAYLOAD
    knowledge = Knowledge()
    assert knowledge.learn_denial(denial_of(result), meta=result.meta) == ("env:staging",)


def test_structured_content_wins_and_non_errors_are_no_denials() -> None:
    assert denial_of(CallToolResult(content=TEXT, is_error=True, structured_content=PAYLOAD)) == PAYLOAD
    assert denial_of(CallToolResult(content=TEXT, is_error=False, _meta={DENIAL_META_KEY: PAYLOAD})) is None
    assert denial_of(CallToolResult(content=TEXT, is_error=True, _meta={DENIAL_META_KEY: "x"})) is None
