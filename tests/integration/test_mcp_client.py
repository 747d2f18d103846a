"""The filtering client over real SDK clients (mcp.Client, its ClientSession, fastmcp's Client)
talking to a guarded server: requirements from tools/list, the strict filter in each mode, and
learning unmet requirements from denied calls (isError results and JSON-RPC errors).
"""

from __future__ import annotations

from typing import Any

import pytest
from fastmcp import Client as FastMCPClient
from mcp import Client
from mcp.shared.exceptions import MCPError

from mcp_preconditions.client import Knowledge
from mcp_preconditions.integrations.client_mcp import RequirementsClient, denial_of, missing_scopes_of
from mcp_preconditions.outcomes import Verdict
from tests.fixtures.mcp_servers import (
    DENIED,
    MODES,
    POLICY,
    VERSIONS,
    fastmcp_flavour,
    mcpserver_flavour,
    small_guard,
)

pytestmark = pytest.mark.integration

ALL = ["open_door", "closed_door", "from_policy"]


def knowing(**lists: list[str]) -> Knowledge:
    return Knowledge(lists.get("satisfied", []), lists.get("unsatisfiable", []))


@pytest.mark.parametrize("version", VERSIONS)
async def test_list_tools_returns_requirements_and_applies_each_mode(version: str) -> None:
    flavour = mcpserver_flavour(small_guard())
    knowledge = knowing(satisfied=["auth:scope:mission:write", "state:secret.door"],
                        unsatisfiable=["env:staging"])
    async with Client(flavour.target, mode=MODES[version]) as client:
        wrapped = RequirementsClient(client, knowledge)
        hidden = await wrapped.list_tools()
        demoted = await wrapped.list_tools("demote")
        annotated = await wrapped.list_tools("annotate")
    assert hidden.requirements("closed_door") == list(DENIED)
    assert hidden.requirements("from_policy") == ["env:production"]
    assert hidden.names == ["open_door", "from_policy"]
    assert hidden.filtered.hidden == (("closed_door", ("env:staging",)),)
    assert demoted.names == ["open_door", "from_policy", "closed_door"]
    assert annotated.names == ALL
    assert annotated.verdicts["closed_door"].verdict is Verdict.WILL_FAIL
    assert annotated.verdicts["open_door"].verdict is Verdict.PROCEED  # env:production unknown


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_denied_call_teaches_the_client(version: str) -> None:
    flavour = mcpserver_flavour(small_guard())
    knowledge = knowing(satisfied=["auth:scope:mission:write", "state:secret.door"])
    async with Client(flavour.target, mode=MODES[version]) as client:
        wrapped = RequirementsClient(client, knowledge)
        assert (await wrapped.list_tools()).names == ALL  # env:staging unknown: proceed
        denied = await wrapped.call_tool("closed_door")
        after = await wrapped.list_tools()
    assert denial_of(denied) == {"error": "unmet_requirements", "tool": "closed_door",
                                 "unmet": ["env:staging", "auth:scope:mission:write"], "withheld": 1}
    assert missing_scopes_of(denied) == ["mission:write"]
    assert wrapped.learned() == ["auth:scope:mission:write", "env:staging"]
    # Declared knowledge outranks what was learned; env:staging alone now fails the tool.
    assert after.names == ["open_door", "from_policy"]
    assert flavour.calls == []


async def test_learning_from_a_jsonrpc_denial_over_the_client_session() -> None:
    flavour = mcpserver_flavour(small_guard(POLICY + b'\n[guard]\ndenial = "jsonrpc"\n'))
    async with Client(flavour.target, mode="legacy") as client:
        wrapped = RequirementsClient(client.session, knowing())
        assert len((await wrapped.list_tools()).tools) == 3
        with pytest.raises(MCPError):
            await wrapped.call_tool("closed_door", {})
    assert wrapped.learned() == ["auth:scope:mission:write", "env:staging"]


async def test_the_wrapper_works_over_fastmcps_client() -> None:
    flavour = fastmcp_flavour(small_guard())
    async with FastMCPClient(flavour.app) as client:
        wrapped: Any = RequirementsClient(client, knowing(satisfied=["env:production"]))
        listed = await wrapped.list_tools()
        allowed = await wrapped.call_tool("open_door")
        denied = await wrapped.call_tool("closed_door")
    assert listed.requirements("open_door") == ["env:production"]
    assert listed.verdicts["open_door"].verdict is Verdict.PROCEED
    assert allowed.is_error is False
    assert denial_of(denied) is not None
    assert flavour.calls == ["open_door"]
    assert wrapped.learned() == ["auth:scope:mission:write", "env:staging"]
