"""The three guarded server flavours (MCPServer, lowlevel Server, fastmcp) driven in-process by the
MCP SDK's own client, on protocol 2025-11-25 and 2026-07-28: requirements on the wire, the guard
before the handler, both denial forms, list filtering, and start-up validation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastmcp import FastMCP
from mcp import Client
from mcp.shared.exceptions import MCPError

from mcp_preconditions.envelope import AUTHORIZATION_META_KEY, AuthorizationDenial, Remediation
from mcp_preconditions.errors import RequirementError
from mcp_preconditions.guard import Guard
from mcp_preconditions.integrations._calls import DENIAL_CODE, STEP_UP_META_KEY
from mcp_preconditions.integrations.fastmcp import guard_fastmcp
from mcp_preconditions.integrations.mcp_sdk import GuardedMCPServer, guard_server, requires
from mcp_preconditions.wire import META_KEY
from tests.fixtures.mcp_servers import (
    DENIED,
    FLAVOURS,
    MODES,
    POLICY,
    VERSIONS,
    Flavour,
    lowlevel_flavour,
    raw_tools,
    small_guard,
)

pytestmark = pytest.mark.integration

DENIAL = {"error": "unmet_requirements", "tool": "closed_door",
          "unmet": ["env:staging", "auth:scope:mission:write"], "withheld": 1}
DENIAL_TEXT = ("Tool 'closed_door' was not run: unmet requirements: env:staging, "
               "auth:scope:mission:write (+1 withheld). Missing scopes: mission:write.")
KNOWN = "known namespaces: 'approval', 'auth', 'capability', 'env', 'feature', 'pdp', 'quota', 'state'"


@pytest.fixture(params=list(FLAVOURS))
def make(request: pytest.FixtureRequest) -> Callable[..., Flavour]:
    factory: Callable[..., Flavour] = FLAVOURS[request.param]
    return factory


def text_of(result: Any) -> str:
    return " ".join(c.text for c in result.content)


@pytest.mark.parametrize("version", VERSIONS)
async def test_tools_list_carries_requirements_and_mirror_on_the_wire(
        make: Callable[..., Flavour], version: str) -> None:
    flavour = make(small_guard())
    async with Client(flavour.target, mode=MODES[version]) as client:
        assert client.protocol_version == version
        wire = {t["name"]: t for t in await raw_tools(client.session)}
        typed = {t.name: t for t in (await client.list_tools()).tools}
    assert wire["open_door"]["execution"]["requirements"] == ["env:production"]
    assert wire["open_door"]["_meta"][META_KEY] == ["env:production"]
    # The confidential `state:secret.door` is enforced but never advertised (SPEC §3).
    assert wire["closed_door"]["execution"]["requirements"] == list(DENIED[:2])
    assert wire["closed_door"]["_meta"][META_KEY] == list(DENIED[:2])
    # Requirements from the policy's per-tool list reach the wire too (code ∪ policy).
    assert wire["from_policy"]["execution"]["requirements"] == ["env:production"]
    # The SDK's typed models drop the field; the _meta mirror survives them.
    assert typed["closed_door"].meta is not None
    assert typed["closed_door"].meta[META_KEY] == list(DENIED[:2])
    assert typed["closed_door"].execution is None or "requirements" not in typed[
        "closed_door"].execution.model_dump()


@pytest.mark.parametrize("version", VERSIONS)
async def test_the_handler_runs_only_when_every_requirement_holds(
        make: Callable[..., Flavour], version: str) -> None:
    flavour = make(small_guard())
    async with Client(flavour.target, mode=MODES[version]) as client:
        allowed = await client.call_tool("open_door", {})
        denied = await client.call_tool("closed_door", {})
        from_policy = await client.call_tool("from_policy", {})
    assert allowed.is_error is False
    assert from_policy.is_error is False
    assert flavour.calls == ["open_door", "from_policy"]  # closed_door's handler never ran
    assert denied.is_error is True
    assert denied.structured_content == DENIAL  # state:secret.door is confidential: withheld
    assert text_of(denied) == DENIAL_TEXT
    assert denied.meta is not None
    assert denied.meta[STEP_UP_META_KEY] == {"error": "insufficient_scope", "scope": "mission:write"}


@pytest.mark.parametrize("version", VERSIONS)
async def test_jsonrpc_denial_mode_answers_with_an_error_carrying_the_payload(
        make: Callable[..., Flavour], version: str) -> None:
    flavour = make(small_guard(POLICY + b'\n[guard]\ndenial = "jsonrpc"\n'))
    async with Client(flavour.target, mode=MODES[version]) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("closed_door", {})
        assert (await client.call_tool("open_door", {})).is_error is False
    assert raised.value.code == DENIAL_CODE
    assert raised.value.message == DENIAL_TEXT
    # `data` is the structuredContent, plus the result's `_meta`: the SEP-2643 envelope (a
    # confidential requirement is unmet: `undisclosed`, no hints) and the step-up hint.
    envelope = AuthorizationDenial.from_meta(raised.value.data["_meta"])
    assert envelope is not None and envelope.remediation is Remediation.UNDISCLOSED
    assert envelope.hints == () and envelope.context_id.startswith("authzctx_")
    assert raised.value.data == {**DENIAL, "_meta": {
        AUTHORIZATION_META_KEY: envelope.to_dict(),
        STEP_UP_META_KEY: {"error": "insufficient_scope", "scope": "mission:write"}}}
    assert flavour.calls == ["open_door"]


@pytest.mark.parametrize("version", VERSIONS)
async def test_list_filtering_hides_what_this_caller_cannot_call(
        make: Callable[..., Flavour], version: str) -> None:
    flavour = make(small_guard(POLICY + b"\n[guard]\nlist_filtering = true\n"))
    async with Client(flavour.target, mode=MODES[version]) as client:
        names = [t["name"] for t in await raw_tools(client.session)]
    assert names == ["open_door", "from_policy"]


async def test_list_filtering_is_off_unless_the_policy_or_code_turns_it_on() -> None:
    flavour = lowlevel_flavour(small_guard(), list_filtering=True)
    async with Client(flavour.target, mode="legacy") as client:
        assert [t["name"] for t in await raw_tools(client.session)] == ["open_door", "from_policy"]
    flavour = lowlevel_flavour(small_guard())
    async with Client(flavour.target, mode="legacy") as client:
        assert len(await raw_tools(client.session)) == 3


# --- start-up validation: a bad requirement refuses to start, naming the tool and requirement ---
def test_mcpserver_refuses_a_tool_with_a_bad_requirement() -> None:
    server = GuardedMCPServer("x", guard=small_guard())
    with pytest.raises(RequirementError) as raised:
        @server.tool(requirements=["envproduction"])
        def launch() -> str:
            return "never"
    assert str(raised.value) == (f"tool 'launch': requirement 'envproduction' has no namespace "
                                 f"(expected NAMESPACE:..., {KNOWN})")
    assert server._tool_manager.get_tool("launch") is None  # not half-registered


def test_requires_decorator_is_validated_at_registration() -> None:
    server = GuardedMCPServer("x", guard=small_guard())
    with pytest.raises(RequirementError) as raised:
        @server.tool()
        @requires("env:production")
        @requires("weather:sunny")
        def launch() -> str:
            return "never"
    assert str(raised.value) == (f"tool 'launch': requirement 'weather:sunny': unknown namespace "
                                 f"'weather' ({KNOWN})")


async def test_requires_decorators_add_up_top_to_bottom() -> None:
    server = GuardedMCPServer("x", guard=small_guard())

    @server.tool(requirements=["auth:oauth2"])
    @requires("env:production")
    @requires("feature:launch")
    def launch() -> str:
        return "go"

    assert server.guard.requirements_for("launch") == ("auth:oauth2", "env:production",
                                                       "feature:launch")


def test_preconditions_requires_also_works_under_a_guarded_mcpserver_tool() -> None:
    server = GuardedMCPServer("x", guard=small_guard())

    @server.tool()
    @server.preconditions.requires("env:production")
    @requires("feature:launch")
    def launch() -> str:
        return "go"

    assert server.guard.requirements_for("launch") == ("env:production", "feature:launch")


def test_lowlevel_server_refuses_a_bad_requirement() -> None:
    from mcp.server.lowlevel.server import Server

    with pytest.raises(RequirementError) as raised:
        guard_server(Server("x"), small_guard(), requirements={"launch": ["auth:claim:role"]})
    assert str(raised.value) == (
        "tool 'launch': requirement 'auth:claim:role': auth:claim: needs a claim name and a value "
        "(auth:claim:NAME:VALUE) (accepted forms: auth:oauth2, auth:claim:NAME:VALUE, "
        "auth:scope:SCOPE)")


def test_fastmcp_refuses_a_bad_requirement() -> None:
    app: FastMCP[Any] = FastMCP("x")
    pre = guard_fastmcp(app, small_guard())
    with pytest.raises(RequirementError) as raised:
        @app.tool
        @pre.requires("")
        def launch() -> str:
            return "never"
    assert str(raised.value) == "tool 'launch': requirement #0 is empty"


def test_a_policy_with_a_bad_tool_requirement_refuses_to_start() -> None:
    from mcp_preconditions.policy.load import parse_policy

    with pytest.raises(RequirementError) as raised:
        Guard(parse_policy(b'[tools.launch]\nrequirements = ["env"]\n', "p.toml"),
              entry_points=False)
    assert str(raised.value) == (f"p.toml: tool 'launch': requirement 'env' has no namespace "
                                 f"(expected NAMESPACE:..., {KNOWN})")


async def test_a_hosted_tool_with_an_output_schema_gets_its_denial_under_meta() -> None:
    """SPEC §3: a tool that declares an outputSchema gets the gateway's denial shape (payload under
    `_meta`, no structuredContent a strict client would validate against the schema)."""
    from mcp_preconditions.client import DENIAL_META_KEY
    from mcp_preconditions.integrations.client_mcp import denial_of

    guard = small_guard()
    server = GuardedMCPServer("typed", guard=guard)

    @server.tool(requirements=["env:staging"])
    def report() -> dict[str, int]:
        return {"count": 1}

    app: FastMCP[Any] = FastMCP("typed")
    guard_fastmcp(app, small_guard())

    @app.tool(output_schema={"type": "object", "properties": {"count": {"type": "integer"}}})
    @requires("env:staging")
    def report_too() -> dict[str, int]:
        return {"count": 1}

    for target, name in ((server, "report"), (app._mcp_server, "report_too")):
        async with Client(target) as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            assert listed[name].output_schema is not None
            denied = await client.call_tool(name, {})
        payload = {"error": "unmet_requirements", "tool": name, "unmet": ["env:staging"], "withheld": 0}
        assert (denied.is_error, denied.structured_content) == (True, None)
        assert denied.meta is not None and denied.meta[DENIAL_META_KEY] == payload
        assert denial_of(denied) == payload
