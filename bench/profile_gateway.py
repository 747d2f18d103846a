"""Where a Python proxy's CPU per call goes, by layer: the system under 50 concurrent sessions of the
bench's load generator, sampled by py-spy (it reads the running process; nothing in it changes),
each sample charged to the layer of its innermost Python frame (self time) and to every layer on its
stack (inclusive time), in ms of CPU per call from /proc. Not part of `make bench`.

    pip install py-spy   # into .venv
    .venv/bin/python -m bench.profile_gateway [gateway|gateway_httpup|fastmcp|--with NAME=COMMAND]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from bench.loadgen import Load, load
from bench.systems import POLICY, Running, everything

# Library primitives (asyncio's Event and current_task, weakref, contextlib, typing, sniffio...): their
# time is charged to the layer that called them.
GLUE = "glue"
PRIMITIVES = ("asyncio/locks.py", "asyncio/mixins.py", "asyncio/queues.py", "current_task (")
# (layer, path fragments of its files): the first match wins, so the specific SDK modules come first.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # The relay's own stages (issue 25), then the guard and what records a decision, then the rest.
    ("HTTP/1.1 listener (http11, exchange, admission; llhttp through httptools)",
     ("gateway/downstream/http11.py", "gateway/downstream/exchange.py",
      "gateway/downstream/admission.py", "gateway/downstream/http_server.py", "httptools/")),
    ("relay: HTTP framing (http, streamable, sse, sessions)",
     ("gateway/downstream/app.py", "gateway/downstream/streamable.py",
      "gateway/downstream/sse.py", "gateway/downstream/sessions.py", "gateway/downstream/listener.py",
      "gateway/downstream/stdio.py")),
    ("relay: protocol and pipeline (dispatch, gateway, decide, forward, session)",
     ("gateway/dispatch.py", "gateway/gateway.py", "gateway/decide.py", "gateway/forward.py",
      "gateway/callers.py", "gateway/clients.py", "gateway/bridge.py",
      "gateway/fleet.py",
      "gateway/jsonrpc.py", "gateway/route.py", "gateway/rounds.py")),
    ("relay: upstream link (peer, server, stdio/HTTP client)",
     ("gateway/upstream/",)),
    ("guard: decision and its record", ("mcp_preconditions/guard.py", "mcp_preconditions/snapshot.py",
                                        "mcp_preconditions/outcomes.py", "mcp_preconditions/decision",
                                        "mcp_preconditions/principal.py", "mcp_preconditions/resolvers/")),
    ("telemetry (metrics, no-op spans)", ("mcp_preconditions/telemetry/", "mcp_preconditions/spans.py")),
    ("our code (mcp_preconditions)", ("mcp_preconditions/",)),
    ("SDK streamable-HTTP server + session manager", ("mcp/server/streamable_http",
                                                      "mcp/server/_streamable_http")),
    ("SDK streamable-HTTP client (upstream)", ("mcp/client/streamable_http", "mcp/client/_transport")),
    ("SDK stdio client (upstream)", ("mcp/client/stdio",)),
    ("SDK session / dispatcher / runner", ("mcp/shared/", "mcp/server/", "mcp/client/", "fastmcp/")),
    ("pydantic validation and dumps", ("pydantic", "mcp_types/")),
    ("uvicorn (httptools or h11)", ("uvicorn/", "h11/", "httptools/")),
    ("starlette + sse-starlette", ("starlette/",)),
    ("httpx (upstream HTTP client)", ("httpx", "httpcore")),
    ("anyio streams, task groups, cancel scopes", ("anyio/", "sniffio/")),
    (GLUE, PRIMITIVES),
    ("socket and pipe reads and writes (syscalls)", ("Transport.write (", "Transport._read_ready",
                                                     "Transport._write_ready", "selectors.py",
                                                     "socket.py")),
    ("asyncio scheduling (tasks, callbacks, events)", ("asyncio/",)),
    ("json (stdlib)", ("json/",)),
    ("logging", ("logging/",)),
    ("opentelemetry (no-op spans)", ("opentelemetry/",)),
    (GLUE, ("",)),
)


def layer(frame: str) -> str:
    """The layer of one py-spy frame, `function (path:line)`."""
    return next(name for name, parts in LAYERS if any(p in frame for p in parts))


def charged(frames: Sequence[str]) -> str:
    """The layer a sample's self time is charged to: its innermost frame's, or for glue (the
    standard library's helpers), the layer of the nearest caller that is not glue. Code of no
    known layer (a prototype's own) is "other"."""
    for frame in reversed(frames):
        name = layer(frame)
        if name != GLUE:
            return name
        if not _stdlib(frame):
            return "other"
    return "other"


def _stdlib(frame: str) -> bool:
    return ("/lib/python3" in frame and "site-packages" not in frame) or "<frozen" in frame \
        or "<string>" in frame or "sniffio/" in frame


# A thread blocked in waitpid (asyncio's child watcher) is idle, though py-spy cannot tell.
IDLE = ("_do_waitpid (",)


def by_layer(raw: str) -> tuple[Counter[str], Counter[str], int]:
    """Self and inclusive sample counts per layer, and the total, from py-spy's raw output.
    Inclusive counts only frames above the event loop's step (`Handle._run`): the work of one task
    step, not the `main -> anyio.run -> run_forever` every sample sits on."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        if any(i in frames[-1] for i in IDLE):
            continue
        n = int(count)
        total += n
        own[charged(frames)] += n
        step = max((i for i, f in enumerate(frames) if f.startswith("Handle._run (")), default=-1)
        for name in {layer(f) for f in frames[step + 1:]} - {GLUE}:
            inclusive[name] += n
    return own, inclusive, total


def profile(system: Running, seconds: float, rate: int) -> tuple[str, float, float]:
    """py-spy's raw samples of `system` under 50 sessions, its CPU ms per call, and calls/s."""
    with tempfile.NamedTemporaryFile(suffix=".txt") as out:
        spy = [str(Path(sys.executable).parent / "py-spy"), "record", "-p", str(system.root), "-f", "raw",
               "-r", str(rate), "-d", str(int(seconds)), "--full-filenames", "-o", out.name]
        done: list[Load] = []
        thread = threading.Thread(
            target=lambda: done.append(asyncio.run(load(system.url, 50, seconds, 1.0, system.own_cpu_s))))
        thread.start()
        time.sleep(1.0)  # the load's warm-up
        subprocess.run(spy, check=True, capture_output=True)
        thread.join()
        first, last = done[0].probes
        assert isinstance(first, float) and isinstance(last, float)
        per_call = (last - first) / done[0].calls * 1e3
        return Path(out.name).read_text(encoding="utf-8"), per_call, done[0].calls / done[0].seconds


def report(name: str, raw: str, per_call: float, rate: float) -> str:
    own, inclusive, total = by_layer(raw)
    lines = [f"{name}: {rate:.0f} calls/s at 50 clients, {per_call:.2f} ms of its own CPU per call, "
             f"{total} samples", f"{'layer':<48} {'self %':>7} {'ms/call':>8} {'incl. %':>8}"]
    for layer_name in [*dict(LAYERS), "other"]:
        if own[layer_name] or inclusive[layer_name]:
            share = own[layer_name] / total
            lines.append(f"{layer_name:<48} {share:7.1%} {share * per_call:8.3f} "
                         f"{inclusive[layer_name] / total:8.1%}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_gateway")
    parser.add_argument("systems", nargs="*", default=["gateway"])
    parser.add_argument("--with", dest="extra", action="append", default=[], metavar="NAME=COMMAND")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--raw", type=Path, help="keep py-spy's raw samples in this directory")
    args = parser.parse_args(argv)
    logging.getLogger("mcp.client.streamable_http").setLevel(logging.CRITICAL)
    extra = dict(e.split("=", 1) for e in args.extra)
    with tempfile.TemporaryDirectory() as tmp:
        policy = Path(tmp) / "echo.toml"
        policy.write_text(POLICY, encoding="utf-8")
        with everything(policy, extra, [*args.systems, *extra]) as systems:
            for name in [*args.systems, *extra]:
                raw, per_call, rate = profile(systems[name], args.seconds, args.rate)
                if args.raw:
                    (args.raw / f"{name}.txt").write_text(raw, encoding="utf-8")
                print(report(name, raw, per_call, rate), flush=True)


if __name__ == "__main__":
    main()
