"""A 2025-11-25 streamable-HTTP upstream's change notifications come on its session's GET stream,
and nothing replays one sent while that stream is not open: the gateway opens it, and waits for the
server's answer, before it first lists the server (as it waits for a 2026-07-28 listen stream's
acknowledgement), so a change the server makes as it answers that first listing is heard.

In-process (tests/fixtures/inprocess.py): the server (tests/fixtures/get_stream_server.py's SDK app)
on a socket of the test's event loop (`asgi_served`: the gateway's HTTP link is a real client), the
gateway wired from its command line in that loop, its client on the gateway's app over the bridge;
the change is awaited as the gateway's own list_changed to that client.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp.server.lowlevel.server import Server

from tests.fixtures import get_stream_server
from tests.fixtures.inprocess import WAIT_SECONDS, asgi_served, cli_gateway
from tests.integration.test_gateway_calls import raw_tools


def server_app() -> Any:
    """The server's streamable-HTTP app, each GET of /mcp logged."""
    server: Server[Any] = Server("get-stream", on_list_tools=get_stream_server.list_tools,
                                 on_call_tool=get_stream_server.call_tool)
    return get_stream_server.logged(server.streamable_http_app(host="127.0.0.1"))


async def test_a_change_as_the_first_listing_is_answered_is_heard_on_the_get_stream(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server answers the gateway's first tools/list with `early`, then adds `late` and says
    its list changed, outside any request. The gateway's GET stream is open by then, so it hears
    the change and lists `late` (it used to open the stream after that listing: the notification
    had nowhere to go, and the gateway showed the stale list until the server's next change)."""
    policy, log = tmp_path / "policy.toml", tmp_path / "server.log"
    policy.write_text("", encoding="utf-8")
    monkeypatch.setenv("GET_STREAM_SERVER_LOG", str(log))
    monkeypatch.setattr(get_stream_server, "LISTED", ["early"])  # a fresh server's list
    changed = anyio.Event()

    async def told(message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            changed.set()

    async with asgi_served(server_app()) as base, \
            cli_gateway(["--policy", str(policy), "--upstream-url", f"{base}/mcp"]) as gw, \
            gw.client("legacy", message_handler=told) as client:
        tools = await raw_tools(client)  # the gateway watches this client from now on
        if "late" not in tools:
            with anyio.move_on_after(WAIT_SECONDS):
                await changed.wait()  # the gateway heard the server's change and listed again
            tools = await raw_tools(client)
        seen = log.read_text(encoding="utf-8").split()
    assert sorted(tools) == ["early", "late"], (sorted(tools), seen)
    # The stream was asked for before the first listing, and the change listed again.
    assert seen[:3] == ["GET", "tools/list", "tools/list"], seen
