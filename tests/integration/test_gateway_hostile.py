"""A hostile server (tests/fixtures/hostile_server.py: raw sockets, misbehaving byte by byte) behind a
real gateway, next to a healthy server, one row per misbehaviour of issue 30's table. For every row:
the healthy server's calls keep working (during and after), the gateway's memory stays bounded
(its peak RSS from /proc), nothing runs twice (the hostile server counts what it received), and
each call gets its own answer or a tool error naming the server, never another call's answer.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.fixtures.fleet import fleet_http, logging_upstream, write_gateway_toml
from tests.fixtures.gateway_upstream import CLI, ROOT, upstream_env
from tests.fixtures.hostile_server import Hostile, hostile_server
from tests.fixtures.transcript import LEGACY, StdioClient
from tests.fixtures.upstreams import Listening

pytestmark = pytest.mark.integration

# Small bounds (settable), so a row that passes one does it quickly; a generous call timeout.
POLICY = "[gateway]\ncall_timeout_seconds = 15\nmax_response_bytes = 1048576\n" \
         "max_event_bytes = 262144\n"
RSS_GROWTH_MB = 64  # the gateway's peak RSS may grow by this much at most while a row runs
WAIT = 60.0


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


def peak_rss_mb(pid: int) -> tuple[float, float]:
    """(current, peak) resident memory of a process, from /proc."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                  if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


@contextmanager
def gateway_beside(tmp_path: Path, hostile: Hostile) -> Iterator[Listening]:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY, encoding="utf-8")
    config = write_gateway_toml(tmp_path / "gateway.toml", policy, {
        "good": logging_upstream(tmp_path / "good.jsonl"), "bad": {"url": hostile.url}})
    with fleet_http(config) as gateway:
        yield gateway


async def call(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    async with asyncio.timeout(WAIT):
        result = await client.call_tool(name, arguments)
    return result.model_dump(by_alias=True, mode="json", exclude_none=True, exclude={"result_type"})


async def good_calls(client: Client, count: int) -> list[dict[str, Any]]:
    return [await call(client, "good__echo", {}) for _ in range(count)]


async def until_listed(client: Client) -> None:
    async with asyncio.timeout(WAIT):
        while "bad__hit" not in {t.name for t in (await client.list_tools()).tools}:
            await asyncio.sleep(0.2)


@pytest.mark.parametrize("row", ROWS, ids=[r.behaviour for r in ROWS])
async def test_a_hostile_server_hurts_nobody_else(tmp_path: Path, row: Row) -> None:
    with hostile_server(row.behaviour) as hostile, gateway_beside(tmp_path, hostile) as gateway:
        pid = gateway.process.pid
        async with Client(gateway.url, mode="legacy") as client:
            before = await good_calls(client, 1)
            if row.bad != "unlisted":
                await until_listed(client)
            rss_before, _ = peak_rss_mb(pid)
            texts = [f"call-{i}" for i in range(row.calls)]
            bad_calls = asyncio.gather(*(call(client, "bad__hit", {"text": t}) for t in texts))
            bad, during = await asyncio.gather(bad_calls, good_calls(client, 3))
            after = await good_calls(client, 3)
            _, peak = peak_rss_mb(pid)
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
        policy = tmp_path / "policy.toml"
        policy.write_text(POLICY, encoding="utf-8")
        config = write_gateway_toml(tmp_path / "gateway.toml", policy, {
            "good": logging_upstream(tmp_path / "good.jsonl"), "bad": {"url": hostile.url}})
        client = StdioClient(LEGACY, [*CLI, "gateway", "--config", str(config)],
                             upstream_env(tmp_path / "good.jsonl"), str(ROOT))
        async with client.running():
            await client.handshake()
            async with asyncio.timeout(WAIT):
                while not hostile.requests("notifications/initialized"):
                    await asyncio.sleep(0.1)
            answers = []
            for _ in range(3):  # each notification hangs at the hostile server; the client goes on
                await client.notify("notifications/roots/list_changed")
                answers.append(await client.call("tools/call", {"name": "good__echo",
                                                                "arguments": {}}))
            # The notifications are sent beside the calls: the first may reach the hostile server
            # after the last answer on a loaded machine.
            async with asyncio.timeout(WAIT):
                while not hostile.requests("notifications/roots/list_changed"):
                    await asyncio.sleep(0.1)
    assert all(a.answer is not None and a.answer["result"]["isError"] is False for a in answers)
    assert len(hostile.requests("notifications/roots/list_changed")) >= 1
    assert sys.platform.startswith("linux")  # /proc is read above
