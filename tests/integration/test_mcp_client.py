"""The filtering client over real SDK clients (mcp.Client, its ClientSession, fastmcp's Client)
talking to a guarded server: requirements from tools/list, the strict filter in each mode, and
learning unmet requirements from denied calls (isError results and JSON-RPC errors).
"""

from __future__ import annotations

from typing import Any

import pytest
from fastmcp import Client as FastMCPClient
from fastmcp import FastMCP
from mcp import Client
from mcp.shared.exceptions import MCPError

from mcp_preconditions import CallContext, Guard, parse_policy
from mcp_preconditions.client import DENIAL_ERRORS_META_KEY, Knowledge
from mcp_preconditions.envelope import AUTHORIZATION_META_KEY, Remediation
from mcp_preconditions.integrations.client_mcp import (
    RequirementsClient,
    authorization_denial_of,
    denial_of,
    missing_scopes_of,
)
from mcp_preconditions.integrations.fastmcp import guard_fastmcp
from mcp_preconditions.integrations.mcp_sdk import GuardedMCPServer
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
    assert hidden.requirements("closed_door") == list(DENIED[:2])  # the confidential one unshown
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


# --- requirements that ended as `error` are named in `_meta`, and never learned -------------------
class Down:
    """`zz:` resolver whose backend is down."""

    namespace = "zz"

    def validate(self, requirement: str) -> str | None:
        return None

    def resolve(self, requirement: str, context: CallContext) -> bool:
        raise ConnectionError("backend down")


PROBE = ["zz:down", "zz:secret", "env:staging"]
ERRORS_POLICY = b'environment = ["production"]\nconfidential = ["zz:secret"]\n'


def probe_server(flavour: str, denial: str, ran: list[str]) -> Any:
    guard = Guard(parse_policy(ERRORS_POLICY + f'[guard]\ndenial = "{denial}"\n'.encode(), "p.toml"),
                  resolvers=[Down()], entry_points=False)

    def probe() -> str:
        ran.append("probe")
        return "ran"

    if flavour == "MCPServer":
        server = GuardedMCPServer("s", guard=guard)
        server.tool(requirements=PROBE, structured_output=False)(probe)
        return server
    app: FastMCP[Any] = FastMCP("s")
    app.tool(output_schema=None)(guard_fastmcp(app, guard).requires(*PROBE)(probe))
    return app._mcp_server


@pytest.mark.parametrize("flavour", ["MCPServer", "fastmcp"])
@pytest.mark.parametrize("version", VERSIONS)
async def test_a_denial_names_its_error_requirements_in_meta(flavour: str, version: str) -> None:
    ran: list[str] = []
    async with Client(probe_server(flavour, "result", ran), mode=MODES[version]) as client:
        wrapped = RequirementsClient(client, knowing())
        denied = await wrapped.call_tool("probe")
    assert denied.structured_content == {"error": "unmet_requirements", "tool": "probe",
                                         "unmet": ["zz:down", "env:staging"], "withheld": 1}
    assert denied.meta is not None
    assert denied.meta[DENIAL_ERRORS_META_KEY] == ["zz:down"]  # zz:secret is confidential
    assert wrapped.learned() == ["env:staging"]
    assert ran == []


@pytest.mark.parametrize("flavour", ["MCPServer", "fastmcp"])
async def test_a_jsonrpc_denial_carries_the_same_meta_in_data(flavour: str) -> None:
    ran: list[str] = []
    async with Client(probe_server(flavour, "jsonrpc", ran)) as client:
        wrapped = RequirementsClient(client, knowing())
        with pytest.raises(MCPError) as raised:
            await wrapped.call_tool("probe")
    envelope = authorization_denial_of(raised.value)  # withheld one: undisclosed, no hints
    assert envelope is not None and envelope.remediation is Remediation.UNDISCLOSED
    assert raised.value.data == {"error": "unmet_requirements", "tool": "probe",
                                 "unmet": ["zz:down", "env:staging"], "withheld": 1,
                                 "_meta": {AUTHORIZATION_META_KEY: envelope.to_dict(),
                                           DENIAL_ERRORS_META_KEY: ["zz:down"]}}
    assert missing_scopes_of(raised.value) == []
    assert wrapped.learned() == ["env:staging"]
    assert ran == []


async def test_missing_scopes_are_read_from_a_jsonrpc_denial() -> None:
    flavour = mcpserver_flavour(small_guard(POLICY + b'\n[guard]\ndenial = "jsonrpc"\n'))
    async with Client(flavour.target) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("closed_door", {})
    assert missing_scopes_of(raised.value) == ["mission:write"]
