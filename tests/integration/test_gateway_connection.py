"""One connection core for both listeners (gateway/clients.py): a client's
`notifications/cancelled` interrupts its request on stdio and in an HTTP session alike, by the id as
the SDKs correlate it ("41" names 41), and the server is told; a cancelled request is never answered
on stdio and ends its stream with -32800 over HTTP; a client that goes (stdin closed, the session
DELETEd) cancels what it has running. And a gateway whose stdin is /dev/null, closed or at its end
exits at once, cleanly.

In-process (tests/fixtures/inprocess.py): the gateway wired from its command line in the test's event
loop, the logging upstream in memory, the raw client (tests/fixtures/transcript.py) on the stdio
listener's lines (tests/fixtures/stdio_pipe.py) or on the app over the streaming bridge; each wait is
on what the upstream logged. The empty or closed stdin stays interop: it is about the process's own
file descriptor 0 (a device, a closed descriptor, a pipe at its end).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.gateway_upstream import (
    CLI,
    ROOT,
    UPSTREAM_STDIO,
    read_log,
    tool_calls,
    upstream_env,
)
from tests.fixtures.inprocess import WAIT_SECONDS, logging_gateway, until
from tests.fixtures.stdio_pipe import stdio_pipe
from tests.fixtures.transcript import LEGACY, HttpClient, RawClient, StdioClient

IN_PROCESS = pytest.mark.asyncio(loop_scope="module")  # one event loop for the module's gateways

OPEN = "# every tool open\n[gateway]\ncall_timeout_seconds = 120\n"
SLOW = {"name": "slow", "arguments": {"seconds": 90}}
HTTP = ("--listen", "http://127.0.0.1:0")


def cancelled(log: Path) -> list[Any]:
    return [e["params"]["requestId"] for e in read_log(log) if e["method"] == "notifications/cancelled"]


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    path = tmp_path / "open.toml"
    path.write_text(OPEN, encoding="utf-8")
    return path


async def cancel_by_a_string_id(client: RawClient, log: Path) -> asyncio.Task[Any]:
    """Start `slow` as request 41, and cancel it naming "41"; the server hears of it."""
    await client.handshake()
    running = asyncio.get_running_loop().create_task(client.send(41, "tools/call", SLOW))
    await until(lambda: "slow" in tool_calls(log), "the server never got the call")
    await client.notify("notifications/cancelled", {"requestId": "41", "reason": "changed my mind"})
    await until(lambda: bool(cancelled(log)), "the server was never told of the cancellation")
    return running


@IN_PROCESS
async def test_stdio_a_cancelled_request_is_interrupted_and_never_answered(
        policy: Path, tmp_path: Path) -> None:
    log = tmp_path / "upstream.jsonl"
    async with logging_gateway(policy, log) as gw, stdio_pipe(gw.gateway) as pipe:
        client = StdioClient(LEGACY, pipe=pipe)
        async with client.running():
            running = await cancel_by_a_string_id(client, log)
            ping = await client.send(42, "ping", None)  # the connection goes on, answered in order
            unanswered = not running.done()
            running.cancel()
    assert ping.answer == {"jsonrpc": "2.0", "id": 42, "result": {}}
    assert unanswered
    assert len(cancelled(log)) == 1


@IN_PROCESS
async def test_http_a_cancelled_request_ends_its_stream_with_request_cancelled(
        policy: Path, tmp_path: Path) -> None:
    log = tmp_path / "upstream.jsonl"
    async with logging_gateway(policy, log, *HTTP) as gw:
        client = HttpClient(LEGACY, gw.url, http=gw.http())
        async with client.running():
            running = await cancel_by_a_string_id(client, log)
            exchange = await asyncio.wait_for(running, WAIT_SECONDS)
    assert exchange.answer == {"jsonrpc": "2.0", "id": 41,
                               "error": {"code": -32800, "message": "Request cancelled"}}
    assert len(cancelled(log)) == 1


@IN_PROCESS
async def test_http_ending_the_session_cancels_what_it_has_running(policy: Path,
                                                                   tmp_path: Path) -> None:
    log = tmp_path / "upstream.jsonl"
    async with logging_gateway(policy, log, *HTTP) as gw:
        client = HttpClient(LEGACY, gw.url, http=gw.http())
        async with client.running():
            await client.handshake()
            running = asyncio.get_running_loop().create_task(client.send(7, "tools/call", SLOW))
            await until(lambda: "slow" in tool_calls(log), "the server never got the call")
            ended = await client.http.delete(client.url, headers=client._headers(None))
            client.session = None
            exchange = await asyncio.wait_for(running, WAIT_SECONDS)
            await until(lambda: bool(cancelled(log)), "the server was never told")
    assert ended.status_code == 200
    assert exchange.answer is not None and exchange.answer["error"]["code"] == -32800


@pytest.mark.interop
@pytest.mark.parametrize("stdin", ["/dev/null", "closed", "at its end"])
def test_a_gateway_whose_stdin_is_empty_or_closed_exits_at_once_and_cleanly(
        policy: Path, tmp_path: Path, stdin: str) -> None:
    command = [*CLI, "gateway", "--policy", str(policy), "--", *UPSTREAM_STDIO]
    env = upstream_env(tmp_path / "upstream.jsonl")
    if stdin == "/dev/null":
        done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, env=env,
                              cwd=ROOT, timeout=10, check=False)
    elif stdin == "closed":
        done = subprocess.run(command, capture_output=True, env=env, cwd=ROOT, timeout=10,
                              check=False, preexec_fn=lambda: os.close(0))
    else:
        done = subprocess.run(command, input=b"", capture_output=True, env=env, cwd=ROOT,
                              timeout=10, check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert b"Traceback" not in done.stderr and b"Error" not in done.stderr, done.stderr.decode()
