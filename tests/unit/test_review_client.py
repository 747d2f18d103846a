"""Review finding (client): a requirement whose resolver *failed* (backend down, timeout) is learned
as unsatisfiable for the whole learn TTL, so the client hides a tool the server would run as soon
as the backend is back (SPEC §6 soundness). Fails today.
"""

from __future__ import annotations

from typing import Any

from mcp import Client

from mcp_preconditions import CallContext, Guard, parse_policy
from mcp_preconditions.client import Knowledge
from mcp_preconditions.integrations.client_mcp import RequirementsClient
from mcp_preconditions.integrations.mcp_sdk import GuardedMCPServer


class Flaky:
    """`zz:` resolver whose backend is down for the first call only."""

    namespace = "zz"

    def __init__(self) -> None:
        self.calls = 0

    def validate(self, requirement: str) -> str | None:
        return None

    def resolve(self, requirement: str, context: CallContext) -> Any:
        self.calls += 1
        if self.calls == 1:
            raise ConnectionError("backend down")
        return True


async def test_a_backend_error_is_not_learned_as_unsatisfiable() -> None:
    flaky = Flaky()
    guard = Guard(parse_policy(b"", "p.toml"), resolvers=[flaky], entry_points=False)
    server = GuardedMCPServer("s", guard=guard)
    ran: list[str] = []

    @server.tool(requirements=["zz:backend"], structured_output=False)
    def probe() -> str:
        ran.append("probe")
        return "ok"

    async with Client(server) as client:
        wrapped = RequirementsClient(client, Knowledge(satisfied=[]))
        first = await wrapped.call_tool("probe", {})
        listed = await wrapped.list_tools()
        second = await client.call_tool("probe", {})
    assert first.is_error is True          # the backend was down: denied, fail closed
    assert second.is_error is False        # the server now runs it ...
    assert ran == ["probe"]
    assert listed.names == ["probe"]       # ... so the client must not be hiding it
