"""The gateway classes of the second red-team pass (issue 22, items 2-6), counted like the rest of the
reliability suite: generated upstream listings with names listed twice, bursts of unknown names,
sessions used by another caller, texts a caller reads when things go wrong, and half-sent headers.
A wrong allow, a leak or a connection left open is counted.

In-process (tests/fixtures/inprocess.py): each gateway is wired from its command line in the test's
event loop, in front of the logging upstream in memory (its log is the oracle of what reached it),
its clients on its app over the streaming bridge. Callers' tokens are signed here and verified by the
policy's `[auth]` keys. The re-list bound of unknown names runs on a fake clock (the bursts are
separated by advancing it, not by sleeping, so the bound is exact: one re-list per second of it).
The half-sent requests go to the product's own HTTP listener on a real socket of this loop
(tests/fixtures/listening.py). The same classes against real processes, the oidc-provider's tokens
and a real upstream: tests/integration/test_gateway_attack.py (interop).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client

from mcp_preconditions.gateway import catalog
from tests.fixtures.clock import FakeClock
from tests.fixtures.gateway_upstream import read_log
from tests.fixtures.inprocess import WAIT_SECONDS, InProcess, held, logging_gateway
from tests.fixtures.listening import listening
from tests.fixtures.local_issuer import ISSUER_KEY
from tests.fixtures.loop_clock import on_fake_loop_time
from tests.fixtures.memory_upstream import STUB, MemoryServers, logging_env
from tests.integration.test_gateway_calls import raw_call

from .tally import TALLY

pytestmark = pytest.mark.asyncio(loop_scope="module")
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
ROLES = ("admin", "observer")


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _reached(log: Path, since: int) -> list[str]:
    return [e["params"]["name"] for e in read_log(log)[since:] if e["method"] == "tools/call"]


def _observer(tmp_path: Path) -> list[str]:
    claims = _write(tmp_path / "claims.json", '{"sub": "o", "role": "observer"}')
    return ["--claims", str(claims)]


# -- 2. names listed twice ---------------------------------------------------------------------------
def _listing(rng: random.Random) -> tuple[list[dict[str, Any]], set[str]]:
    """Random extra tools, some names listed two or three times with different requirements (an
    open copy among them); the names listed more than once."""
    tools: list[dict[str, Any]] = []
    twice: set[str] = set()
    for i in range(rng.randint(1, 5)):
        name = f"gen{i}"
        copies = rng.choice([1, 2, 3])
        if copies > 1:
            twice.add(name)
        for _ in range(copies):
            reqs = rng.choice([[], ["auth:claim:role:admin"], ["auth:claim:role:observer"]])
            tools.append({"name": name, "inputSchema": {"type": "object"},
                          **({"execution": {"requirements": reqs}} if reqs else {})})
    rng.shuffle(tools)
    return tools, twice


class Told:
    """A client's message handler: each `tools/list_changed` the gateway sends wakes `until_listed`."""

    def __init__(self) -> None:
        self._changed = anyio.Event()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._changed.set()

    async def until_listed(self, client: Client, tool: str) -> None:
        """Until the gateway lists `tool`, listing again each time it says the list changed (it
        re-lists a server in the background and answers from its last good catalog meanwhile)."""
        with anyio.fail_after(WAIT_SECONDS):
            while tool not in {t.name for t in (await client.list_tools()).tools}:
                await self._changed.wait()
                self._changed = anyio.Event()


async def test_names_listed_twice_are_never_called(tmp_path: Path) -> None:
    rng = random.Random(22)
    listing, log = tmp_path / "listing.json", tmp_path / "upstream.jsonl"
    _write(listing, "[]")
    policy = _write(tmp_path / "policy.toml", "# nothing\n")
    cases = calls = wrong = 0
    told = Told()
    async with logging_gateway(policy, log, *_observer(tmp_path),
                               GATEWAY_UPSTREAM_TOOLS_FILE=str(listing)) as gw, \
            gw.client(message_handler=told) as client:
        for case in range(25):
            tools, twice = _listing(rng)
            marker = f"listing{case}"  # listed once, this time only: when shown, this listing is in
            _write(listing, json.dumps([*tools, {"name": marker, "inputSchema": {"type": "object"}}]))
            await raw_call(client, "relist")  # the upstream says its list changed
            await told.until_listed(client, marker)
            since = len(read_log(log))
            for name in sorted({t["name"] for t in tools}):
                calls += 1
                result = await raw_call(client, name)
                if name in twice and not result.get("isError"):
                    wrong += 1
            wrong += sum(1 for n in _reached(log, since) if n in twice)
            cases += 1
    TALLY.add("gateway: names listed twice", cases=cases, calls=calls, wrongly_allowed=wrong)
    assert wrong == 0


# -- 3. unknown-name bursts --------------------------------------------------------------------------
async def test_unknown_name_bursts_are_never_forwarded_and_relist_boundedly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(3)
    clock = FakeClock()
    on_fake_loop_time(monkeypatch, clock)
    log = tmp_path / "upstream.jsonl"
    policy = _write(tmp_path / "policy.toml", "# nothing\n")
    cases = calls = wrong = 0
    last_relist = -math.inf  # the reference: at most one re-list per RELIST_SECONDS of the clock
    async with logging_gateway(policy, log, *_observer(tmp_path), GATEWAY_UPSTREAM_MANY="200") as gw, \
            gw.client() as client:
        await client.list_tools()
        for case in range(8):
            since = len(read_log(log))
            names = [f"nope{case}_{i}_{rng.randrange(10**6)}" for i in range(rng.randint(5, 40))]
            async with anyio.create_task_group() as tg:
                for name in names:
                    tg.start_soon(raw_call, client, name)
            calls += len(names)
            entries = read_log(log)[since:]
            wrong += sum(1 for e in entries if e["method"] == "tools/call")
            relists = sum(1 for e in entries if e["method"] == "tools/list")
            bound = int(clock() - last_relist >= catalog.UNKNOWN_NAME_RELIST_SECONDS)
            wrong += max(0, relists - bound)  # more re-lists than the bound allows
            if relists:
                last_relist = clock()
            cases += 1
            clock.advance(rng.choice([0.0, 0.5, 1.1]))
    TALLY.add("gateway: unknown-name bursts", cases=cases, calls=calls, wrongly_allowed=wrong)
    assert wrong == 0
    assert last_relist > -math.inf  # the bound was exercised: a burst did re-list


# -- 4. sessions belong to their caller --------------------------------------------------------------
def token_of(subject: str) -> Callable[[], str]:
    """A new access token for `subject` at each call (another token, the same principal)."""
    return lambda: ISSUER_KEY.token(subject)


@pytest.fixture
async def auth_gateway(tmp_path: Path) -> AsyncIterator[InProcess]:
    policy = _write(tmp_path / "policy.toml", ISSUER_KEY.auth_policy())
    async with held(logging_gateway(policy, tmp_path / "upstream.jsonl",
                                    "--listen", "http://127.0.0.1:0")) as gw:
        yield gw


async def test_no_caller_uses_another_callers_session(auth_gateway: InProcess) -> None:
    rng = random.Random(4)
    tokens = {"mission-control": token_of("mission-control"), "observer": token_of("observer")}
    cases = calls = wrong = 0
    async with auth_gateway.http() as http:
        http.headers.update(ACCEPT)
        for _ in range(12):
            owner = rng.choice(list(tokens))
            other = next(c for c in tokens if c != owner)
            init = await http.post("/mcp", headers={"authorization": f"Bearer {tokens[owner]()}"},
                                   json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                                       "protocolVersion": "2025-11-25", "capabilities": {},
                                       "clientInfo": {"name": "r", "version": "1"}}})
            session = init.headers["mcp-session-id"]
            for _ in range(rng.randint(1, 4)):
                headers = {"mcp-session-id": session, "mcp-protocol-version": "2025-11-25",
                           "authorization": f"Bearer {tokens[other]()}"}
                action = rng.choice(["post", "get", "delete"])
                calls += 1
                if action == "post":
                    status = (await http.post("/mcp", headers=headers, json={
                        "jsonrpc": "2.0", "id": 2, "method": "tools/list"})).status_code
                elif action == "get":
                    async with http.stream("GET", "/mcp", headers=headers) as stream:
                        status = stream.status_code
                else:
                    status = (await http.delete("/mcp", headers=headers)).status_code
                wrong += status != 404
            owned = {"mcp-session-id": session, "mcp-protocol-version": "2025-11-25",
                     "authorization": f"Bearer {tokens[owner]()}"}
            calls += 1
            wrong += (await http.delete("/mcp", headers=owned)).status_code != 200  # still the owner's
            cases += 1
    TALLY.add("gateway: session owners", cases=cases, calls=calls, wrongly_allowed=wrong)
    assert wrong == 0


# -- 5. errors say little to callers -----------------------------------------------------------------
async def test_what_a_caller_reads_never_names_the_policy_or_the_command(tmp_path: Path) -> None:
    """Near-miss policies, a tool that crashes its server, a server that is down: nothing a caller
    receives names the policy file, its entries, the server's command line or the temp folder."""
    rng = random.Random(5)
    observer = _observer(tmp_path)
    cases = calls = leaks = 0
    for case in range(6):
        entry = rng.choice(["sec-ret", "Secret", "secrets", "ecHo", "sl0w_"])
        policy = _write(tmp_path / f"policy-{case}.toml",
                        f'[tools."{entry}"]\nrequirements = ["auth:claim:role:admin"]\n'
                        '[tools.crash]\nrequirements = []\n')
        log = tmp_path / f"upstream-{case}.jsonl"
        texts: list[str] = []
        async with logging_gateway(policy, log, *observer) as gw, gw.client() as c:
            for name in ("echo", "secret", "crash", "echo", "no_such_tool"):
                calls += 1
                try:
                    texts.append(json.dumps(await raw_call(c, name)))
                except Exception as exc:  # a JSON-RPC error: what it says
                    texts.append(str(exc))
        # the server's command line: here the in-memory server's (tests/fixtures/memory_server)
        secrets = [str(policy), entry, str(tmp_path), "gateway_upstream", "-m tests.fixtures",
                   STUB, "memory_server"]
        leaks += sum(text.count(s) for text in texts for s in secrets if s not in ("echo",))
        cases += 1
    TALLY.add("gateway: quiet errors", cases=cases, calls=calls, confidential_seen=leaks)
    assert leaks == 0


# -- 6. slow clients ---------------------------------------------------------------------------------
async def _cut_off(host: str, port: int, request: bytes, closed: list[bool]) -> None:
    """Whether a connection that sent `request` (a part of one) is closed by the gateway without an
    answer (the read ends) within the safety net, appended to `closed`."""
    async with await anyio.connect_tcp(host, port) as stream:
        await stream.send(request)
        with anyio.move_on_after(10):  # the header deadline is 1 s: this is only a safety net
            try:
                await stream.receive()  # an answer: the connection was served, not cut off
                closed.append(False)
            except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
                closed.append(True)
            return
    closed.append(False)  # still open after 10 s: the deadline did not hold


async def test_half_sent_requests_never_hold_a_connection(tmp_path: Path) -> None:
    """Each cut somewhere in a request: in its headers, or in the body they promise."""
    rng = random.Random(6)
    policy = _write(tmp_path / "policy.toml", "# nothing\n")
    cases = calls = wrong = 0
    servers = MemoryServers()
    with servers.installed():
        upstream = servers.logging_upstream(**logging_env(tmp_path / "upstream.jsonl"))
        async with listening(["--policy", str(policy), "--listen", "http://127.0.0.1:0",
                              "--header-timeout-seconds", "1", "--", *upstream]) as gw:
            request = (b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json, "
                       b"text/event-stream\r\nContent-Type: application/json\r\n"
                       b"Content-Length: 64\r\n\r\n{\"jsonrpc\": \"2.0\", \"id\": 1")
            for _ in range(5):
                cuts = [request[:rng.randint(1, len(request) - 1)]
                        for _ in range(rng.randint(5, 25))]
                closed: list[bool] = []
                async with anyio.create_task_group() as tg:
                    for cut in cuts:
                        tg.start_soon(_cut_off, gw.host, gw.port, cut, closed)
                calls += len(cuts)
                wrong += closed.count(False)
                cases += 1
            async with gw.http() as http:
                alive = (await http.get("/healthz")).status_code == 200
    TALLY.add("gateway: slow clients", cases=cases, calls=calls, wrongly_allowed=wrong + (not alive))
    assert wrong == 0 and alive
