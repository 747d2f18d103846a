"""The gateway with an open policy is transparent (issue 25, item 8): random message sequences
(tools/list, calls, prompts, resources, progress, cancellation, the server's own requests, logging,
subscriptions, malformed requests) sent to a server directly and through the gateway, on stdio and
HTTP, at 2025-11-25 and 2026-07-28, must reach the server and come back to the client the same,
modulo ids and what the gateway exists to change: the envelope fields it bridges between protocol
versions, the capabilities it announces, the requirements it puts on listed tools, and its own
handshake and listings upstream. (This test replaced the one that held the relay to the old SDK
path, message for message, before that path was removed.)
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import itertools
import json
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures import asking_upstream
from tests.fixtures.gateway_upstream import CLI, ROOT, UPSTREAM_STDIO, read_log, started
from tests.fixtures.gateway_upstream import upstream_http as serve_upstream_http
from tests.fixtures.ports import free_port
from tests.fixtures.transcript import LEGACY, MODERN, HttpClient, RawClient, StdioClient, environment

pytestmark = pytest.mark.integration

OPEN_POLICY = "# no requirements: every tool stays as the server declares it\n"
Step = Callable[[RawClient], Awaitable[Any]]
_SETTLE_IDS = itertools.count(10**6)  # far from the script's own ids


def _tool(name: str, **arguments: Any) -> Step:
    return lambda c: c.call("tools/call", {"name": name, "arguments": arguments})


async def _settled(client: RawClient, step: Awaitable[Any]) -> Any:
    """`step` (a `flip`), then nothing else until the server's new tool is listed: the gateway
    lists the server again first (it may take a while on a loaded machine)."""
    before = await _listed(client)
    done = await step
    async with asyncio.timeout(30):
        while len(await _listed(client)) <= len(before):
            await asyncio.sleep(0.05)
    return done


async def _listed(client: RawClient) -> list[Any]:
    """The tools listed now, asked with an id of its own (the script's ids stay as they are);
    what arrived meanwhile is kept as if it had come between two steps."""
    exchange = await client.send(next(_SETTLE_IDS), "tools/list", client.params("tools/list", None))
    client.unasked.extend(exchange.before)
    tools: list[Any] = (exchange.answer or {})["result"]["tools"]
    return tools


# Steps whose answer is the server's alone. Left out, with why: a tool that declares requirements
# (its call is decided: the gateway's job), a name the server does not list (refused unforwarded),
# logging/setLevel (answered for every server at once), `ask` at 2026-07-28 (a server of the
# handshake era is bridged into input rounds there).
STEPS: dict[str, Step] = {
    "list_tools": lambda c: c.call("tools/list"),
    "echo": _tool("echo", text="hi"),
    "progress": lambda c: c.call("tools/call", {"name": "slow", "arguments": {"seconds": 0.05},
                                                "_meta": {"progressToken": "p1"}}),
    "cancel": lambda c: c.cancel_running("tools/call", {"name": "slow", "arguments": {"seconds": 60}}),
    "prompts": lambda c: c.call("prompts/list"),
    "prompt": lambda c: c.call("prompts/get", {"name": "greet", "arguments": {"name": "Ada"}}),
    "resources": lambda c: c.call("resources/list"),
    "read": lambda c: c.call("resources/read", {"uri": "test://note"}),
    "ping": lambda c: c.call("ping"),
    "bad_method": lambda c: c.call("no/such/method"),
    "bad_params": lambda c: c.call("tools/call", {"arguments": {}}),
    "flip": lambda c: _settled(c, _tool("flip")(c)),
}
LEGACY_ONLY = {"ask": _tool("ask")}
ASKING_STEPS: dict[str, Step] = {
    "list_tools": STEPS["list_tools"], "other": _tool("other"), "wait": _tool("wait", seconds=0.1),
    "log": lambda c: c.call("tools/call", {"name": "log", "arguments": {"tag": "t"}}, log_level="info"),
    "resources": STEPS["resources"], "read_b": lambda c: c.call("resources/read", {"uri": "test://b"}),
    "touch_a": _tool("touch", uri="test://a"),
}
ASKING_LEGACY_ONLY = {"ask": _tool("ask"),
                      "subscribe_a": lambda c: c.call("resources/subscribe", {"uri": "test://a"})}
# Fields the gateway bridges between versions (SPEC §10): a result's completion marker and cache
# hints, and the server's name stamped into a 2026-07-28 result by whichever end spoke that version.
BRIDGED = ("resultType", "ttlMs", "cacheScope")
SERVER_INFO = "io.modelcontextprotocol/serverInfo"
ENVELOPE = ("io.modelcontextprotocol/protocolVersion", "io.modelcontextprotocol/clientInfo",
            "io.modelcontextprotocol/clientCapabilities", "io.modelcontextprotocol/logLevel")
# The logging server's tools that declare requirements (`bad`: unreadably): each is listed, and
# called, as the guard has it.
DECLARING = frozenset({"secret", "bad", "mirror"})
# What the gateway answers itself, never forwarding it: ping, and a request its version's schema
# refuses (the server is not bothered with it).
ANSWERED_HERE = frozenset({"ping", "no/such/method"})


def steps_for(base: dict[str, Step], version: str, *extras: tuple[str, dict[str, Step]]
              ) -> dict[str, Step]:
    out = dict(base)
    for only_at, more in extras:
        if only_at == version:
            out.update(more)
    return out


def script(steps: dict[str, Step], seed: int, length: int = 10) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(sorted(steps)) for _ in range(length)]


async def run(client: RawClient, names: list[str], steps: dict[str, Step],
              expected: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the client saw: each step's answer and what came before it on its stream, what came
    unasked, what the server asked the client; list changes apart, as the set of kinds.
    `expected`: what the client saw of the server directly; what came unasked then is waited for
    (it may come late through the gateway on a loaded machine), then anything more for a while."""
    changed: set[str] = set()
    seen: list[Any] = [{"handshake": _handshake(await client.handshake(), changed)}]
    for name in names:
        seen.append({name: _exchange(await steps[name](client), changed)})
    if expected is not None:
        await _until_covered(lambda: _seen_now(client, seen, changed), expected)
    await _quiet(client)
    return _seen_now(client, seen, changed)


def _seen_now(client: RawClient, seen: list[Any], changed: set[str]) -> dict[str, Any]:
    changed = set(changed)
    unasked = [m for m in client.unasked if not _list_change(m, changed)]
    normal: dict[str, Any] = _normal({
        "steps": seen, "unasked": sorted(json.dumps(m, sort_keys=True) for m in unasked),
        "asked": client.asked, "list_changed": sorted(changed)})
    return normal


async def _until_covered(now: Callable[[], dict[str, Any]], expected: dict[str, Any]) -> None:
    """Until what came unasked (messages, list changes, the server's requests) holds all that
    `expected` holds, for 30 s at most (then the comparison shows what is missing)."""
    def covered(seen: dict[str, Any]) -> bool:
        return (not Counter(expected["unasked"]) - Counter(seen["unasked"])
                and set(expected["list_changed"]) <= set(seen["list_changed"])
                and len(seen["asked"]) >= len(expected["asked"]))
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(30):
            while not covered(now()):
                await asyncio.sleep(0.05)


async def _quiet(client: RawClient, quiet: float = 1.5, limit: float = 8.0) -> None:
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
    return {"before": [m for m in exchange.before if not _list_change(m, changed)],
            "answer": exchange.answer}


def _handshake(exchange: Any, changed: set[str]) -> Any:
    """The handshake, less the capabilities: the gateway announces its own (SPEC §10, §12)."""
    seen = _exchange(exchange, changed)
    result = (seen["answer"] or {}).get("result")
    if isinstance(result, dict):
        result.pop("capabilities", None)
    return seen


def _normal(value: Any) -> Any:
    """Ids either end chooses as placeholders, bridged fields out, listed tools as the server
    declared them (a tool that carries requirements is listed with them: the gateway's job)."""
    if isinstance(value, dict):
        out = {k: ("<id>" if k in ("requestState", "progressToken", "requestId", "reason")
                   else _normal(v))
               for k, v in value.items() if k not in BRIDGED}
        if "method" in out and "id" in out:
            out["id"] = "<id>"
        meta = out.get("_meta")
        if isinstance(meta, dict):
            kept = {k: v for k, v in meta.items() if k not in (SERVER_INFO, *ENVELOPE)}
            if kept:
                out["_meta"] = kept
            else:
                del out["_meta"]
        if isinstance(out.get("tools"), list):
            out["tools"] = [t for t in out["tools"] if isinstance(t, dict)
                            and t.get("name") not in DECLARING]
        return out
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


def upstream_seen(log: Path, since: int = 0) -> list[Any]:
    """What the server was sent, its handshake and listings apart (the gateway holds one session
    and lists on its own), and what the gateway answers itself; the envelope of the version each
    end spoke left out. The asking server logs what it asked and what came back."""
    kept = []
    for entry in read_log(log)[since:]:
        method = entry.get("method")
        if "asked" in entry:
            kept.append(entry)
        elif method is None or method in ANSWERED_HERE or method in (
                "initialize", "notifications/initialized", "server/discover", "tools/list",
                "prompts/list", "resources/list", "subscriptions/listen"):
            continue
        elif method == "tools/call" and "name" not in (entry.get("params") or {}):
            continue  # malformed: refused by the gateway
        else:
            kept.append({"method": method, "params": entry.get("params")})
    normal: list[Any] = _normal(kept)
    return normal


def compare(direct: Any, gateway: Any, what: str) -> None:
    """Equal, except that the gateway may tell a client of more list changes than the server did."""
    if isinstance(direct, dict) and isinstance(gateway, dict) and "list_changed" in direct:
        missing = set(direct["list_changed"]) - set(gateway["list_changed"])
        assert not missing, f"{what}: list changes lost through the gateway: {sorted(missing)}"
        direct = {k: v for k, v in direct.items() if k != "list_changed"}
        gateway = {k: v for k, v in gateway.items() if k != "list_changed"}
    if direct != gateway:
        diff = difflib.unified_diff(json.dumps(direct, indent=1, sort_keys=True).splitlines(),
                                    json.dumps(gateway, indent=1, sort_keys=True).splitlines(),
                                    "direct", "through the gateway", lineterm="", n=4)
        pytest.fail(f"{what} differ:\n" + "\n".join(list(diff)[:300]), pytrace=False)


# -- stdio ---------------------------------------------------------------------------------------
@contextlib.asynccontextmanager
async def stdio_client(version: str, argv: list[str], **env: str) -> AsyncIterator[RawClient]:
    client = StdioClient(version, argv, environment(**env), str(ROOT))
    async with client.running():
        yield client


def _gateway(policy: Path, upstream: list[str]) -> list[str]:
    return [*CLI, "gateway", "--policy", str(policy), "--", *upstream]


@pytest.mark.parametrize("upstream", ["logging", "asking"])
@pytest.mark.parametrize("version", [LEGACY, MODERN])
@pytest.mark.parametrize("seed", range(3))
async def test_over_stdio_the_gateway_is_transparent(tmp_path: Path, version: str, seed: int,
                                                     upstream: str) -> None:
    policy = tmp_path / "open.toml"
    policy.write_text(OPEN_POLICY, encoding="utf-8")
    if upstream == "logging":
        command, variable = UPSTREAM_STDIO, "GATEWAY_UPSTREAM_LOG"
        steps = steps_for(STEPS, version, (LEGACY, LEGACY_ONLY))
    else:
        command, variable = asking_upstream.command(), "ASKING_UPSTREAM_LOG"
        steps = steps_for(ASKING_STEPS, version, (LEGACY, ASKING_LEGACY_ONLY))
    names = script(steps, seed + (50 if upstream == "asking" else 0))
    results: dict[str, tuple[dict[str, Any], list[Any]]] = {}
    for way, argv in (("direct", command), ("gateway", _gateway(policy, command))):
        log = tmp_path / f"{way}.jsonl"
        async with stdio_client(version, argv, **{variable: str(log)}) as client:
            seen = await run(client, names, steps, results["direct"][0] if results else None)
        results[way] = (seen, upstream_seen(log))
    compare(results["direct"][0], results["gateway"][0], f"what the client saw ({names})")
    compare(results["direct"][1], results["gateway"][1], f"what the server was sent ({names})")


# -- HTTP ----------------------------------------------------------------------------------------
@contextlib.contextmanager
def http_gateway(policy: Path, upstream_url: str) -> Iterator[str]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    argv = [*CLI, "gateway", "--policy", str(policy), "--listen", base, "--upstream-url", upstream_url]
    with started(argv, environment(), base, base + "/readyz"):
        deadline = time.monotonic() + 30
        while httpx.get(base + "/readyz", timeout=30).status_code != 200:  # its server is up
            assert time.monotonic() < deadline, "the gateway never became ready"
            time.sleep(0.1)
        yield base + "/mcp"


@pytest.mark.timeout(300)  # four scripts, each run directly and through the gateway: ~100 s loaded
@pytest.mark.parametrize("version", [LEGACY, MODERN])
def test_over_http_the_gateway_is_transparent(tmp_path: Path, version: str) -> None:
    policy = tmp_path / "open.toml"
    policy.write_text(OPEN_POLICY, encoding="utf-8")
    steps = steps_for(STEPS, version, (LEGACY, LEGACY_ONLY))
    with serve_upstream_http(tmp_path / "direct.jsonl") as direct, \
            serve_upstream_http(tmp_path / "behind.jsonl") as behind, \
            http_gateway(policy, behind.url) as through:
        for seed in range(4):
            names = script(steps, 300 + seed)
            results: dict[str, tuple[dict[str, Any], list[Any]]] = {}
            for way, url, log in (("direct", direct.url, tmp_path / "direct.jsonl"),
                                  ("gateway", through, tmp_path / "behind.jsonl")):
                since = len(read_log(log))
                seen = asyncio.run(_over_http(version, url, names, steps,
                                              results["direct"][0] if results else None))
                if results:  # what the server was sent directly: forwarded, maybe late
                    sent = Counter(json.dumps(m, sort_keys=True) for m in results["direct"][1])
                    deadline = time.monotonic() + 30
                    while sent - Counter(json.dumps(m, sort_keys=True)
                                           for m in upstream_seen(log, since)) \
                            and time.monotonic() < deadline:
                        time.sleep(0.05)
                results[way] = (seen, upstream_seen(log, since))
            compare(results["direct"][0], results["gateway"][0], f"what the client saw ({names})")
            compare(results["direct"][1], results["gateway"][1],
                    f"what the server was sent ({names})")


async def _over_http(version: str, url: str, names: list[str], steps: dict[str, Step],
                     expected: dict[str, Any] | None) -> dict[str, Any]:
    client = HttpClient(version, url)
    async with client.running():
        return await run(client, names, steps, expected)
