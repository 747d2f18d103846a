"""The HTTP listener's bounds on slow clients and its connection cap (gateway/downstream/listener.py)
against uvicorn's real protocols (httptools and h11): they subclass uvicorn's private protocol
classes, so these tests fail loudly when an upgrade changes what they rely on (`tasks`, `cycle`,
`cycle.more_body`, `cycle.response_complete`, `on_response_complete`, `transport`, `loop`), and
the pin in pyproject.toml must admit the uvicorn installed. Over the cap, health checks are still
answered (a reserve of connections, and a peek at the request line), once, with `connection:
close`; nothing else is.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
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
    _Coalescing,
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
        self.writes: list[bytes] = []  # each write apart (each a system call on a socket)
        self.closed = False

    def write(self, data: Any) -> None:
        self.written += data
        self.writes.append(bytes(data))

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


async def closed(transport: Transport, within: float = 5.0) -> bool:
    for _ in range(int(within * 100)):  # the deadline is 0.05 s; this waits up to `within` for it
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
async def test_a_kept_alive_connections_next_request_in_one_packet_costs_no_timer_and_half_sent_is_cut_off(
        base: type[asyncio.Protocol]) -> None:
    protocol, transport = connect(base)
    protocol.data_received(HEADERS + b'{"a": "b"}')
    await answered(transport)
    await asyncio.sleep(0)  # its response complete: the connection waits for the next request
    protocol.data_received(HEADERS + b'{"a": "c"}')
    assert protocol._deadline is None  # whole at once: under way, nothing to time
    for _ in range(500):
        if transport.written.count(b"HTTP/1.1 200") == 2:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0)
    protocol.data_received(HEADERS[:20])  # the third request's headers never finish
    assert protocol._deadline is not None
    assert await closed(transport)
    assert transport.written.count(b"HTTP/1.1 200") == 2


@pytest.mark.parametrize("base", PROTOCOLS)
async def test_a_kept_alive_connection_judged_over_the_cap_is_cut_off_while_its_line_trickles(
        base: type[asyncio.Protocol]) -> None:
    state, refused = ServerState(), list[str]()
    cls = _bounded(LIMITS, base, refused.append)
    protocol, transport = connect(base, state, cls)
    protocol.data_received(HEADERS + b'{"a": "b"}')
    await answered(transport)
    await asyncio.sleep(0)
    busy: set[asyncio.Task[None]] = {asyncio.ensure_future(asyncio.sleep(60))
                                     for _ in range(LIMITS.connections)}
    state.tasks.update(busy)
    protocol.data_received(b"GET /heal")  # over the cap now: judged on its line, which stops here
    assert await closed(transport, within=1.0)  # its header time, not uvicorn's 5 s keep-alive
    assert refused == []  # cut off for being slow, not refused for what it asked
    for task in busy:
        task.cancel()
    protocol.connection_lost(None)


@pytest.mark.parametrize("base", PROTOCOLS)
async def test_an_answer_goes_out_in_one_write_its_head_with_its_body(base: type[asyncio.Protocol]) -> None:
    protocol, transport = connect(base)
    protocol.data_received(HEADERS + b'{"a": "b"}')
    await answered(transport)
    assert len(transport.writes) == 1
    assert transport.writes[0].startswith(b"HTTP/1.1 200") and transport.writes[0].endswith(b"\r\n\r\nok")
    protocol.connection_lost(None)


async def test_a_write_alone_goes_out_on_the_loops_next_step_and_closing_sends_what_is_held() -> None:
    transport = Transport()
    coalescing = _Coalescing(transport, asyncio.get_running_loop())
    coalescing.write(b"head")  # a stream's head: nothing follows at once
    assert transport.writes == []
    await asyncio.sleep(0)
    assert transport.writes == [b"head"]
    coalescing.write(b"event")
    coalescing.close()
    assert transport.writes == [b"head", b"event"] and transport.closed
    await asyncio.sleep(0)
    assert transport.writes == [b"head", b"event"]  # sent once


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
    answer = await answered(transport)
    assert answer.startswith(b"HTTP/1.1 200")
    assert transport.closed and refused == []
    assert b"\r\nconnection: close\r\n" in answer.lower()  # a pooling client does not reuse it
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


def test_uvicorn_is_imported_without_its_reloaders_file_watcher_which_stays_importable() -> None:
    code = ("import sys\nfrom mcp_preconditions.gateway.downstream import listener\n"
            "listener._import_uvicorn()\nimport uvicorn, uvicorn.supervisors\n"
            "print('watchfiles' in sys.modules, uvicorn.supervisors.ChangeReload.__name__)\n"
            "import watchfiles\nprint(watchfiles.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "StatReload", "watchfiles"]
