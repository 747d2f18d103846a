"""`RequirementsClient` reading SEP-2643 envelopes (SPEC §15), for both denial forms and both
protocol versions: the guard's own (a real guarded server: the envelope reaches the application
typed, its context ID is echoed once when the same call is retried and the server's decision
record names the echo, a url hint only when the client declared URL elicitation), and, where no
real server makes one yet, a real MCP SDK server's hand-built ones (`approval:` / `credential:`
never learned, a malformed envelope ignored with a warning).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import mcp_types
import pytest
from fastmcp import FastMCP
from mcp import Client
from mcp.shared.exceptions import MCPError

from mcp_preconditions.client import Knowledge
from mcp_preconditions.client_denials import DeniedCall
from mcp_preconditions.denials import SCOPE_DETAILS_TYPE
from mcp_preconditions.envelope import Remediation
from mcp_preconditions.guard import Guard
from mcp_preconditions.integrations.client_mcp import RequirementsClient, authorization_denial_of
from mcp_preconditions.integrations.fastmcp import guard_fastmcp
from mcp_preconditions.integrations.mcp_sdk import GuardedMCPServer
from mcp_preconditions.policy.load import parse_policy
from mcp_preconditions.principal import Credentials, Principal
from tests.fixtures.envelope_server import URL, build
from tests.fixtures.mcp_servers import MODES, VERSIONS
from tests.fixtures.signoff_resolver import PAGES, Signoffs

pytestmark = pytest.mark.integration

GUARDED = b"""environment = ["staging"]
[tools.write_note]
requirements = ["auth:scope:notes:write", "env:staging"]
[tools.deploy]
requirements = ["env:production", "signoff:release"]
"""
READER = Credentials(principal=Principal.from_claims({"sub": "ada", "scope": "notes:read"}))


def guard(denial: str = "result") -> Guard:
    policy = GUARDED + (f'[guard]\ndenial = "{denial}"\n'.encode())
    return Guard(parse_policy(policy, "policy.toml"), resolvers=[Signoffs()], entry_points=False)


def guarded(denial: str = "result") -> GuardedMCPServer:
    server = GuardedMCPServer("guarded", guard=guard(denial), credentials=lambda _request: READER)

    @server.tool(structured_output=False)
    def write_note(text: str) -> str:
        return f"noted {text}"

    @server.tool(structured_output=False)
    def deploy(env: str) -> str:
        return f"deployed {env}"

    return server


def guarded_fastmcp() -> Any:
    """A FastMCP app, guarded, as the SDK's client reaches it in-process (its lowlevel server)."""
    app: FastMCP[Any] = FastMCP("guarded")
    guard_fastmcp(app, guard(), credentials=lambda _request: READER)

    @app.tool
    def deploy(env: str) -> str:
        return f"deployed {env}"

    return app._mcp_server


async def _decline(_ctx: Any, _params: Any) -> mcp_types.ElicitResult:
    return mcp_types.ElicitResult(action="decline")


def records(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == "mcp_preconditions.decisions"]


@pytest.mark.parametrize("version", VERSIONS)
async def test_the_guards_own_envelope_reaches_the_application_and_its_echo_is_recorded(
        version: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mcp_preconditions.decisions")
    heard: list[DeniedCall] = []
    async with Client(guarded(), mode=MODES[version]) as client:
        wrapped = RequirementsClient(client, Knowledge(), on_denial=heard.append)
        first = await wrapped.call_tool("write_note", {"text": "hi"})
        retry = await wrapped.call_tool("write_note", {"text": "hi"})  # echoes first's ID, once
    envelope, again = authorization_denial_of(first), authorization_denial_of(retry)
    assert envelope is not None and again is not None and retry.is_error  # the echo granted nothing
    assert envelope.remediation is Remediation.AVAILABLE and envelope.urls == ()
    assert envelope.authorization_details == ({"type": SCOPE_DETAILS_TYPE, "scopes": ["notes:write"]},)
    assert [d.context_id for d in heard] == [envelope.context_id, again.context_id]
    assert envelope.context_id != again.context_id
    assert [(r["tool"], r["context_id"], r.get("echoed_context_id")) for r in records(caplog)] == [
        ("write_note", envelope.context_id, None),
        ("write_note", again.context_id, envelope.context_id)]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("declared", [True, False])
@pytest.mark.parametrize("flavour", ["MCPServer", "fastmcp"])
async def test_a_url_hint_reaches_only_a_client_that_declared_url_elicitation(
        flavour: str, version: str, declared: bool) -> None:
    options: dict[str, Any] = {"elicitation_callback": _decline} if declared else {}
    server = guarded() if flavour == "MCPServer" else guarded_fastmcp()
    async with Client(server, mode=MODES[version], **options) as client:
        wrapped = RequirementsClient(client, Knowledge())
        denied = await wrapped.call_tool("deploy", {"env": "prod"})
    envelope = authorization_denial_of(denied)
    assert envelope is not None and wrapped.last_denial is not None
    assert wrapped.last_denial.envelope == envelope
    if declared:
        assert (envelope.remediation, envelope.urls) == (Remediation.AVAILABLE, (PAGES + "release",))
    else:
        assert (envelope.remediation, envelope.hints) == (Remediation.UNDISCLOSED, ())


async def test_the_guards_jsonrpc_denial_carries_its_envelope() -> None:
    heard: list[DeniedCall] = []
    async with Client(guarded("jsonrpc")) as client:
        wrapped = RequirementsClient(client, Knowledge(), on_denial=heard.append)
        with pytest.raises(MCPError) as info:
            await wrapped.call_tool("write_note", {"text": "hi"})
    envelope = authorization_denial_of(info.value)
    assert envelope is not None and envelope.remediation is Remediation.AVAILABLE
    assert [d.context_id for d in heard] == [envelope.context_id]
    assert wrapped.knowledge.learned() == {"auth:scope:notes:write"}


@pytest.mark.parametrize("version", VERSIONS)
async def test_the_envelope_reaches_the_application_and_its_id_is_echoed_on_the_retry(version: str) -> None:
    echoes: list[str | None] = []
    heard: list[DeniedCall] = []
    knowledge = Knowledge()
    async with Client(build(echoes), mode=MODES[version]) as client:
        wrapped = RequirementsClient(client, knowledge, on_denial=heard.append)
        denied = await wrapped.call_tool("deploy", {"env": "prod", "n": 1})
        envelope = authorization_denial_of(denied)
        assert envelope is not None and envelope.remediation is Remediation.AVAILABLE
        assert envelope.urls == (URL,) and envelope.context_id == "ctx-1"
        assert wrapped.last_denial == heard[0] and heard[0].envelope == envelope
        assert heard[0].unmet == ("approval:deploy", "credential:gh", "env:staging")
        other = await wrapped.call_tool("deploy", {"env": "staging"})  # another call: no echo
        assert other.is_error
        ran = await wrapped.call_tool("deploy", {"n": 1.0, "env": "prod"})  # the same call again
        again = await wrapped.call_tool("deploy", {"env": "prod", "n": 1})  # echoed once only
    assert echoes == [None, None, "ctx-1", None]
    assert not ran.is_error and ran.content[0].text == "deployed after ctx-1"  # type: ignore[union-attr]
    assert again.is_error
    assert knowledge.learned() == {"env:staging"}  # never approval: or credential:


async def test_a_jsonrpc_denial_carries_its_envelope_too() -> None:
    heard: list[DeniedCall] = []
    async with Client(build([])) as client:
        wrapped = RequirementsClient(client, Knowledge(), on_denial=heard.append)
        with pytest.raises(MCPError) as info:
            await wrapped.call_tool("deploy_rpc", {"x": 1})
    envelope = authorization_denial_of(info.value)
    assert envelope is not None and envelope.context_id == "ctx-1"
    assert [d.context_id for d in heard] == ["ctx-1"]
    assert wrapped.knowledge.learned() == {"env:staging"}


async def test_a_malformed_envelope_is_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    echoes: list[str | None] = []
    async with Client(build(echoes)) as client:
        wrapped = RequirementsClient(client, Knowledge())
        with caplog.at_level(logging.WARNING, "mcp_preconditions.envelope"):
            result = await wrapped.call_tool("garbage", {})
            await wrapped.call_tool("garbage", {})
    assert authorization_denial_of(result) is None
    assert wrapped.last_denial is not None and wrapped.last_denial.envelope is None
    assert echoes == [None, None]  # nothing trusted, nothing echoed
    assert "ignored a malformed authorization envelope (SEP-2643): 'remediation' must be 'available', " \
           "'unavailable' or 'undisclosed', got 'perhaps'" in caplog.text
