"""A hostile server (tests/fixtures/hostile_server.py: raw sockets, misbehaving byte by byte) behind a
gateway, next to a healthy server, one row per misbehaviour of issue 30's table. For every row: the
healthy server's calls keep working (during and after), the gateway's memory stays bounded (the peak
RSS, from /proc, of the process it runs in), nothing runs twice (the hostile server counts what it
received), and each call gets its own answer or a tool error naming the server, never another
call's answer.

In-process (tests/fixtures/inprocess.py): `gateway --config` wired in the test's event loop, the
healthy server the logging upstream in memory, the hostile one on a socket of its own thread (the
gateway's HTTP link reads its bytes as from any server); the client on the gateway's app over the
streaming bridge, or on its stdio listener's lines (tests/fixtures/stdio_pipe.py). The peak RSS is
the test process's, its high-water mark reset (/proc/self/clear_refs) as each row starts: native
buffers count as they did in a gateway process of its own.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.fixtures.fleet import command, write_gateway_toml
from tests.fixtures.hostile_server import Hostile, hostile_server
from tests.fixtures.inprocess import WAIT_SECONDS, InProcess, cli_gateway, until
from tests.fixtures.memory_upstream import MemoryServers, logging_env
from tests.fixtures.stdio_pipe import stdio_pipe
from tests.fixtures.transcript import LEGACY, StdioClient

pytestmark = pytest.mark.asyncio(loop_scope="module")

# Small bounds (settable), so a row that passes one does it quickly; a call timeout above every
# wait here (no row waits it out).
POLICY = "[gateway]\ncall_timeout_seconds = 15\nmax_response_bytes = 1048576\n" \
         "max_event_bytes = 262144\n"
RSS_GROWTH_MB = 64  # the peak RSS may grow by this much at most while a row runs
WAIT = WAIT_SECONDS


@pytest.fixture(autouse=True)
def _short_notify(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server has peer.NOTIFY_SECONDS (5 s) to accept a notification before the gateway goes on
    without it; the rows that never accept one wait that out (patched: no seam of its own)."""
    monkeypatch.setattr("mcp_preconditions.gateway.upstream.peer.NOTIFY_SECONDS", 0.5)


@dataclass(frozen=True)
class Row:
    behaviour: str
    bad: str  # "answered": the call gets its own answer; "error": a tool error naming the server;
    # "unlisted": the server never connects, so its tool is never listed (and never forwarded)
    calls: int = 1  # calls made to the hostile server at once


ROWS = [
    Row("negative-length", "error"),
    Row("two-lengths", "error"),
    Row("garbage-first", "error"),
    Row("chunk-plus", "error"),
    Row("chunk-hex-prefix", "error"),
    Row("chunk-without-crlf", "error"),
    Row("reset-after-read", "error"),
    Row("no-content-204", "error"),
    Row("not-modified-304", "error"),
    Row("continue-100", "answered"),
    Row("endless-event", "error"),
    Row("endless-line", "error"),
    Row("huge-chunk", "error"),
    Row("endless-get-stream", "answered"),
    Row("list-changed-storm", "answered"),
    Row("session-id-injection", "unlisted"),
    Row("answer-on-a-stream-left-open", "answered"),
    Row("never-accepts-initialized", "answered"),
    Row("one-malformed-answer", "mixed", calls=2),
    Row("answers-another-call", "error", calls=2),
    Row("a-second-response-unasked", "answered", calls=2),
]


def peak_rss_mb() -> tuple[float, float]:
    """(current, peak) resident memory of this process, from /proc."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines()
                  if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def reset_peak_rss() -> None:
    """The peak from now on (Linux: 5 in clear_refs resets the high-water mark)."""
    Path("/proc/self/clear_refs").write_text("5")


@asynccontextmanager
async def gateway_beside(tmp_path: Path, hostile: Hostile, *listen: str
                         ) -> AsyncIterator[InProcess]:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY, encoding="utf-8")
    servers = MemoryServers()
    with servers.installed():
        good = command(servers.logging_upstream("good", **logging_env(tmp_path / "good.jsonl")))
        config = write_gateway_toml(tmp_path / "gateway.toml", policy, {
            "good": good, "bad": {"url": hostile.url}})
        async with cli_gateway(["--config", str(config), *listen]) as gateway:
            await gateway.until_ready(lambda b: b["servers"]["good"]["tools_loaded"])
            yield gateway


async def call(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    async with asyncio.timeout(WAIT):
        result = await client.call_tool(name, arguments)
    return result.model_dump(by_alias=True, mode="json", exclude_none=True, exclude={"result_type"})


async def good_calls(client: Client, count: int) -> list[dict[str, Any]]:
    return [await call(client, "good__echo", {}) for _ in range(count)]


@pytest.mark.parametrize("row", ROWS, ids=[r.behaviour for r in ROWS])
async def test_a_hostile_server_hurts_nobody_else(tmp_path: Path, row: Row) -> None:
    with hostile_server(row.behaviour) as hostile:
        async with gateway_beside(tmp_path, hostile, "--listen", "http://127.0.0.1:0") as gateway, \
                gateway.client("legacy") as client:
            before = await good_calls(client, 1)
            if row.bad != "unlisted":
                await gateway.until_ready(lambda b: b["servers"]["bad"]["tools_loaded"])
            reset_peak_rss()
            rss_before, _ = peak_rss_mb()
            texts = [f"call-{i}" for i in range(row.calls)]
            bad_calls = asyncio.gather(*(call(client, "bad__hit", {"text": t}) for t in texts))
            bad, during = await asyncio.gather(bad_calls, good_calls(client, 3))
            after = await good_calls(client, 3)
            _, peak = peak_rss_mb()
    for result in [*before, *during, *after]:  # the healthy server, before, during and after
        assert result["isError"] is False and result["structuredContent"]["echo"] == "hi", result
    assert peak - rss_before < RSS_GROWTH_MB, (peak, rss_before)
    outcomes = [_outcome(result, text) for result, text in zip(bad, texts, strict=True)]
    if row.bad == "mixed":
        assert sorted(outcomes) == ["answered", "error"], bad
    else:
        assert outcomes == [row.bad] * row.calls, bad
    calls = hostile.requests("tools/call")
    ids = [r.id for r in calls]
    assert len(ids) == len(set(ids)), ids  # nothing was sent twice
    if row.bad != "unlisted":
        assert sorted(str((r.params.get("arguments") or {}).get("text")) for r in calls) == texts
    assert not any("x-injected" in r.headers for r in hostile.received)  # nothing injected
    if row.behaviour == "list-changed-storm":  # re-lists one after another, not one each
        assert len(hostile.requests("tools/list")) < 1000, len(hostile.requests("tools/list"))
    if row.behaviour in ("one-malformed-answer", "reset-after-read", "chunk-plus"):
        assert len(hostile.requests("initialize")) == 1  # one bad answer is not a lost session


def _outcome(result: dict[str, Any], text: str) -> str:
    """What a call to the hostile server got: its own answer, a tool error naming the server, or
    a refusal of a tool the gateway never saw listed. Anything else (another call's answer) fails."""
    if result["isError"] is False:
        assert result["structuredContent"] == {"text": text}, result  # its own, never another's
        return "answered"
    said = result["content"][0]["text"]
    if said.startswith("server bad "):
        return "error"
    assert result["structuredContent"]["error"] == "unlisted_tool", result
    return "unlisted"


async def test_a_server_that_never_accepts_a_roots_notification_never_stalls_a_stdio_client(
        tmp_path: Path) -> None:
    with hostile_server("never-accepts-roots") as hostile:
        async with gateway_beside(tmp_path, hostile) as gateway, \
                stdio_pipe(gateway.gateway) as pipe:
            client = StdioClient(LEGACY, pipe=pipe)
            async with client.running():
                await client.handshake()
                await until(lambda: bool(hostile.requests("notifications/initialized")),
                            "the hostile server never got its handshake's end")
                answers = []
                for _ in range(3):  # each notification hangs at the hostile server; the client goes on
                    await client.notify("notifications/roots/list_changed")
                    answers.append(await client.call("tools/call", {"name": "good__echo",
                                                                    "arguments": {}}))
                # The notifications are sent beside the calls: the first may reach the hostile
                # server after the last answer.
                await until(lambda: bool(hostile.requests("notifications/roots/list_changed")),
                            "no roots notification reached the hostile server")
    assert all(a.answer is not None and a.answer["result"]["isError"] is False for a in answers)
    assert len(hostile.requests("notifications/roots/list_changed")) >= 1
    assert sys.platform.startswith("linux")  # /proc is read above
