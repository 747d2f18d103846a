"""The HTTP listener's bounds on slow clients (gateway/downstream/listener.py) against uvicorn's real
protocols (httptools and h11): they subclass uvicorn's private protocol classes, so these tests fail loudly
when an upgrade changes what they rely on (`connections`, `cycle`, `cycle.more_body`,
`cycle.response_complete`, `transport`, `loop`), and the pin in pyproject.toml must admit the
uvicorn installed.
"""

from __future__ import annotations

import asyncio
import tomllib
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from packaging.requirements import Requirement
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from mcp_preconditions.gateway.downstream.listener import OVER_CAPACITY, Limits, _bounded

PROTOCOLS = [HttpToolsProtocol, H11Protocol]
LIMITS = Limits(header_seconds=0.05, connections=2)
HEADERS = b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n"


class Transport(asyncio.Transport):
    """What the protocol writes, and whether it closed the connection."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False

    def write(self, data: Any) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5000), "sockname": ("127.0.0.1", 80)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Reads the whole body, then answers 200."""
    if scope["type"] != "http":
        return
    while (message := await receive())["type"] == "http.request" and message.get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def connect(base: type[asyncio.Protocol], state: ServerState | None = None
            ) -> tuple[Any, Transport]:
    config = uvicorn.Config(app, log_level="warning", lifespan="off",
                            limit_concurrency=LIMITS.connections)
    protocol = _bounded(LIMITS, base)(config=config, server_state=state or ServerState(),  # type: ignore[call-arg]
                                      app_state={})
    transport = Transport()
    protocol.connection_made(transport)
    return protocol, transport


async def closed(transport: Transport) -> bool:
    for _ in range(500):  # the deadline is 0.05 s; this waits up to 5 s for it
        if transport.closed:
            return True
        await asyncio.sleep(0.01)
    return False


@pytest.mark.parametrize("base", PROTOCOLS)
async def test_half_sent_headers_are_cut_off(base: type[asyncio.Protocol]) -> None:
    protocol, transport = connect(base)
    protocol.data_received(HEADERS[:20])
    assert await closed(transport)
    assert transport.written == b""


@pytest.mark.parametrize("base", PROTOCOLS)
async def test_a_trickled_body_is_cut_off(base: type[asyncio.Protocol]) -> None:
    protocol, transport = connect(base)
    protocol.data_received(HEADERS + b'{"a"')  # 4 bytes of 10: the rest never comes
    assert protocol.cycle is not None and protocol.cycle.more_body  # uvicorn's own state
    assert await closed(transport)
    assert b"200" not in transport.written


@pytest.mark.parametrize("base", PROTOCOLS)
async def test_a_whole_request_is_answered_and_not_cut_off(base: type[asyncio.Protocol]) -> None:
    protocol, transport = connect(base)
    protocol.data_received(HEADERS + b'{"a": "b"}')
    for _ in range(500):
        if transport.written:
            break
        await asyncio.sleep(0.01)
    assert transport.written.startswith(b"HTTP/1.1 200")
    assert protocol._deadline is None and not transport.closed
    protocol.connection_lost(None)


@pytest.mark.parametrize("base", PROTOCOLS)
async def test_a_connection_over_the_cap_is_answered_503_and_closed_as_it_is_accepted(
        base: type[asyncio.Protocol]) -> None:
    state = ServerState()
    held = [connect(base, state) for _ in range(LIMITS.connections)]
    assert not any(transport.closed for _, transport in held)
    _over, transport = connect(base, state)
    assert transport.written == OVER_CAPACITY and transport.closed
    assert OVER_CAPACITY.startswith(b"HTTP/1.1 503 ")
    assert OVER_CAPACITY.endswith(b"\r\n\r\nService Unavailable")
    for protocol, _ in held:
        protocol.connection_lost(None)


def test_the_uvicorn_installed_is_one_the_pin_admits() -> None:
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text("utf-8"))
    pins = [Requirement(r) for r in pyproject["project"]["optional-dependencies"]["mcp"]
            if r.startswith("uvicorn")]
    assert len(pins) == 1
    assert any(spec.operator in ("<", "<=", "==", "~=") for spec in pins[0].specifier)  # bounded above
    assert version("uvicorn") in pins[0].specifier, (version("uvicorn"), str(pins[0]))
