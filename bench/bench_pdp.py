"""Issue 44: what `pdp:` costs a call, side by side in one run. A real Cerbos PDP (npm cerbos,
tests/fixtures/cerbos/policies/tool.yaml) decides the tool `echo`; the same verified caller calls
it with and without `pdp:corp` among its requirements.

- cached (goal: at most 10 µs added at p50): `check_now` of the tool whose decision the cache
  holds, against the same tool without `pdp:` (interleaved, the adapters' hot path: no await);
- uncached (`cache_seconds = 0`, goal: one round trip per call and nothing else): every call asks
  Cerbos; its p50 beside a bare round trip of the same request on the same kind of client, and the
  HTTP requests the guard made per call (counted by its transport).

Run: .venv/bin/python -m bench.bench_pdp
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx2
from tests.fixtures.cerbos import CerbosPdp

from bench import interleaved, percentile
from mcp_preconditions import Credentials, Guard, LiveSources, Principal, parse_policy
from mcp_preconditions.decisions import DecisionRecorder
from mcp_preconditions.pdp.live import PdpLive

RUNS = 20_000
ROUND_TRIPS = 400
POLICY = """
[pdp.corp]
url = "{url}"
subject_claims = ["roles"]
cache_seconds = {cache}
[tools.plain]
requirements = ["auth:oauth2", "auth:claim:team:ops"]
[tools.echo]
requirements = ["auth:oauth2", "auth:claim:team:ops", "pdp:corp"]
"""
CALLER = Principal.from_claims({"sub": "ada", "iss": "https://idp.example", "team": "ops",
                                "roles": ["operator"]})
ARGUMENTS = {"text": "hello"}


class _NoRecord:
    def record(self, decision: Any) -> None:
        return None


class Counting(httpx2.AsyncBaseTransport):
    """The guard's HTTP transport, counting the requests it sends."""

    def __init__(self) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.requests = 0

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.requests += 1
        return await self.inner.handle_async_request(request)


def _guard(url: str, cache: float, transport: Counting | None = None) -> Guard:
    recorder: DecisionRecorder = _NoRecord()
    return Guard(parse_policy(POLICY.format(url=url, cache=cache).encode(), "bench-pdp.toml"),
                 entry_points=False, recorder=recorder,
                 live=LiveSources(pdp=PdpLive(transport=transport)))


def cached(url: str) -> dict[str, float]:
    guard = _guard(url, 3600)
    credentials = Credentials(principal=CALLER)
    first = asyncio.run(guard.check("echo", credentials, ARGUMENTS))  # asks Cerbos once
    assert first.allowed, first
    for tool in ("plain", "echo"):
        decision = guard.check_now(tool, credentials, ARGUMENTS)
        assert getattr(decision, "allowed", False), (tool, decision)  # answered at once
    samples = interleaved({"plain": lambda: guard.check_now("plain", credentials, ARGUMENTS),
                           "echo": lambda: guard.check_now("echo", credentials, ARGUMENTS)}, RUNS)
    plain, echo = percentile(samples["plain"], 50), percentile(samples["echo"], 50)
    return {"pdp_plain_p50_us": plain / 1000, "pdp_cached_p50_us": echo / 1000,
            "pdp_cached_added_us": (echo - plain) / 1000}


async def _uncached(url: str) -> dict[str, float]:
    transport = Counting()
    guard = _guard(url, 0, transport)
    credentials = Credentials(principal=CALLER)
    assert (await guard.check("echo", credentials, ARGUMENTS)).allowed  # (reads the metadata)
    body = json.dumps({"evaluations": [{
        "subject": {"type": "identity", "id": "ada",
                    "properties": {"roles": ["operator"], "iss": "https://idp.example"}},
        "action": {"name": "tools/call"},
        "resource": {"type": "tool", "id": "echo", "properties": {"arguments": ARGUMENTS}},
        "context": {"requirement": "pdp:corp"}}]}).encode()
    calls: list[int] = []
    bare: list[int] = []
    async with httpx2.AsyncClient() as client:
        before = transport.requests
        for _ in range(ROUND_TRIPS):  # alternating, so the machine's noise falls on both
            start = time.perf_counter_ns()
            decision = await guard.check("echo", credentials, ARGUMENTS)
            calls.append(time.perf_counter_ns() - start)
            assert decision.allowed
            start = time.perf_counter_ns()
            answer = await client.post(f"{url}/access/v1/evaluations", content=body,
                                       headers={"Content-Type": "application/json"})
            bare.append(time.perf_counter_ns() - start)
            assert answer.json() == {"evaluations": [{"decision": True}]}
        made = transport.requests - before
    call, trip = percentile(calls, 50), percentile(bare, 50)
    return {"pdp_uncached_p50_us": call / 1000, "pdp_round_trip_p50_us": trip / 1000,
            "pdp_uncached_added_us": (call - trip) / 1000,
            "pdp_uncached_round_trips": made / ROUND_TRIPS}


def run() -> dict[str, float]:
    cerbos = CerbosPdp()
    cerbos.start()
    try:
        return {**cached(cerbos.url), **asyncio.run(_uncached(cerbos.url))}
    finally:
        cerbos.stop()


if __name__ == "__main__":
    for key, value in run().items():
        print(f"{key}: {value:,.3f}")
