"""Issue 44: our decision point (`mcp-preconditions pdp --policy policies/authzen-todo.toml`) and a real
Cerbos PDP (npm cerbos, tests/fixtures/cerbos/policies/) answering the AuthZEN interop Todo decisions
(tests/data/authzen/), side by side in one run: the same requests (every subject's roles and email
as its properties, which Cerbos needs; ours reads them as claims), the same client (keep-alive
HTTP/1.1 on raw asyncio streams, bench/loadgen.py's reader), the same concurrency, the same machine.

Every answer is checked against the decision file before anything is timed (agreement first). The
two systems are measured in alternating slices, so a noisy moment spreads over both, and
`authzen_vs_cerbos` is the median of the slice-by-slice ratios (each pair of slices measured back
to back: on a shared machine the neighbours' load moves both alike). A decision is
one evaluation (a batch of two is two); a request is one HTTP exchange. `authzen_ours_plain_per_s`
is ours again with the file's own requests (no properties: the policy's directory names the users).
Beside the rates, each server's own CPU time per decision (`_cpu_us`, from /proc): on a shared
machine the rates move with the neighbours, the CPU a decision costs much less.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from tests.fixtures.authzen import TODO_POLICY, pdp_server, todo_decisions, with_properties
from tests.fixtures.cerbos import CerbosPdp

from bench import percentile
from bench.loadgen import read_response

CLIENTS = 16  # concurrent keep-alive connections, each sending its next request once answered
SLICE_S, ROUNDS, WARMUP_S = 2.0, 5, 1.0


@dataclass(frozen=True)
class Ask:
    """One request: its path, its bytes on the wire, its decisions and the answer it must get."""

    path: str
    body: bytes
    decisions: int
    expected: Any


def asks(enriched: bool) -> list[Ask]:
    """The decision file's requests (enriched: as Cerbos needs them) with their expected answers."""
    data = todo_decisions()
    out = []
    for kind, path in (("evaluation", "/access/v1/evaluation"),
                       ("evaluations", "/access/v1/evaluations")):
        for case in data[kind]:
            request = with_properties(case["request"]) if enriched else case["request"]
            expected = ({"evaluations": case["expected"]} if kind == "evaluations"
                        else case["expected"])
            out.append(Ask(path, json.dumps(request).encode(),
                           len(case["expected"]) if kind == "evaluations" else 1, expected))
    return out


def agrees(ask: Ask, answer: Any) -> bool:
    if isinstance(ask.expected, bool):
        return isinstance(answer, dict) and answer.get("decision") is ask.expected
    found = [{"decision": d.get("decision")} for d in answer.get("evaluations", [])]
    return bool(found == ask.expected["evaluations"])


@dataclass
class Tally:
    decisions: int = 0
    seconds: float = 0.0
    cpu_s: float = 0.0  # the server process's
    latencies: list[int] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)  # decisions per second, slice by slice


def cpu_of(pid: int) -> float:
    """A process's CPU seconds so far (user + system, every thread), from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Client:
    """One keep-alive connection sending the asks in turn."""

    def __init__(self, url: str, asks: list[Ask], offset: int) -> None:
        self.parts = urllib.parse.urlsplit(url)
        self.requests = [(a, self._request(a)) for a in asks[offset:] + asks[:offset]]
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    def _request(self, ask: Ask) -> bytes:
        return (b"POST " + ask.path.encode() + b" HTTP/1.1\r\nhost: " + self.parts.netloc.encode()
                + b"\r\ncontent-type: application/json\r\ncontent-length: "
                + str(len(ask.body)).encode() + b"\r\n\r\n" + ask.body)

    async def exchange(self, request: bytes) -> bytes:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.parts.hostname,
                                                                     self.parts.port)
        assert self.reader is not None
        self.writer.write(request)
        return (await read_response(self.reader))[1]

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def check(url: str, asked: list[Ask]) -> None:
    client = Client(url, asked, 0)
    try:
        for ask, request in client.requests:
            answer = json.loads(await client.exchange(request))
            if not agrees(ask, answer):
                raise AssertionError(f"{url} answered {answer} to {ask.body[:200]!r}, expected "
                                     f"{ask.expected}")
    finally:
        client.close()


async def run_slice(url: str, asked: list[Ask], seconds: float, tally: Tally | None,
                    pid: int = 0) -> None:
    """CLIENTS connections for `seconds`; what completes counts into `tally` (None: a warm-up),
    with the CPU time the server process `pid` spent meanwhile."""
    clients = [Client(url, asked, i * len(asked) // CLIENTS) for i in range(CLIENTS)]
    stop = time.perf_counter() + seconds
    decisions, latencies = 0, []

    async def loop(client: Client) -> None:
        nonlocal decisions
        i = 0
        while time.perf_counter() < stop:
            ask, request = client.requests[i % len(client.requests)]
            start = time.perf_counter_ns()
            await client.exchange(request)
            latencies.append(time.perf_counter_ns() - start)
            decisions += ask.decisions
            i += 1

    began, cpu = time.perf_counter(), cpu_of(pid) if pid else 0.0
    try:
        await asyncio.gather(*(loop(c) for c in clients))
    finally:
        for client in clients:
            client.close()
    if tally is not None:
        tally.rates.append(decisions / (time.perf_counter() - began))
        tally.decisions += decisions
        tally.seconds += time.perf_counter() - began
        tally.cpu_s += (cpu_of(pid) - cpu) if pid else 0.0
        tally.latencies += latencies


async def compare(systems: dict[str, tuple[str, int, list[Ask]]]) -> dict[str, Tally]:
    """Each system (URL, server pid, its asks) checked, warmed up, then measured in turns."""
    for url, _, asked in systems.values():
        await check(url, asked)
        await run_slice(url, asked, WARMUP_S, None)
    tallies = {name: Tally() for name in systems}
    for _ in range(ROUNDS):
        for name, (url, pid, asked) in systems.items():
            await run_slice(url, asked, SLICE_S, tallies[name], pid)
    return tallies


def run() -> dict[str, float]:
    enriched, plain = asks(True), asks(False)
    cerbos = CerbosPdp()
    cerbos.start()
    try:
        with pdp_server(TODO_POLICY, "--policy-poll-seconds", "0") as ours:
            assert cerbos.process is not None
            tallies = asyncio.run(compare({
                "ours": (ours.url, ours.process.pid, enriched),
                "cerbos": (cerbos.url, cerbos.process.pid, enriched),
                "ours_plain": (ours.url, ours.process.pid, plain)}))
    finally:
        cerbos.stop()
    out: dict[str, float] = {"authzen_clients": float(CLIENTS)}
    for name, tally in tallies.items():
        out[f"authzen_{name}_per_s"] = tally.decisions / tally.seconds
        out[f"authzen_{name}_p50_ms"] = percentile(tally.latencies, 50) / 1e6
        out[f"authzen_{name}_p99_ms"] = percentile(tally.latencies, 99) / 1e6
        out[f"authzen_{name}_cpu_us"] = tally.cpu_s / tally.decisions * 1e6
    out["authzen_vs_cerbos"] = statistics.median(
        ours / cerbos for ours, cerbos in zip(tallies["ours"].rates, tallies["cerbos"].rates,
                                              strict=True))
    out["authzen_cpu_vs_cerbos"] = out["authzen_ours_cpu_us"] / out["authzen_cerbos_cpu_us"]
    return out


if __name__ == "__main__":
    for key, value in run().items():
        print(f"{key}: {value:,.3f}")
