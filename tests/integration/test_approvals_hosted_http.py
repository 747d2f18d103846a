"""A `self` approval on a hosted server over streamable HTTP at 2026-07-28 (SPEC §15):
tests/fixtures/listed_server.py guarded by `guard_server` as tests/fixtures/guarded_listed.py runs it,
the MCP SDK's auth verifying JWTs, with and without the SDK's request-state boundary ("sealed": its
state bound to the caller too). Two callers, each a client of the issuer: one caller's round
answered by another grants nothing (the boundary refuses it, or the other caller is asked about
their own call), and the caller's own answer runs the call once.

In-process, the server's HTTP app is reached through the streaming bridge, its tokens signed in this
process (tests/fixtures/hosted.py's ISSUER). Interop, marked, with why: the sealed row once more
through a real guarded_listed process on a socket, its SDK auth verifying the real OIDC provider's
tokens against its JWKS (the token-verifying SDK server end to end: the boundary binds the state to
the caller the real token names).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.auth.settings import AuthSettings
from mcp.shared.exceptions import MCPError

from mcp_preconditions.integrations.step_up import InsufficientScopeChallenge
from mcp_preconditions.late import INPUT_KEY, STATE_PREFIX
from tests.fixtures.asgi_bridge import AsgiBridge
from tests.fixtures.gateway_upstream import started
from tests.fixtures.guarded_listed import guarded
from tests.fixtures.hosted import ISSUER
from tests.fixtures.inprocess import BASE_URL
from tests.fixtures.mcp_servers import MODES, server_env
from tests.fixtures.oidc import AUDIENCE, OidcServer
from tests.fixtures.ports import free_port

pytestmark = pytest.mark.integration
POLICY = '[approvals.confirm]\napprovers = "self"\n[tools.wipe]\nrequirements = ["approval:confirm"]\n'
TOOLS = [{"name": "wipe", "inputSchema": {"type": "object"}}]
ACCEPT = mcp_types.ElicitResult(action="accept", content={})


async def _accept(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
    return ACCEPT


@dataclass
class Hosted:
    """The guarded server's callers (`caller(client, scope)`: a client of the issuer's `client`)
    and the calls that ran."""

    caller: Callable[[str, str], AbstractAsyncContextManager[Client]]
    runs: Callable[[], list[str]]


def _policy(tmp_path: Path) -> Path:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY, encoding="utf-8")
    return policy


@asynccontextmanager
async def _client(http: httpx2.AsyncClient, url: str) -> AsyncIterator[Client]:
    async with Client(streamable_http_client(url, http_client=http), mode=MODES["2026-07-28"],
                      elicitation_callback=_accept) as client:
        yield client


@asynccontextmanager
async def in_process(tmp_path: Path, sealed: bool) -> AsyncIterator[Hosted]:
    """The guarded server's HTTP app (as guarded_listed's `--http` serves it) on the bridge."""
    ran: list[str] = []
    server, pre = guarded(_policy(tmp_path), TOOLS, ran.append, sealed=sealed)
    app = server.streamable_http_app(
        token_verifier=ISSUER.verifier(),
        auth=AuthSettings(issuer_url=ISSUER.issuer, resource_server_url=f"{BASE_URL}/mcp",
                          validate_token_resource=False))
    async with AsgiBridge(InsufficientScopeChallenge(app, pre), base_url=BASE_URL) as bridge:
        def caller(client: str, scope: str) -> AbstractAsyncContextManager[Client]:
            token = ISSUER.token(client, scope=scope)
            http = bridge.httpx2(headers={"Authorization": f"Bearer {token}"}, timeout=10.0)
            return _client(http, f"{BASE_URL}/mcp")
        yield Hosted(caller, lambda: list(ran))


@asynccontextmanager
async def in_a_process(tmp_path: Path, oidc: OidcServer, sealed: bool) -> AsyncIterator[Hosted]:
    """tests/fixtures/guarded_listed.py on a free port, verifying the real provider's tokens."""
    tools, ran = tmp_path / "tools.json", tmp_path / "ran.log"
    tools.write_text(json.dumps(TOOLS), encoding="utf-8")
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    command = [sys.executable, "-m", "tests.fixtures.guarded_listed", str(_policy(tmp_path)),
               str(tools), str(ran), "--http", str(port), oidc.issuer, AUDIENCE,
               *(["--sealed"] if sealed else [])]

    def caller(client: str, scope: str) -> AbstractAsyncContextManager[Client]:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {oidc.token(client, scope=scope)}"},
                                  timeout=httpx2.Timeout(10.0))
        return _client(http, url)

    with started(command, server_env(), url, url):
        yield Hosted(caller, lambda: ran.read_text(encoding="utf-8").split() if ran.exists() else [])


async def _another_callers_answer_grants_nothing(hosted: Hosted, sealed: bool) -> None:
    async with hosted.caller("mission-control", "mission:read") as alice, \
            hosted.caller("observer", "mission:read") as bob:
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
                                                input_responses=answer, allow_input_required=True)
            assert isinstance(other, mcp_types.InputRequiredResult)
            assert other.request_state not in (None, state)
        assert hosted.runs() == []
        done = await alice.session.call_tool("wipe", {"path": "/a"}, request_state=state,
                                             input_responses=answer, allow_input_required=True)
        assert isinstance(done, mcp_types.CallToolResult) and done.is_error is False
        auto = await bob.call_tool("wipe", {"path": "/b"})  # bob's own round, answered: runs
        assert auto.is_error is False
    assert hosted.runs() == ["wipe", "wipe"]


@pytest.mark.parametrize("sealed", [False, True])
async def test_another_callers_answer_grants_nothing(tmp_path: Path, sealed: bool) -> None:
    async with in_process(tmp_path, sealed) as hosted:
        await _another_callers_answer_grants_nothing(hosted, sealed)


@pytest.mark.interop
async def test_another_callers_answer_grants_nothing_with_the_real_providers_tokens(
        tmp_path: Path, oidc_server: OidcServer) -> None:
    async with in_a_process(tmp_path, oidc_server, True) as hosted:
        await _another_callers_answer_grants_nothing(hosted, True)
