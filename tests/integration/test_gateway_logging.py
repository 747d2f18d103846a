"""The upstream's log messages through the gateway reach only the client whose call they are about:
on that call's stream, filtered by that client's own level (2025-11-25 `logging/setLevel`, 2026-07-28
per-request opt-in); a message the gateway cannot place with certainty reaches nobody.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client

from tests.fixtures import asking_upstream
from tests.fixtures.asking_upstream import open_policy  # noqa: F401 (the `policy` fixture)
from tests.fixtures.flagd import eventually_async


class Logs:
    def __init__(self) -> None:
        self.seen: list[Any] = []

    async def __call__(self, params: mcp_types.LoggingMessageNotificationParams) -> None:
        self.seen.append(params.data)


async def test_a_log_message_reaches_only_the_caller(tmp_path: Path, policy: Path) -> None:
    a, b = Logs(), Logs()
    with asking_upstream.gateway_http(policy, tmp_path / "upstream.jsonl") as gw:
        async with Client(gw.url + "/mcp", mode="legacy", logging_callback=a) as one, \
                Client(gw.url + "/mcp", mode="legacy", logging_callback=b) as two:
            await two.list_tools()
            await one.call_tool("log", {"tag": "a"})
            await two.call_tool("log", {"tag": "b"})
            await one.list_tools()
    assert a.seen == [{"call": "a"}]
    assert b.seen == [{"call": "b"}]


async def test_a_message_while_two_clients_have_calls_in_flight_reaches_nobody(
        tmp_path: Path, policy: Path) -> None:
    a, b = Logs(), Logs()
    log = tmp_path / "upstream.jsonl"
    with asking_upstream.gateway_http(policy, log) as gw:
        async with Client(gw.url + "/mcp", mode="legacy", logging_callback=a) as one, \
                Client(gw.url + "/mcp", mode="legacy", logging_callback=b) as two, \
                anyio.create_task_group() as tg:
            tg.start_soon(two.call_tool, "wait", {"seconds": 120, "tag": "two"})
            upstream = await eventually_async(lambda: _waiting(log, "two"), True, 30)
            assert upstream, "two's call never reached the upstream"
            result = await one.call_tool("log", {"tag": "whose?"})  # while two's call is upstream
            tg.cancel_scope.cancel()  # two's call has served its purpose
    assert result.content == [mcp_types.TextContent(type="text", text="log done")]
    assert a.seen == [] and b.seen == []


async def _waiting(log: Path, tag: str) -> bool:
    """The upstream has `wait` called with `tag`."""
    return {"waiting": tag} in asking_upstream.read_log(log)


async def test_each_2025_client_gets_its_own_level(tmp_path: Path, policy: Path) -> None:
    quiet, loud = Logs(), Logs()
    log = tmp_path / "upstream.jsonl"
    with asking_upstream.gateway_http(policy, log) as gw:
        async with Client(gw.url + "/mcp", mode="legacy", logging_callback=quiet) as one, \
                Client(gw.url + "/mcp", mode="legacy", logging_callback=loud) as two:
            await one.set_logging_level("error")
            await two.set_logging_level("debug")
            await one.call_tool("log", {"tag": "info for one"})
            await two.call_tool("log", {"tag": "info for two"})
    assert quiet.seen == [] and loud.seen == [{"call": "info for two"}]
    # The shared upstream session is set to the most verbose level a connected client asked for.
    assert asking_upstream.read_log(log) == [{"level": "error"}, {"level": "debug"}]


@pytest.mark.parametrize("listener", ["stdio", "http"])
async def test_a_2026_client_gets_the_log_of_a_call_that_opted_in(
        tmp_path: Path, policy: Path, listener: str) -> None:
    opted, silent = Logs(), Logs()
    log = tmp_path / "upstream.jsonl"
    if listener == "stdio":
        async with Client(asking_upstream.gateway(policy, log), mode="auto", log_level="info",
                          logging_callback=opted) as client:
            await client.call_tool("log", {"tag": "opted"})
        async with Client(asking_upstream.gateway(policy, log), mode="auto",
                          logging_callback=silent) as client:
            await client.call_tool("log", {"tag": "silent"})
    else:
        with asking_upstream.gateway_http(policy, log) as gw:
            async with Client(gw.url + "/mcp", mode="auto", log_level="info",
                              logging_callback=opted) as one, \
                    Client(gw.url + "/mcp", mode="auto", logging_callback=silent) as two:
                await one.call_tool("log", {"tag": "opted"})
                await two.call_tool("log", {"tag": "silent"})
    assert opted.seen == [{"call": "opted"}]
    assert silent.seen == []
