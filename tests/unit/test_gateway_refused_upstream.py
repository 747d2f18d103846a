"""A server that refuses the gateway's own session for want of a credential (HTTP 401 with a
`WWW-Authenticate` challenge, as an MCP server behind OAuth does, SPEC §17) is not waited for: the
handshake and the tool listing answer at once with what the other servers offer, instead of
stalling every caller for the whole connect wait (20 s) while the gateway retries. Only a person
connecting an account brings such a server up (docs/credentials.md).

The gateway is in-process (tests/fixtures/inprocess.py); the refusing server is a tiny ASGI app on
a socket of the test's event loop. Each wait has the in-process safety net (10 s), shorter than the
connect wait the old code spent, so the test fails on it without a timing assertion.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from tests.fixtures.inprocess import WAIT_SECONDS, asgi_served, cli_gateway
from tests.fixtures.memory_upstream import MemoryServers, logging_env

pytestmark = pytest.mark.anyio

POLICY = """
environment = ["production"]
[tools.alpha__echo]
requirements = ["env:production"]
"""


class Refusing:
    """Answers every request 401 with a Bearer challenge; counts them, and tells the first."""

    def __init__(self) -> None:
        self.asked = 0
        self.first = anyio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        while (await receive()).get("more_body"):
            pass
        self.asked += 1
        self.first.set()
        challenge = b'Bearer resource_metadata="http://127.0.0.1/.well-known/oauth-protected-resource"'
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"www-authenticate", challenge), (b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})


def _files(tmp: Path, servers: dict[str, Any]) -> list[str]:
    policy, listing = tmp / "policy.toml", tmp / "servers.json"
    policy.write_text(POLICY, encoding="utf-8")
    listing.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return ["--policy", str(policy), "--servers", str(listing), "--listen", "http://127.0.0.1:0"]


async def test_a_lone_server_refusing_the_gateway_does_not_stall_the_handshake(tmp_path: Path
                                                                               ) -> None:
    refusing = Refusing()
    async with asgi_served(refusing) as base:
        argv = _files(tmp_path, {"locked": {"url": f"{base}/mcp"}})
        async with cli_gateway(argv) as gw:
            with anyio.fail_after(WAIT_SECONDS):
                async with gw.client() as client:  # the handshake: no server connected
                    with pytest.raises(MCPError, match="no server is available"):
                        await client.list_tools()
            assert refusing.asked >= 1
            await gw.logged(r"upstream locked \(.*\): the server answered HTTP 401")
            body = await gw.readyz()
            assert body["servers"]["locked"]["connected"] is False


async def test_the_other_servers_tools_are_listed_without_waiting_for_the_refusing_one(
        tmp_path: Path) -> None:
    servers, refusing = MemoryServers(), Refusing()
    with servers.installed():
        alpha = servers.logging_upstream("alpha", **logging_env(tmp_path / "alpha.jsonl"))
        async with asgi_served(refusing) as base:
            argv = _files(tmp_path, {"alpha": {"command": alpha[0], "args": alpha[1:]},
                                     "locked": {"url": f"{base}/mcp"}})
            async with cli_gateway(argv) as gw:
                with anyio.fail_after(WAIT_SECONDS):
                    await refusing.first.wait()
                    async with gw.client() as client:
                        names = {t.name for t in (await client.list_tools()).tools}
                assert "alpha__echo" in names
                assert not any(n.startswith("locked") for n in names)
