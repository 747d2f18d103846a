"""The agent-framework adapters in isolation: how they read a tool, what annotate mode writes, bad
modes, and which results and errors teach the knowledge (the exclusions of `learn_denial`).
"""

from __future__ import annotations

import logging
from types import MappingProxyType
from typing import Any

import anyio
import pytest
from agents import Agent, RunContextWrapper, default_tool_error_function
from agents.mcp import MCPToolCustomDataContext, ToolFilterContext
from mcp.shared.exceptions import MCPError
from mcp_types import Tool
from pydantic_ai import RunContext
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import ExternalToolset
from pydantic_ai.usage import RunUsage

from mcp_preconditions.client import (
    ARGUMENT_DEPENDENT_META_KEY,
    DENIAL_ERRORS_META_KEY,
    Knowledge,
    ToolVerdict,
)
from mcp_preconditions.errors import InputError
from mcp_preconditions.integrations import openai_agents, pydantic_ai
from mcp_preconditions.integrations._calls import DENIAL_CODE
from mcp_preconditions.integrations.openai_agents import RequirementsFilter
from mcp_preconditions.integrations.pydantic_ai import RequirementsToolset, annotated
from mcp_preconditions.outcomes import Verdict
from mcp_preconditions.wire import META_KEY, raw_requirements

RUN = RunContextWrapper(context=None)
FILTER_CONTEXT = ToolFilterContext(run_context=RUN, agent=Agent(name="a"), server_name="s")
CTX = RunContext(deps=None, model=TestModel(), usage=RunUsage())


def denial(*unmet: str) -> dict[str, Any]:
    return {"error": "unmet_requirements", "tool": "t", "unmet": list(unmet), "withheld": 0}


def tool(meta: Any = None) -> Tool:
    return Tool.model_validate({"name": "t", "inputSchema": {"type": "object"}, "_meta": meta})


# --- reading a tool --------------------------------------------------------------------------------
@pytest.mark.parametrize(("meta", "found"), [
    (None, None),
    ({"other": 1}, None),
    ({META_KEY: ["env:a"], "other": 1}, ["env:a"]),
    ({META_KEY: "garbage"}, "garbage"),
])
def test_both_adapters_read_the_meta_mirror(meta: Any, found: Any) -> None:
    assert raw_requirements(openai_agents.wire_form(tool(meta))) == found
    definition = ToolDefinition(name="t", metadata=None if meta is None else {"meta": meta})
    assert pydantic_ai.wire_form(definition) == {"name": "t", "_meta": meta}
    assert raw_requirements(pydantic_ai.wire_form(definition)) == found


@pytest.mark.parametrize("garbage", ["env:a", [1], [""], {"env:a": True}])
def test_a_malformed_mirror_keeps_the_tool_with_a_warning(garbage: Any,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    knowledge = Knowledge(unsatisfiable=["env:a"])
    with caplog.at_level(logging.WARNING):
        assert RequirementsFilter(knowledge)(FILTER_CONTEXT, tool({META_KEY: garbage})) is True
        kept = anyio.run(RequirementsToolset(ExternalToolset([ToolDefinition(
            name="t", metadata={"meta": {META_KEY: garbage}})]), knowledge=knowledge).get_tools, CTX)
    assert list(kept) == ["t"]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2 and warnings[0] == warnings[1]
    assert warnings[0].startswith("tool 't': ") and warnings[0].endswith("; proceeding as if absent")


def test_the_filter_hides_only_a_known_failure() -> None:
    rf = RequirementsFilter(Knowledge(satisfied=["env:a"], unsatisfiable=["env:b"]))
    assert rf(FILTER_CONTEXT, tool({META_KEY: ["env:a", "env:b"]})) is False
    assert rf(FILTER_CONTEXT, tool({META_KEY: ["env:b", "env:c"]})) is True  # env:c unknown
    assert rf(FILTER_CONTEXT, tool({META_KEY: ["env:a"]})) is True
    assert rf(FILTER_CONTEXT, tool()) is True


# --- annotate mode and bad modes (pydantic-ai) -----------------------------------------------------
def test_annotated_appends_the_unsatisfiable_requirements() -> None:
    verdict = ToolVerdict("t", Verdict.WILL_FAIL, ("env:b", "env:c"))
    note = "[Will fail: the client knows these requirements are not met: env:b, env:c]"
    assert annotated("Does it.", verdict) == "Does it.\n\n" + note
    assert annotated(None, verdict) == note
    assert annotated("", verdict) == note


def test_an_unknown_mode_is_refused_when_the_toolset_is_built() -> None:
    with pytest.raises(InputError) as raised:
        RequirementsToolset(ExternalToolset([]), knowledge=Knowledge(), mode="Hide")
    assert str(raised.value) == "unknown filter mode 'Hide' (expected 'hide', 'demote' or 'annotate')"


def test_the_toolset_accepts_a_mode_by_name() -> None:
    assert RequirementsToolset(ExternalToolset([]), mode="annotate").mode == "annotate"


# --- learning (openai-agents hooks) ----------------------------------------------------------------
def result_context(structured: Any, is_error: bool | None, meta: Any = None) -> MCPToolCustomDataContext:
    """The context the Agents SDK gives its `custom_data_extractor` (read-only copies)."""
    return MCPToolCustomDataContext(
        run_context=RUN, server_name="s", tool_name="t", tool_display_name="t",
        arguments=MappingProxyType({}), tool_output="text", is_error=is_error,
        result_meta=None if meta is None else MappingProxyType(meta),
        structured_content=None if structured is None else MappingProxyType(structured))


def test_a_denied_result_is_learned_without_its_error_and_argument_dependent_requirements() -> None:
    rf = RequirementsFilter()
    meta = {DENIAL_ERRORS_META_KEY: ["state:down"], ARGUMENT_DEPENDENT_META_KEY: ["capability:x"]}
    rf.learn(result_context(denial("env:b", "state:down", "capability:x"), True, meta))
    assert rf.knowledge.learned() == {"env:b"}


@pytest.mark.parametrize(("structured", "is_error"), [
    (denial("env:b"), False),              # not an error result: nothing was denied
    (denial("env:b"), None),
    ({"error": "other", "unmet": ["env:b"]}, True),
    (None, True),
    ({"temperature": 20}, False),
])
def test_other_results_teach_nothing_and_log_nothing(structured: Any, is_error: bool | None,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    rf = RequirementsFilter()
    with caplog.at_level(logging.WARNING):
        rf.learn(result_context(structured, is_error))
    assert rf.knowledge.learned() == frozenset()
    assert caplog.records == []


def test_a_jsonrpc_denial_is_learned_then_answered_as_on_failure_does() -> None:
    rf = RequirementsFilter(on_failure=lambda _ctx, error: f"failed: {error}")
    data = {**denial("env:b", "state:down"), "_meta": {DENIAL_ERRORS_META_KEY: ["state:down"]}}
    error = MCPError(DENIAL_CODE, "denied", data)
    assert anyio.run(rf.failure_error_function, RUN, error) == "failed: denied"
    assert rf.knowledge.learned() == {"env:b"}


@pytest.mark.parametrize("error", [MCPError(-32602, "bad arguments", denial("env:b")),
                                   RuntimeError("boom"), ValueError("env:b")])
def test_other_failures_teach_nothing(error: Exception) -> None:
    async def answer(_ctx: RunContextWrapper[Any], exc: Exception) -> str:
        return f"async: {type(exc).__name__}"

    rf = RequirementsFilter(on_failure=answer)
    assert anyio.run(rf.failure_error_function, RUN, error) == f"async: {type(error).__name__}"
    assert rf.knowledge.learned() == frozenset()


def test_the_default_failure_answer_is_the_sdks() -> None:
    rf = RequirementsFilter()
    error = RuntimeError("secret detail")
    answer = anyio.run(rf.failure_error_function, RUN, error)
    # The SDK's own words, whatever its release says (0.25 dropped "Please try again."), and never
    # the exception's detail.
    assert answer == default_tool_error_function(RUN, error)
    assert "secret detail" not in answer


def test_server_options_wire_the_filter_the_hooks_and_the_echo() -> None:
    rf = RequirementsFilter()
    options = rf.server_options()
    assert options == {"tool_filter": rf, "custom_data_extractor": rf.learn,
                       "failure_error_function": rf.failure_error_function,
                       "tool_meta_resolver": rf.request_meta}


# --- one listing, one answer per requirement list -------------------------------------------------
def listing() -> ToolFilterContext:
    """A new context, as the SDK builds one for each listing."""
    return ToolFilterContext(run_context=RUN, agent=Agent(name="a"), server_name="s")


def test_a_new_listing_sees_what_was_learned_since_the_last() -> None:
    rf = RequirementsFilter(Knowledge(satisfied=["env:a"]))
    first = listing()
    assert rf(first, tool({META_KEY: ["env:a", "env:b"]})) is True  # env:b unknown
    rf.knowledge.learn_denial(denial("env:b"))
    # Within one listing the answer for a list stays as it was first given (one snapshot) ...
    assert rf(first, tool({META_KEY: ["env:a", "env:b"]})) is True
    # ... and the next listing reads the knowledge again.
    second = listing()
    assert rf(second, tool({META_KEY: ["env:a", "env:b"]})) is False
    assert rf(second, tool({META_KEY: ["env:b", "env:a"]})) is False  # another list, same verdict
    assert rf(second, tool({META_KEY: ["env:a"]})) is True


def test_malformed_lists_are_never_shared(caplog: pytest.LogCaptureFixture) -> None:
    rf = RequirementsFilter(Knowledge(unsatisfiable=["env:b"]))
    context = listing()
    with caplog.at_level(logging.WARNING):
        answers = [rf(context, tool({META_KEY: ["env:b", 1]})) for _ in range(2)]
    assert answers == [True, True]
    assert len(caplog.records) == 2
