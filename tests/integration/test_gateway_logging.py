"""The upstream's log messages through the gateway reach only the client whose call they are about:
on that call's stream, filtered by that client's own level (2025-11-25 `logging/setLevel`, 2026-07-28
per-request opt-in); a message the gateway cannot place with certainty reaches nobody.

In-process (tests/fixtures/inprocess.py): the gateway wired from its command line in the test's event
loop, the asking upstream in memory, each client on the gateway's app over the streaming bridge. The
stdio listener's own case stays with a real gateway process: it is about its stdin and stdout.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
import pytest_asyncio
from mcp import Client

from tests.fixtures import asking_upstream
from tests.fixtures.asking_upstream import open_policy  # noqa: F401 (the `policy` fixture)
from tests.fixtures.inprocess import InProcess, cli_gateway, held, until
from tests.fixtures.memory_upstream import MemoryServers

pytestmark = pytest.mark.asyncio(loop_scope="module")


class Logs:
    def __init__(self) -> None:
        self.seen: list[Any] = []

    async def __call__(self, params: mcp_types.LoggingMessageNotificationParams) -> None:
        self.seen.append(params.data)


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "upstream.jsonl"


@pytest_asyncio.fixture(loop_scope="module")
async def gw(policy: Path, log: Path) -> AsyncIterator[InProcess]:
    """`gateway --policy P --listen http://... -- ASKING_UPSTREAM` in-process, its upstream in
    memory recording in `log`, once the upstream is listed."""
    servers = MemoryServers()
    with servers.installed():
        upstream = servers.asking_upstream(ASKING_UPSTREAM_LOG=str(log))
        async with held(cli_gateway(["--policy", str(policy), "--listen", "http://127.0.0.1:0",
                                     "--", *upstream])) as gateway:
            await gateway.until_ready()
            yield gateway


async def test_a_log_message_reaches_only_the_caller(gw: InProcess) -> None:
    a, b = Logs(), Logs()
    async with gw.client("legacy", logging_callback=a) as one, \
            gw.client("legacy", logging_callback=b) as two:
        await two.list_tools()
        await one.call_tool("log", {"tag": "a"})
        await two.call_tool("log", {"tag": "b"})
        await one.list_tools()
    assert a.seen == [{"call": "a"}]
    assert b.seen == [{"call": "b"}]


async def test_a_message_while_two_clients_have_calls_in_flight_reaches_nobody(
        gw: InProcess, log: Path) -> None:
    a, b = Logs(), Logs()
    async with gw.client("legacy", logging_callback=a) as one, \
            gw.client("legacy", logging_callback=b) as two, anyio.create_task_group() as tg:
        tg.start_soon(two.call_tool, "wait", {"seconds": 120, "tag": "two"})
        await until(lambda: _waiting(log, "two"), "two's call never reached the upstream")
        result = await one.call_tool("log", {"tag": "whose?"})  # while two's call is upstream
        tg.cancel_scope.cancel()  # two's call has served its purpose
    assert result.content == [mcp_types.TextContent(type="text", text="log done")]
    assert a.seen == [] and b.seen == []


def _waiting(log: Path, tag: str) -> bool:
    """The upstream has `wait` called with `tag`."""
    return {"waiting": tag} in asking_upstream.read_log(log)


async def test_each_2025_client_gets_its_own_level(gw: InProcess, log: Path) -> None:
    quiet, loud = Logs(), Logs()
    async with gw.client("legacy", logging_callback=quiet) as one, \
            gw.client("legacy", logging_callback=loud) as two:
        await one.set_logging_level("error")
        await two.set_logging_level("debug")
        await one.call_tool("log", {"tag": "info for one"})
        await two.call_tool("log", {"tag": "info for two"})
    assert quiet.seen == [] and loud.seen == [{"call": "info for two"}]
    # The shared upstream session is set to the most verbose level a connected client asked for.
    assert asking_upstream.read_log(log) == [{"level": "error"}, {"level": "debug"}]


@pytest.mark.interop
async def test_a_2026_client_of_a_stdio_gateway_gets_the_log_of_a_call_that_opted_in(
        policy: Path, log: Path) -> None:
    """Interop: the opt-in read by a real gateway process's stdio listener."""
    opted, silent = Logs(), Logs()
    async with Client(asking_upstream.gateway(policy, log), mode="auto", log_level="info",
                      logging_callback=opted) as client:
        await client.call_tool("log", {"tag": "opted"})
    async with Client(asking_upstream.gateway(policy, log), mode="auto",
                      logging_callback=silent) as client:
        await client.call_tool("log", {"tag": "silent"})
    assert opted.seen == [{"call": "opted"}]
    assert silent.seen == []


async def test_a_2026_client_gets_the_log_of_a_call_that_opted_in(gw: InProcess) -> None:
    opted, silent = Logs(), Logs()
    async with gw.client("auto", log_level="info", logging_callback=opted) as one, \
            gw.client("auto", logging_callback=silent) as two:
        await one.call_tool("log", {"tag": "opted"})
        await two.call_tool("log", {"tag": "silent"})
    assert opted.seen == [{"call": "opted"}]
    assert silent.seen == []
