"""`approval:NAME` through a real gateway on its HTTP listener (SPEC §15), callers with real tokens
of the oidc-provider, the MCP SDK's client at both protocol versions: a `self` approval asked on
the call's stream (2025-11-25) or as the gateway's own input round (2026-07-28) runs the call once;
an approver's approval (given in the Redis store the gateway uses) serves its caller's retry once,
never another caller's call; the url hint is the listener's /approvals/ID.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_preconditions.approvals import Party
from mcp_preconditions.approvals.store_redis import RedisApprovalStore
from tests.fixtures.approvals import envelope, gateway_store
from tests.fixtures.gateway_upstream import Process, started
from tests.fixtures.mcp_servers import CLI, MODES, server_env
from tests.fixtures.oidc import AUDIENCE, OidcServer
from tests.fixtures.ports import free_port
from tests.fixtures.redis import RedisServer

pytestmark = pytest.mark.integration

TOOLS = [{"name": n, "inputSchema": {"type": "object"}} for n in ("wipe", "deploy")]
# Redis timeouts of seconds, not the defaults' fraction of one: a loaded machine can make a healthy
# Redis that late, and an approval's store then fails (closed) where the test expects its answer.
POLICY = """# run {run}
[guard]
lookup_timeout_seconds = 5
[auth]
issuer = "{issuer}"
audience = "{audience}"
jwks_uri = "{jwks}"
[state.redis]
url = "{redis}"
connect_timeout_seconds = 3
read_timeout_seconds = 3
[approvals.confirm]
approvers = "self"
[approvals.release]
approvers = ["auth:claim:role:release_manager"]
store = "redis"
[tools.wipe]
requirements = ["approval:confirm"]
[tools.deploy]
requirements = ["approval:release"]
"""


class Listener:
    def __init__(self, process: Process, base: str, ran: Path) -> None:
        self.process, self.base, self.ran = process, base, ran

    def runs(self) -> list[str]:
        return self.ran.read_text(encoding="utf-8").split() if self.ran.exists() else []

    @asynccontextmanager
    async def client(self, token: str, version: str, *, declared: bool = True
                     ) -> AsyncIterator[Client]:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                  timeout=httpx2.Timeout(30.0))
        callbacks: dict[str, Any] = {"elicitation_callback": _accept} if declared else {}
        async with Client(streamable_http_client(f"{self.base}/mcp", http_client=http),
                          mode=MODES[version], **callbacks) as client:
            yield client


async def _accept(_ctx: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
    return mcp_types.ElicitResult(action="accept", content={})


@pytest.fixture
def listener(tmp_path: Path, oidc_server: OidcServer, redis_server: RedisServer
             ) -> Any:
    policy, tools, ran = tmp_path / "policy.toml", tmp_path / "tools.json", tmp_path / "ran.log"
    policy.write_text(POLICY.format(run=uuid.uuid4().hex, issuer=oidc_server.issuer,
                                    audience=AUDIENCE, jwks=oidc_server.jwks_uri,
                                    redis=redis_server.url), encoding="utf-8")
    tools.write_text(json.dumps(TOOLS), encoding="utf-8")
    base = f"http://127.0.0.1:{free_port()}"
    command = [*CLI, "gateway", "--policy", str(policy), "--listen", base, "--",
               sys.executable, "-m", "tests.fixtures.listed_server", str(tools), str(ran)]
    with started(command, server_env(), f"{base}/mcp", f"{base}/healthz") as process:
        yield Listener(process, base, ran)


@pytest.fixture
async def store(redis_server: RedisServer) -> AsyncIterator[RedisApprovalStore]:
    async with gateway_store(redis_server.url) as found:
        yield found



@pytest.mark.parametrize("version", ["2025-11-25", "2026-07-28"])
async def test_a_self_approval_over_http_runs_the_call_once(
        listener: Listener, oidc_server: OidcServer, version: str) -> None:
    token = oidc_server.user_token("alice")
    async with listener.client(token, version) as client:
        result = await client.call_tool("wipe", {"path": "/"})
    assert result.is_error is False and listener.runs() == ["wipe"]
    async with listener.client(token, version, declared=False) as client:
        refused = await client.call_tool("wipe", {"path": "/"})
    assert envelope(refused) == ("undisclosed", []) and listener.runs() == ["wipe"]


async def test_an_approvers_approval_serves_its_caller_once_and_nobody_else(
        listener: Listener, oidc_server: OidcServer, store: RedisApprovalStore) -> None:
    alice, bob = oidc_server.user_token("alice"), oidc_server.user_token("bob")
    async with listener.client(alice, "2025-11-25") as client:
        found = envelope(await client.call_tool("deploy", {"env": "prod"}))
    assert found is not None and found[0] == "available"
    url = found[1][0]["url"]
    assert url.startswith(f"{listener.base}/approvals/")
    request = await store.get(url.rsplit("/", 1)[1])
    assert request is not None and request.binding.caller is not None
    assert request.binding.caller.subject == "alice"
    assert not isinstance(await store.decide(request.id, "approve", Party(oidc_server.issuer, "rita")),
                          str)
    async with listener.client(bob, "2025-11-25") as client:
        theirs = await client.call_tool("deploy", {"env": "prod"})
    assert theirs.is_error is True and listener.runs() == []
    async with listener.client(alice, "2026-07-28") as client:
        retry = await client.call_tool("deploy", {"env": "prod"})
        again = await client.call_tool("deploy", {"env": "prod"})
    assert retry.is_error is False and again.is_error is True
    assert listener.runs() == ["deploy"]
