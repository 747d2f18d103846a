"""Three gateway replicas behind Debian's haproxy, sharing one redis-server and one flagd flag file
in front of one upstream (the cluster: test_replicas_cluster.py). Under load from 20 SDK clients (half
2025-11-25 sessions, half 2026-07-28 requests), every call is checked against an oracle while the
test flips state, publishes and tampers with bundles, stops Redis and kills a replica.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_preconditions.client import DENIAL_ERRORS_META_KEY
from mcp_preconditions.logsummary import summarize
from mcp_preconditions.policy.load import revision_of
from tests.fixtures.flagd import eventually
from tests.integration.test_replicas_cluster import (
    REPLICAS,
    SLACK,
    TTL,
    Cluster,
    _status,
    cluster_fixture,  # noqa: F401 - the module-scoped fixture `cluster`, shared by import
)

pytestmark = pytest.mark.integration
CLIENTS = 20
UNMET_STATE = json.dumps({"error": "unmet_requirements", "tool": "echo",
                          "unmet": ["state:launch.window"], "withheld": 0})


# -- the load and its oracle -----------------------------------------------------------------------
@dataclass(frozen=True)
class Call:
    """One tool call (or connection attempt, tool "connect") as a client saw it."""

    client: int
    tool: str
    start: float
    end: float
    # "allowed" | "denied" | "failed"; "denied-error" when every unmet requirement ended as `error`
    # (a backend lookup that failed or timed out: the fail-closed denial, never a wrong answer).
    outcome: str
    detail: str
    prior: str | None  # the replica that served this client's previous response


Event = tuple[float, str, Callable[[], object]]  # (seconds after the start, name, action)


async def load(url: str, seconds: float, events: list[Event]) -> tuple[list[Call], dict[str, float]]:
    """CLIENTS clients call `echo` and `env` in turn; once each has made one call, `events` run on
    a thread at their offsets, and the load goes on for `seconds` from then. Returns every call
    and, per event, the wall time its action started (`NAME:start`) and finished (`NAME`)."""
    calls: list[Call] = []
    at: dict[str, float] = {}
    warm: set[int] = set()
    clock = {"deadline": math.inf}

    async def run_events() -> None:
        while len(warm) < CLIENTS and len(calls) < 50 * CLIENTS:  # a bounded wait to warm up
            await asyncio.sleep(0.05)
        begin = at["begin"] = time.time()
        clock["deadline"] = begin + seconds
        for offset, name, action in events:
            await asyncio.sleep(max(0.0, begin + offset - time.time()))
            at[name + ":start"] = time.time()
            await asyncio.to_thread(action)
            at[name] = time.time()

    await asyncio.gather(run_events(), *(_client(n, url, clock, calls, warm) for n in range(CLIENTS)))
    return calls, at


async def _client(n: int, url: str, clock: dict[str, float], calls: list[Call], warm: set[int]
                  ) -> None:
    mode = "legacy" if n % 2 == 0 else "auto"  # a 2025-11-25 session, or 2026-07-28 requests
    seen: dict[str, str | None] = {"server": None}

    async def note(response: httpx2.Response) -> None:
        seen["server"] = response.headers.get("x-served-by")

    turn = n
    while time.time() < clock["deadline"]:
        start, prior = time.time(), seen["server"]
        try:
            async with httpx2.AsyncClient(timeout=httpx2.Timeout(30.0),
                                          event_hooks={"response": [note]}) as http, \
                    Client(streamable_http_client(url, http_client=http), mode=mode) as client:
                while time.time() < clock["deadline"]:
                    turn += 1
                    tool = "echo" if turn % 2 else "env"
                    start, prior = time.time(), seen["server"]
                    result = await client.call_tool(tool, {"text": "hi"})
                    calls.append(_call(n, tool, start, prior, result.model_dump(by_alias=True)))
                    warm.add(n)
        except Exception as exc:  # the session or the replica is gone: record, then reconnect
            calls.append(Call(n, "connect-or-call", start, time.time(), "failed", _why(exc), prior))
            await asyncio.sleep(0.05)


def _why(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


def _call(n: int, tool: str, start: float, prior: str | None, result: dict[str, Any]) -> Call:
    structured = result.get("structuredContent") or {}
    if not result.get("isError"):
        return Call(n, tool, start, time.time(), "allowed", "", prior)
    if structured.get("error") == "unmet_requirements":
        errors = (result.get("_meta") or {}).get(DENIAL_ERRORS_META_KEY) or []
        outcome = "denied-error" if set(structured["unmet"]) <= set(errors) else "denied"
        return Call(n, tool, start, time.time(), outcome, json.dumps(structured), prior)
    return Call(n, tool, start, time.time(), "failed", json.dumps(result)[:300], prior)


def wrongly_allowed(calls: list[Call], false_from: float, false_until: float) -> list[Call]:
    """`echo` calls allowed although they started a full TTL (plus slack) after `state:` became
    false and ended before it became true again: the oracle's "0 wrong allows"."""
    return [c for c in calls if c.tool == "echo" and c.outcome == "allowed"
            and c.start > false_from + TTL + SLACK and c.end < false_until]


def failed(calls: list[Call]) -> list[Call]:
    return [c for c in calls if c.outcome == "failed"]


def publish(cluster: Cluster, name: str, *, tampered: bool = False) -> str:
    """Publish bundle `name` (a new comment line, so a new revision); `tampered` serves it with the
    previous bundle's signature. Returns its revision."""
    body = cluster.policies["v1"].replace(b"# v1", f"# {name}".encode())
    previous = list(cluster.policies.values())[-1]
    cluster.policies[name] = body
    cluster.bundles.publish(body, cluster.key.sign(previous if tampered else body))
    return revision_of(body)


def revisions_after(cluster: Cluster, since: float) -> dict[str, set[str]]:
    """Per replica, the revisions of its decision records made after `since`."""
    out: dict[str, set[str]] = {name: set() for name in REPLICAS}
    for record in cluster.records():
        if record["time"] > since:
            out[record["replica"]].add(record["revision"])
    return out


def revisions_after_switching(cluster: Cluster, revision: str) -> dict[str, set[str]]:
    """Per replica, the revisions of its decision records made once it decided under `revision`
    (SLACK after its first such record: a decision begun just before the switch may end after
    it); an empty set for a replica that never did."""
    records = cluster.records()
    first: dict[str, float] = {}
    for record in records:
        if record["revision"] == revision:
            first[record["replica"]] = min(first.get(record["replica"], math.inf), record["time"])
    out: dict[str, set[str]] = {name: set() for name in REPLICAS}
    for record in records:
        if record["time"] >= first.get(record["replica"], math.inf) + SLACK:
            out[record["replica"]].add(record["revision"])
    return out


# -- the tests -------------------------------------------------------------------------------------
def test_an_unknown_session_gets_404_and_the_replica_keeps_serving(cluster: Cluster) -> None:
    """A 2025-11-25 session opened on gw1, sent straight to gw2 (as a load balancer that lost its
    stickiness would): 404, as the MCP spec says; gw2 then serves a new session and stays ready."""
    head = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "raw", "version": "1"}}}
    gw1, gw2 = cluster.gateways["gw1"].url, cluster.gateways["gw2"].url
    opened = httpx.post(gw1 + "/mcp", headers=head, json=init, timeout=10)
    session = opened.headers["mcp-session-id"]
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    elsewhere = httpx.post(gw2 + "/mcp", json=listing, timeout=10,
                           headers={**head, "mcp-session-id": session,
                                    "mcp-protocol-version": "2025-11-25"})
    assert elsewhere.status_code == 404
    assert elsewhere.json()["error"]["message"] == "Session not found"
    assert httpx.post(gw2 + "/mcp", headers=head, json=init, timeout=10).status_code == 200
    assert _status(gw2 + "/readyz") == 200
    assert cluster.gateways["gw2"].process.poll() is None


async def test_state_flip_bundle_publish_and_tampered_bundle_under_load(cluster: Cluster) -> None:
    cluster.set_state("true")
    v1 = revision_of(cluster.policies["v1"])
    revisions: dict[str, str] = {}
    events: list[Event] = [
        (2.0, "state-false", lambda: cluster.set_state("false")),
        (2.5, "v2", lambda: revisions.update(v2=publish(cluster, "v2"))),
        (5.0, "v3-tampered", lambda: revisions.update(v3=publish(cluster, "v3", tampered=True))),
        (6.5, "state-true", lambda: cluster.set_state("true")),
    ]
    calls, at = await load(cluster.url, 9.0, events)

    assert not failed(calls), failed(calls)[:5]
    assert wrongly_allowed(calls, at["state-false"], at["state-true:start"]) == []
    echo = [c for c in calls if c.tool == "echo"]
    # Liveness of the oracle itself: allowed before the flip, denied (state unmet) after it.
    assert any(c.outcome == "allowed" and c.end < at["state-false:start"] for c in echo)
    denied = [c for c in echo if at["state-false"] + TTL + SLACK < c.start
              and c.end < at["state-true:start"]]
    assert denied and {c.detail for c in denied} == {UNMET_STATE}, {c.detail for c in denied}
    assert all(c.outcome == "allowed" for c in calls if c.tool == "env")

    # Every replica moved to v2 (when its poll saw it: one interval, or later on a loaded machine)
    # and stayed there past the tampered v3.
    v2, v3 = revisions["v2"], revisions["v3"]
    assert revisions_after_switching(cluster, v2) == {n: {v2} for n in REPLICAS}
    before = revisions_after(cluster, 0)
    assert all(v1 in seen for seen in before.values()), before
    assert all(v3 not in seen for seen in before.values())
    labels = {(r["replica"], r["upstream"]) for r in cluster.records()}
    assert {replica for replica, _ in labels} == set(REPLICAS)
    assert {upstream for _, upstream in labels} == {cluster.upstream}
    summary = summarize([str(cluster.decisions)], lambda *_: None)
    assert {n: summary.replicas[n].last_revision for n in REPLICAS} == {n: v2 for n in REPLICAS}
    for gateway in cluster.gateways.values():
        assert "does not match the body for the configured public key" in gateway.output()
    cluster.bundles.publish(cluster.policies["v2"], cluster.key.sign(cluster.policies["v2"]))


async def test_redis_stopped_denies_state_with_error_and_recovers(cluster: Cluster) -> None:
    cluster.set_state("true")

    def restart() -> None:
        cluster.redis.start()
        cluster.set_state("true")

    calls, at = await load(cluster.url, 8.0, [(1.5, "redis-down", cluster.redis.kill),
                                               (5.5, "redis-up", restart)])
    assert not failed(calls), failed(calls)[:5]
    assert all(c.outcome == "allowed" for c in calls if c.tool == "env")  # flags: not affected
    outage = (at["redis-down"] + TTL + SLACK, at["redis-up:start"])
    during = [c for c in calls if c.tool == "echo" and outage[0] < c.start and c.end < outage[1]]
    assert during and {c.detail for c in during} == {UNMET_STATE}, during[:5]
    records = [r for r in cluster.records() if r["tool"] == "echo"
               and outage[0] < r["time"] < outage[1]]
    assert records and all("state:launch.window" in r["errors"] for r in records)
    assert {r["replica"] for r in records} == set(REPLICAS)
    after = [c for c in calls if c.tool == "echo" and c.start > at["redis-up"] + SLACK]
    assert after and all(c.outcome == "allowed" for c in after), after[:5]


async def test_killing_a_replica_loses_only_its_calls_and_haproxy_takes_it_out(
        cluster: Cluster) -> None:
    """Last in this module: gw2 stays dead."""
    cluster.set_state("true")
    victim = cluster.gateways["gw2"].process

    def kill_gw2() -> None:
        victim.kill()
        victim.wait()  # dead, its sockets closed: a call that starts after this is not in flight

    calls, at = await load(cluster.url, 7.0, [(2.0, "kill", kill_gw2)])

    kill = at["kill:start"]
    for call in failed(calls):
        in_flight = call.start <= at["kill"] and call.end >= kill
        on_victim = call.prior == "gw2" and call.end >= kill  # its session lived on gw2
        assert in_flight or on_victim, call
    assert [c for c in calls if c.outcome == "allowed" and c.tool == "echo"]
    # State stays true: no call is denied as unsatisfied. On two loaded cores a Redis read can
    # still time out, and that call is denied as an error (fail closed), which is not a loss.
    assert all(c.outcome != "denied" for c in calls), [c for c in calls if c.outcome == "denied"][:5]
    # After the kill, each client fails at most once, then works on another replica.
    for n in range(CLIENTS):
        mine = [c for c in calls if c.client == n and c.start > at["kill"]]
        assert len(failed(mine)) <= 1, failed(mine)
        assert mine and mine[-1].outcome == "allowed", mine[-3:]
    late = revisions_after(cluster, at["kill"] + SLACK)
    assert late["gw2"] == set() and late["gw1"] and late["gw3"]
    down = eventually(lambda: "gw2 is DOWN" in cluster.haproxy_log.read_text(errors="replace"),
                      True, 30)
    assert down, cluster.haproxy_log.read_text(errors="replace")[-2000:]
