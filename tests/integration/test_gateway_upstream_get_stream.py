"""A 2025-11-25 streamable-HTTP upstream's change notifications come on its session's GET stream,
and nothing replays one sent while that stream is not open: the gateway opens it, and waits for the
server's answer, before it first lists the server (as it waits for a 2026-07-28 listen stream's
acknowledgement), so a change the server makes as it answers that first listing is heard.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.fixtures.gateway_upstream import CLI, ROOT, upstream_env
from tests.fixtures.get_stream_server import get_stream_server
from tests.integration.test_gateway_calls import raw_tools

WAIT = 30.0


async def test_a_change_as_the_first_listing_is_answered_is_heard_on_the_get_stream(
        tmp_path: Path) -> None:
    """The server answers the gateway's first tools/list with `early`, then adds `late` and says
    its list changed, outside any request. The gateway's GET stream is open by then, so it hears
    the change and lists `late` (it used to open the stream after that listing: the notification
    had nowhere to go, and the gateway showed the stale list until the server's next change)."""
    policy, log = tmp_path / "policy.toml", tmp_path / "server.log"
    policy.write_text("", encoding="utf-8")
    with get_stream_server(log) as upstream:
        command = [*CLI, "gateway", "--policy", str(policy), "--upstream-url", upstream.url]
        params = StdioServerParameters(command=command[0], args=command[1:],
                                       env=upstream_env(tmp_path / "unused.jsonl"), cwd=ROOT)
        async with Client(params, mode="legacy") as client:
            tools: dict[str, Any] = {}
            with anyio.move_on_after(WAIT):
                while "late" not in tools:
                    tools = await raw_tools(client)
                    if "late" not in tools:
                        await anyio.sleep(0.1)  # polled on the deadline above
        seen, output = log.read_text(encoding="utf-8").split(), upstream.output()
    assert sorted(tools) == ["early", "late"], (sorted(tools), seen, output)
    # The stream was asked for before the first listing, and the change listed again.
    assert seen[:3] == ["GET", "tools/list", "tools/list"], seen
