"""A `self` approval on a hosted server over streamable HTTP at 2026-07-28 (SPEC §15):
tests/fixtures/listed_server.py guarded by `guard_server` in its own process, the MCP SDK's auth
verifying the OIDC provider's JWTs, with and without the SDK's request-state boundary ("sealed":
its state bound to the caller too). Two callers, each a client of the provider: one caller's round
answered by another grants nothing (the boundary refuses it, or the other caller is asked about
their own call), and the caller's own answer runs the call once.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mcp_preconditions.approvals.question import INPUT_KEY, STATE_PREFIX
from tests.fixtures.gateway_upstream import started
from tests.fixtures.mcp_servers import MODES, server_env
from tests.fixtures.oidc import AUDIENCE, OidcServer
from tests.fixtures.ports import free_port

pytestmark = pytest.mark.integration
POLICY = '[approvals.confirm]\napprovers = "self"\n[tools.wipe]\nrequirements = ["approval:confirm"]\n'
ACCEPT = mcp_types.ElicitResult(action="accept", content={})


async def _accept(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
    return ACCEPT


@contextmanager
def hosted(tmp_path: Path, oidc: OidcServer, sealed: bool) -> Iterator[tuple[str, Path]]:
    """The guarded server on a free port: its MCP URL, and its RAN.log."""
    policy, tools, ran = tmp_path / "policy.toml", tmp_path / "tools.json", tmp_path / "ran.log"
    policy.write_text(POLICY, encoding="utf-8")
    tools.write_text(json.dumps([{"name": "wipe", "inputSchema": {"type": "object"}}]),
                     encoding="utf-8")
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    command = [sys.executable, "-m", "tests.fixtures.guarded_listed", str(policy), str(tools),
               str(ran), "--http", str(port), oidc.issuer, AUDIENCE, *(["--sealed"] if sealed else [])]
    with started(command, server_env(), url, url):
        yield url, ran


@asynccontextmanager
async def caller(url: str, token: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                              timeout=httpx2.Timeout(30.0))
    async with Client(streamable_http_client(url, http_client=http), mode=MODES["2026-07-28"],
                      elicitation_callback=_accept) as client:
        yield client


def runs(ran: Path) -> list[str]:
    return ran.read_text(encoding="utf-8").split() if ran.exists() else []


@pytest.mark.parametrize("sealed", [False, True])
async def test_another_callers_answer_grants_nothing(tmp_path: Path, oidc_server: OidcServer,
                                                     sealed: bool) -> None:
    with hosted(tmp_path, oidc_server, sealed) as (url, ran):
        async with caller(url, oidc_server.token("mission-control", scope="mission:read")) as alice, \
                caller(url, oidc_server.token("observer", scope="mission:read")) as bob:
            first = await alice.session.call_tool("wipe", {"path": "/a"}, allow_input_required=True)
            assert isinstance(first, mcp_types.InputRequiredResult)
            state = first.request_state
            assert state is not None and state.startswith(STATE_PREFIX) is not sealed
            answer: mcp_types.InputResponses = {INPUT_KEY: ACCEPT}
            if sealed:  # bound to alice: refused before the guard
                with pytest.raises(MCPError) as refused:
                    await bob.session.call_tool("wipe", {"path": "/a"}, request_state=state,
                                                input_responses=answer, allow_input_required=True)
                assert refused.value.error.message == "Invalid or expired requestState"
            else:  # bob is asked about his own call; alice's request is not his to answer
                other = await bob.session.call_tool("wipe", {"path": "/a"}, request_state=state,
                                                    input_responses=answer,
                                                    allow_input_required=True)
                assert isinstance(other, mcp_types.InputRequiredResult)
                assert other.request_state not in (None, state)
            assert runs(ran) == []
            done = await alice.session.call_tool("wipe", {"path": "/a"}, request_state=state,
                                                 input_responses=answer, allow_input_required=True)
            assert isinstance(done, mcp_types.CallToolResult) and done.is_error is False
            auto = await bob.call_tool("wipe", {"path": "/b"})  # bob's own round, answered: runs
            assert auto.is_error is False
    assert runs(ran) == ["wipe", "wipe"]
