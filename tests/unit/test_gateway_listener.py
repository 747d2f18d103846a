"""The HTTP listener's bounds on slow clients and its connection cap (gateway/downstream/listener.py)
against uvicorn's real protocols (httptools and h11): they subclass uvicorn's private protocol
classes, so these tests fail loudly when an upgrade changes what they rely on (`tasks`, `cycle`,
`cycle.more_body`, `cycle.response_complete`, `on_response_complete`, `transport`, `loop`), and the
pin in pyproject.toml must admit the uvicorn installed. Over the cap, health checks are still
answered (a reserve of connections, and a peek at the request line); nothing else is.
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

from mcp_preconditions.gateway.downstream.listener import (
    HEALTH_RESERVE,
    OVER_CAPACITY,
    Limits,
    _bounded,
    _health_check,
)

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


def connect(base: type[asyncio.Protocol], state: ServerState | None = None,
            cls: type[asyncio.Protocol] | None = None) -> tuple[Any, Transport]:
    """A connection to a listener whose protocol class is `cls` (one per listener: the cap counts
    the connections of one class), made with `_bounded(LIMITS, base)` by default."""
    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    protocol_class = cls or _bounded(LIMITS, base)
    protocol = protocol_class(config=config, server_state=state or ServerState(),  # type: ignore[call-arg]
                              app_state={})
    transport = Transport()
    protocol.connection_made(transport)
    return protocol, transport


async def answered(transport: Transport) -> bytes:
    for _ in range(500):
        if transport.written:
            break
        await asyncio.sleep(0.01)
    return bytes(transport.written)


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
async def test_a_connection_over_the_cap_and_the_reserve_is_answered_503_as_it_is_accepted(
        base: type[asyncio.Protocol]) -> None:
    state, refused = ServerState(), list[str]()
    cls = _bounded(LIMITS, base, refused.append)
    held = [connect(base, state, cls) for _ in range(LIMITS.connections + HEALTH_RESERVE)]
    assert not any(transport.closed for _, transport in held)
    _over, transport = connect(base, state, cls)
    assert transport.written == OVER_CAPACITY and transport.closed
    assert OVER_CAPACITY.startswith(b"HTTP/1.1 503 ")
    assert OVER_CAPACITY.endswith(b"\r\n\r\nService Unavailable")
    assert refused == ["over_cap"]
    for protocol, _ in held:
        protocol.connection_lost(None)


@pytest.mark.parametrize("base", PROTOCOLS)
@pytest.mark.parametrize("line", [b"GET /healthz HTTP/1.1\r\n", b"HEAD /readyz?verbose HTTP/1.1\r\n"])
async def test_over_the_cap_a_health_check_is_answered_once_and_the_connection_closed(
        base: type[asyncio.Protocol], line: bytes) -> None:
    state, refused = ServerState(), list[str]()
    cls = _bounded(LIMITS, base, refused.append)
    held = [connect(base, state, cls) for _ in range(LIMITS.connections)]
    protocol, transport = connect(base, state, cls)  # in the reserve
    protocol.data_received(line[:7])  # the request line comes in pieces: it waits for the rest
    assert transport.written == b"" and not transport.closed
    protocol.data_received(line[7:] + b"Host: 127.0.0.1\r\n\r\n")
    assert (await answered(transport)).startswith(b"HTTP/1.1 200")
    assert transport.closed and refused == []
    for each, _ in held:
        each.connection_lost(None)


@pytest.mark.parametrize("base", PROTOCOLS)
@pytest.mark.parametrize("start", [
    HEADERS, b"GET /metrics HTTP/1.1\r\n", b"GET /healthzz HTTP/1.1\r\n",
    b"POST /healthz HTTP/1.1\r\n", b"GET /" + b"a" * 300])
async def test_over_the_cap_anything_else_is_answered_503_and_closed(
        base: type[asyncio.Protocol], start: bytes) -> None:
    state, refused = ServerState(), list[str]()
    cls = _bounded(LIMITS, base, refused.append)
    held = [connect(base, state, cls) for _ in range(LIMITS.connections)]
    protocol, transport = connect(base, state, cls)
    protocol.data_received(start)
    assert transport.written == OVER_CAPACITY and transport.closed
    assert refused == ["over_cap"]
    for each, _ in held:
        each.connection_lost(None)


@pytest.mark.parametrize("base", PROTOCOLS)
async def test_with_the_cap_of_requests_under_way_only_health_checks_start(
        base: type[asyncio.Protocol]) -> None:
    """A connection within the cap, but with `connections` requests already under way (streams a
    caller holds open): its next request is judged as one over the cap."""
    state, refused = ServerState(), list[str]()
    cls = _bounded(LIMITS, base, refused.append)
    busy: set[asyncio.Task[None]] = {asyncio.ensure_future(asyncio.sleep(60))
                                     for _ in range(LIMITS.connections)}
    state.tasks.update(busy)
    health, health_transport = connect(base, state, cls)
    health.data_received(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await answered(health_transport)).startswith(b"HTTP/1.1 200")
    other, other_transport = connect(base, state, cls)
    other.data_received(HEADERS)
    assert other_transport.written == OVER_CAPACITY and refused == ["over_cap"]
    for task in busy:
        task.cancel()
    for each in (health, other):
        each.connection_lost(None)


@pytest.mark.parametrize(("start", "verdict"), [
    (b"GET /healthz HTTP/1.1\r\n", True), (b"GET /readyz HTTP/1.0\r\nHost: x", True),
    (b"GET /heal", None), (b"GET /healthz HTTP/1.1\r", None), (b"GET /healthz?a=b HTTP/1.1\r\n", True),
    (b"GET  /healthz HTTP/1.1\r\n", False), (b"\r\nGET /healthz HTTP/1.1\r\n", False),
    (b"OPTIONS /healthz HTTP/1.1\r\n", False), (b"GET /healthz/x HTTP/1.1\r\n", False),
    (b"GET /mcp HTTP/1.1\r\n", False), (b"G" * 256, False)])
def test_what_counts_as_a_health_check(start: bytes, verdict: bool | None) -> None:
    assert _health_check(start) is verdict


def test_the_uvicorn_installed_is_one_the_pin_admits() -> None:
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text("utf-8"))
    pins = [Requirement(r) for r in pyproject["project"]["optional-dependencies"]["mcp"]
            if r.startswith("uvicorn")]
    assert len(pins) == 1
    assert any(spec.operator in ("<", "<=", "==", "~=") for spec in pins[0].specifier)  # bounded above
    assert version("uvicorn") in pins[0].specifier, (version("uvicorn"), str(pins[0]))
