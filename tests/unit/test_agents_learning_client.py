"""pydantic-ai's `LearningClient` against an in-process fastmcp server whose tools answer with
hand-made results: which results teach the knowledge (a denial, minus its `error` and
argument-dependent requirements) and which teach nothing (other errors, successes, garbage).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from fastmcp import FastMCP
from fastmcp.tools import ToolResult

from mcp_preconditions.client import ARGUMENT_DEPENDENT_META_KEY, DENIAL_ERRORS_META_KEY, Knowledge
from mcp_preconditions.integrations.pydantic_ai import LearningClient

DENIAL = {"error": "unmet_requirements", "tool": "t",
          "unmet": ["env:staging", "state:down", "capability:x"], "withheld": 0}
RESULTS: dict[str, ToolResult] = {
    "denied": ToolResult(content="denied", structured_content=DENIAL, is_error=True, meta={
        DENIAL_ERRORS_META_KEY: ["state:down"], ARGUMENT_DEPENDENT_META_KEY: ["capability:x"]}),
    "failed": ToolResult(content="boom", structured_content={"error": "other", "unmet": ["env:a"]},
                         is_error=True),
    "not_an_error": ToolResult(content="ok", structured_content=DENIAL),
    "plain": ToolResult(content="ok"),
}


def server() -> FastMCP[Any]:
    app: FastMCP[Any] = FastMCP("hand-made")
    for name, result in RESULTS.items():
        app.tool(name=name, output_schema=None)(lambda result=result: result)
    return app


async def test_a_denial_teaches_all_but_its_error_and_argument_dependent_requirements() -> None:
    knowledge = Knowledge()
    async with LearningClient(server(), knowledge=knowledge) as client:
        result = await client.call_tool_mcp("denied", {})
    assert result.is_error and result.structured_content == DENIAL
    assert knowledge.learned() == {"env:staging"}


@pytest.mark.parametrize("name", ["failed", "not_an_error", "plain"])
async def test_other_results_teach_nothing_and_pass_through(name: str,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    knowledge = Knowledge()
    with caplog.at_level(logging.WARNING, logger="mcp_preconditions"):
        async with LearningClient(server(), knowledge=knowledge) as client:
            result = await client.call_tool_mcp(name, {})
    assert result.is_error is RESULTS[name].is_error
    assert knowledge.learned() == frozenset()
    assert caplog.records == []
