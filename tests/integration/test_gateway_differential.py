"""Issue 25, item 8: the new relay path held to the old SDK-session path. Random message sequences
(tools/list, allowed, denied and unknown calls, prompts, resources, subscriptions, progress,
cancellation, the upstream's own requests and input rounds, logging, malformed requests) go through
both, on stdio and HTTP, at 2025-11-25 and 2026-07-28, in front of stdio, HTTP and 2026-only
upstreams; what reaches the upstream (its log) and what reaches the client must be the same, modulo
ids. The old path is `MCP_PRECONDITIONS_GATEWAY_IMPL=sdk`.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import json
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures import asking_upstream
from tests.fixtures.gateway_upstream import CLI, ROOT, UPSTREAM_STDIO, free_port, read_log, started
from tests.fixtures.gateway_upstream import upstream_http as serve_upstream_http
from tests.fixtures.transcript import LEGACY, MODERN, HttpClient, RawClient, StdioClient, environment

pytestmark = pytest.mark.integration

POLICY = '[tools.secret]\nrequirements = ["auth:claim:tenant:acme"]\n[tools.echo]\nrequirements = []\n'
Step = Callable[[RawClient], Awaitable[Any]]


def _tool(name: str, **arguments: Any) -> Step:
    return lambda c: c.call("tools/call", {"name": name, "arguments": arguments})


STEPS: dict[str, Step] = {
    "list_tools": lambda c: c.call("tools/list"),
    "echo": _tool("echo", text="hi"),
    "denied": _tool("secret"),
    "unknown": _tool("no_such_tool"),
    "progress": lambda c: c.call("tools/call", {"name": "slow", "arguments": {"seconds": 0.05},
                                                "_meta": {"progressToken": "p1"}}),
    "cancel": lambda c: c.cancel_after(0.5, "tools/call", {"name": "slow", "arguments": {"seconds": 3}}),
    "prompts": lambda c: c.call("prompts/list"),
    "prompt": lambda c: c.call("prompts/get", {"name": "greet", "arguments": {"name": "Ada"}}),
    "resources": lambda c: c.call("resources/list"),
    "read": lambda c: c.call("resources/read", {"uri": "test://note"}),
    "subscribe": lambda c: c.call("resources/subscribe", {"uri": "test://note"}),
    "ping": lambda c: c.call("ping"),
    "level": lambda c: c.call("logging/setLevel", {"level": "info"}),
    "bad_method": lambda c: c.call("no/such/method"),
    "bad_params": lambda c: c.call("tools/call", {"arguments": {}}),
    "ask": _tool("ask"),
    "flip": lambda c: _settled(_tool("flip")(c)),
    "listen_flip": lambda c: c.listen_during({"toolsListChanged": True}, _tool("flip")),
}
ASKING_STEPS: dict[str, Step] = {
    "list_tools": STEPS["list_tools"], "ask": _tool("ask"), "other": _tool("other"),
    "log": lambda c: c.call("tools/call", {"name": "log", "arguments": {"tag": "t"}}, log_level="info"),
    "log_unasked": _tool("log", tag="u"), "level": STEPS["level"],
    "resources": STEPS["resources"], "subscribe_a": lambda c: c.call("resources/subscribe", {"uri": "test://a"}),
    "touch_a": _tool("touch", uri="test://a"), "read_b": lambda c: c.call("resources/read", {"uri": "test://b"}),
    "listen_touch": lambda c: c.listen_during({"resourceSubscriptions": ["test://a"]},
                                              _tool("touch", uri="test://a")),
    "wait": _tool("wait", seconds=0.1),
}


async def _settled(step: Awaitable[Any]) -> Any:
    """A step after which the servers are listed again: the old path may answer the next request
    from the listing the server just said is gone (see test_gateway_attacks), so both are given
    the time to list again before the script goes on."""
    done = await step
    await asyncio.sleep(1.0)
    return done


def script(steps: dict[str, Step], seed: int, length: int = 10) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(sorted(steps)) for _ in range(length)]


async def run(client: RawClient, names: list[str], steps: dict[str, Step]) -> dict[str, Any]:
    """What the client saw, step by step, ids of the server's own requests and states blanked.
    List changes come when the servers have been listed again, on the stream of whatever request
    is in flight then: they are compared as the set of kinds the client heard of."""
    changed: set[str] = set()
    seen: list[Any] = [{"handshake": _exchange(await client.handshake(), changed)}]
    for name in names:
        seen.append({name: _exchange(await steps[name](client), changed)})
    await _quiet(client)  # notifications a step caused (list changes) arrive
    unasked = [m for m in client.unasked if not _list_change(m, changed)]
    return _blank({"steps": seen, "unasked": sorted(json.dumps(m, sort_keys=True) for m in unasked),
                   "asked": client.asked, "list_changed": sorted(changed)})


async def _quiet(client: RawClient, quiet: float = 1.5, limit: float = 8.0) -> None:
    """Wait until nothing has arrived unasked for `quiet` seconds (at most `limit`)."""
    deadline = time.monotonic() + limit
    count = -1
    while count != len(client.unasked) and time.monotonic() < deadline:
        count = len(client.unasked)
        await asyncio.sleep(quiet)


def _list_change(message: dict[str, Any], changed: set[str]) -> bool:
    method = message.get("method", "")
    if method.endswith("/list_changed"):
        changed.add(method)
        return True
    return False


def _exchange(exchange: Any, changed: set[str]) -> Any:
    if exchange is None:
        return None
    return {"before": [m for m in exchange.before if not _list_change(m, changed)],
            "answer": exchange.answer}


_BLANK_KEYS = {"requestState": "<state>", "progressToken": "<token>", "requestId": "<id>"}


def _blank(value: Any) -> Any:
    """Ids the two paths choose differently, as placeholders (the client's own ids stay)."""
    if isinstance(value, dict):
        out = {k: _BLANK_KEYS[k] if k in _BLANK_KEYS else _blank(v) for k, v in value.items()}
        if "method" in out and "id" in out:  # a server's request to the client
            out["id"] = "<id>"
        return out
    if isinstance(value, list):
        return [_blank(v) for v in value]
    if isinstance(value, str):
        return re.sub(r"mcp-preconditions-gateway:[\w-]+", "<state>", value)
    return value


def upstream_seen(log: Path, since: int = 0) -> dict[str, Any]:
    """What reached the upstream: its requests in order (listings apart: how often a server is
    listed again depends on timing), the routing headers of HTTP requests."""
    entries = read_log(log)[since:]
    kept = [{k: v for k, v in e.items() if k != "headers"} | {"headers": _headers(e.get("headers"))}
            for e in entries if e.get("method") not in ("tools/list", "prompts/list", "resources/list")]
    return _blank({"requests": kept,
                   "listed": sorted({e.get("method") for e in entries} & {"tools/list", "prompts/list"})})


def _headers(headers: Any) -> dict[str, Any]:
    keep = ("accept", "content-type", "mcp-protocol-version", "mcp-method", "mcp-name", "authorization")
    return {k: v for k, v in (headers or {}).items() if k in keep}


# -- the gateways --------------------------------------------------------------------------------
def _gateway_argv(policy: Path, upstream: list[str]) -> list[str]:
    return [*CLI, "gateway", "--policy", str(policy), *upstream]


@contextlib.asynccontextmanager
async def stdio_gateway(impl: str, policy: Path, upstream: list[str], version: str,
                        **env: str) -> AsyncIterator[RawClient]:
    extra = {"MCP_PRECONDITIONS_GATEWAY_IMPL": impl} if impl == "sdk" else {}
    client = StdioClient(version, _gateway_argv(policy, upstream), {**environment(**env), **extra},
                         str(ROOT))
    async with client.running():
        yield client


@contextlib.contextmanager
def http_gateway(impl: str, policy: Path, upstream: list[str], log: Path, **env: str) -> Iterator[str]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    extra = {"MCP_PRECONDITIONS_GATEWAY_IMPL": impl} if impl == "sdk" else {}
    argv = [*CLI, "gateway", "--policy", str(policy), "--listen", base, *upstream]
    full = {**environment(GATEWAY_UPSTREAM_LOG=str(log), ASKING_UPSTREAM_LOG=str(log), **env), **extra}
    with started(argv, full, base, base + "/readyz"):
        deadline = time.monotonic() + 30
        while httpx.get(base + "/readyz", timeout=30).status_code != 200:  # its server is up
            assert time.monotonic() < deadline, "the gateway never became ready"
            time.sleep(0.1)
        yield base + "/mcp"


def _files(tmp_path: Path, name: str) -> tuple[Path, Path]:
    policy = tmp_path / f"{name}.toml"
    policy.write_text(POLICY, encoding="utf-8")
    return policy, tmp_path / f"{name}.jsonl"


def _compare(old: Any, new: Any, what: str) -> None:
    if new != old:
        diff = difflib.unified_diff(json.dumps(old, indent=1, sort_keys=True).splitlines(),
                                    json.dumps(new, indent=1, sort_keys=True).splitlines(),
                                    "old path", "new path", lineterm="", n=4)
        pytest.fail(f"{what} differ:\n" + "\n".join(list(diff)[:300]), pytrace=False)


# -- stdio listener ------------------------------------------------------------------------------
@pytest.mark.parametrize("modern_only", [False, True], ids=["upstream-2025", "upstream-2026-only"])
@pytest.mark.parametrize("version", [LEGACY, MODERN])
@pytest.mark.parametrize("seed", range(3))
async def test_stdio_listener_old_and_new_agree(tmp_path: Path, version: str, seed: int,
                                                modern_only: bool) -> None:
    names = script(STEPS, seed + (100 if modern_only else 0))
    extra = {"GATEWAY_UPSTREAM_MODERN_ONLY": "1"} if modern_only else {}
    results = {}
    for impl in ("sdk", "relay"):
        policy, log = _files(tmp_path, impl)
        async with stdio_gateway(impl, policy, ["--", *UPSTREAM_STDIO], version,
                                 GATEWAY_UPSTREAM_LOG=str(log), **extra) as client:
            seen = await run(client, names, STEPS)
        results[impl] = (seen, upstream_seen(log))
    _compare(results["sdk"][0], results["relay"][0], f"what the client saw ({names})")
    _compare(results["sdk"][1], results["relay"][1], f"what the upstream saw ({names})")


@pytest.mark.parametrize("modern_only", [False, True], ids=["upstream-2025", "upstream-2026-only"])
@pytest.mark.parametrize("version", [LEGACY, MODERN])
@pytest.mark.parametrize("seed", range(3))
async def test_asking_upstream_old_and_new_agree(tmp_path: Path, version: str, seed: int,
                                                 modern_only: bool) -> None:
    names = script(ASKING_STEPS, 200 + seed + (100 if modern_only else 0))
    extra = {"ASKING_UPSTREAM_MODERN_ONLY": "1"} if modern_only else {}
    results = {}
    for impl in ("sdk", "relay"):
        policy, log = _files(tmp_path, impl)
        async with stdio_gateway(impl, policy, ["--", *asking_upstream.command()], version,
                                 ASKING_UPSTREAM_LOG=str(log), **extra) as client:
            seen = await run(client, names, ASKING_STEPS)
        results[impl] = (seen, read_log(log))
    _compare(results["sdk"][0], results["relay"][0], f"what the client saw ({names})")
    _compare(results["sdk"][1], results["relay"][1], f"what the upstream saw ({names})")


# -- HTTP listener -------------------------------------------------------------------------------
@pytest.mark.parametrize("upstream", ["stdio", "http", "asking", "asking-2026-only"])
@pytest.mark.parametrize("version", [LEGACY, MODERN])
def test_http_listener_old_and_new_agree(tmp_path: Path, version: str, upstream: str) -> None:
    results: dict[str, list[Any]] = {}
    steps = ASKING_STEPS if upstream.startswith("asking") else STEPS
    extra = {"ASKING_UPSTREAM_MODERN_ONLY": "1"} if upstream == "asking-2026-only" else {}
    for impl in ("sdk", "relay"):
        policy, log = _files(tmp_path, impl)
        with contextlib.ExitStack() as stack:
            if upstream == "http":
                target = ["--upstream-url", stack.enter_context(serve_upstream_http(log)).url]
            elif upstream == "stdio":
                target = ["--", *UPSTREAM_STDIO]
            else:
                target = ["--", *asking_upstream.command()]
            url = stack.enter_context(http_gateway(impl, policy, target, log, **extra))
            results[impl] = []
            for seed in range(4):
                names = script(steps, 300 + seed)
                since = len(read_log(log))
                seen = asyncio.run(_over_http(version, url, names, steps))
                results[impl].append((names, seen, upstream_seen(log, since)))
    for (names, old_seen, old_up), (_, new_seen, new_up) in zip(results["sdk"], results["relay"],
                                                                  strict=True):
        _compare(old_seen, new_seen, f"what the client saw ({names})")
        _compare(old_up, new_up, f"what the upstream saw ({names})")


async def _over_http(version: str, url: str, names: list[str], steps: dict[str, Step]
                     ) -> dict[str, Any]:
    client = HttpClient(version, url)
    async with client.running():
        return await run(client, names, steps)
