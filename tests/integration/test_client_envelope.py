"""`RequirementsClient` against a real MCP SDK server whose tools deny with hand-built SEP-2643
envelopes (SPEC §15; the guard's own envelopes come with the server side): the envelope reaches the
application typed, its context ID is echoed once when the same call is retried (the server's record
is the oracle), a malformed one is ignored with a warning, and `approval:` / `credential:` are never
learned, for both denial forms and both protocol versions.
"""

from __future__ import annotations

import logging

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from mcp_preconditions.client import Knowledge
from mcp_preconditions.client_denials import DeniedCall
from mcp_preconditions.envelope import Remediation
from mcp_preconditions.integrations.client_mcp import RequirementsClient, authorization_denial_of
from tests.fixtures.envelope_server import URL, build
from tests.fixtures.mcp_servers import MODES, VERSIONS

pytestmark = pytest.mark.integration


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
