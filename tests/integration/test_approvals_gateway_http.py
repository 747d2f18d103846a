"""`approval:NAME` through the gateway on its HTTP listener (SPEC §15), callers with signed access
tokens, the MCP SDK's client at both protocol versions: a `self` approval asked on the call's stream
(2025-11-25) or as the gateway's own input round (2026-07-28) runs the call once; an approver's
approval (given in the store the gateway uses) serves its caller's retry once, never another
caller's call; the url hint is the listener's /approvals/ID.

In-process (tests/fixtures/inprocess.py): the gateway wired from its command line, served through
the streaming bridge, the listed server in memory, the tokens signed in this process and verified
by the policy's `[auth]` with the issuer's key inline (tests/fixtures/hosted.py). The real
oidc-provider's tokens and the Redis store keep their end-to-end tests in the interop tier
(test_auth_oidc, test_approvals_gateway's replicas, test_approvals_redis).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp import Client

from mcp_preconditions.approvals import MemoryApprovalStore, Party
from tests.fixtures.approvals import envelope
from tests.fixtures.hosted import ISSUER
from tests.fixtures.inprocess import BASE_URL, InProcess, cli_gateway, held
from tests.fixtures.listed_server import build
from tests.fixtures.memory_upstream import MemoryServers

pytestmark = pytest.mark.integration

TOOLS = [{"name": n, "inputSchema": {"type": "object"}} for n in ("wipe", "deploy")]
POLICY = """[auth]
{auth}
[approvals.confirm]
approvers = "self"
[approvals.release]
approvers = ["auth:claim:role:release_manager"]
[tools.wipe]
requirements = ["approval:confirm"]
[tools.deploy]
requirements = ["approval:release"]
"""


def user_token(subject: str) -> str:
    """`subject`'s access token (a person), as the application they signed in to holds it."""
    return ISSUER.token("mission-app", sub=subject)


class Listener:
    def __init__(self, gateway: InProcess, ran: list[str]) -> None:
        self.gateway, self.ran, self.base = gateway, ran, BASE_URL

    def runs(self) -> list[str]:
        return list(self.ran)

    @property
    def store(self) -> MemoryApprovalStore:
        return self.gateway.gateway.guard.live.approval_memory

    @asynccontextmanager
    async def client(self, token: str, version: str, *, declared: bool = True
                     ) -> AsyncIterator[Client]:
        callbacks: dict[str, Any] = {"elicitation_callback": _accept} if declared else {}
        async with self.gateway.client("legacy" if version == "2025-11-25" else "auto",
                                       headers={"Authorization": f"Bearer {token}"},
                                       **callbacks) as client:
            yield client


async def _accept(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
    return mcp_types.ElicitResult(action="accept", content={})


@asynccontextmanager
async def _listening(policy: Path) -> AsyncIterator[Listener]:
    ran: list[str] = []
    servers = MemoryServers()
    upstream = servers.add("listed", lambda _env, _die: build(TOOLS, ran.append))
    with servers.installed():
        async with cli_gateway(["--policy", str(policy), "--listen", BASE_URL, "--",
                                *upstream]) as gateway:
            await gateway.until_ready()
            yield Listener(gateway, ran)


@pytest.fixture
async def listener(tmp_path: Path) -> AsyncIterator[Listener]:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY.format(auth=ISSUER.auth_lines()), encoding="utf-8")
    async with held(_listening(policy)) as found:  # (a fixture's setup and teardown: two tasks)
        yield found


@pytest.mark.parametrize("version", ["2025-11-25", "2026-07-28"])
async def test_a_self_approval_over_http_runs_the_call_once(listener: Listener, version: str) -> None:
    token = user_token("alice")
    async with listener.client(token, version) as client:
        result = await client.call_tool("wipe", {"path": "/"})
    assert result.is_error is False and listener.runs() == ["wipe"]
    async with listener.client(token, version, declared=False) as client:
        refused = await client.call_tool("wipe", {"path": "/"})
    assert envelope(refused) == ("undisclosed", []) and listener.runs() == ["wipe"]


async def test_an_approvers_approval_serves_its_caller_once_and_nobody_else(
        listener: Listener) -> None:
    alice, bob = user_token("alice"), user_token("bob")
    store = listener.store
    async with listener.client(alice, "2025-11-25") as client:
        found = envelope(await client.call_tool("deploy", {"env": "prod"}))
    assert found is not None and found[0] == "available"
    url = found[1][0]["url"]
    assert url.startswith(f"{listener.base}/approvals/")
    request = await store.get(url.rsplit("/", 1)[1])
    assert request is not None and request.binding.caller is not None
    assert request.binding.caller.subject == "alice"
    assert not isinstance(await store.decide(request.id, "approve", Party(ISSUER.issuer, "rita")),
                          str)
    async with listener.client(bob, "2025-11-25") as client:
        theirs = await client.call_tool("deploy", {"env": "prod"})
    assert theirs.is_error is True and listener.runs() == []
    async with listener.client(alice, "2026-07-28") as client:
        retry = await client.call_tool("deploy", {"env": "prod"})
        again = await client.call_tool("deploy", {"env": "prod"})
    assert retry.is_error is False and again.is_error is True
    assert listener.runs() == ["deploy"]
