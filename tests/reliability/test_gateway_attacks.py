"""The gateway classes of the second red-team pass (issue 22, items 2-6), counted like the rest of the
reliability suite: generated upstream listings with names listed twice, bursts of unknown names,
sessions used by another caller, texts a caller reads when things go wrong, and half-sent headers.
Every case runs through a real gateway subprocess in front of the logging upstream (its log is the
oracle of what reached it); a wrong allow, a leak or a connection left open is counted.
"""

from __future__ import annotations

import json
import random
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client

from tests.fixtures.gateway_upstream import (
    UPSTREAM_STDIO,
    Process,
    gateway_http,
    gateway_stdio,
    read_log,
    upstream_http,
)
from tests.fixtures.oidc import AUDIENCE, OidcServer
from tests.integration.test_gateway_calls import raw_call

from .tally import TALLY

pytestmark = pytest.mark.integration
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
ROLES = ("admin", "observer")


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _reached(log: Path, since: int) -> list[str]:
    return [e["params"]["name"] for e in read_log(log)[since:] if e["method"] == "tools/call"]


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


async def test_names_listed_twice_are_never_called(tmp_path: Path) -> None:
    rng = random.Random(22)
    listing, log = tmp_path / "listing.json", tmp_path / "upstream.jsonl"
    _write(listing, "[]")
    claims = _write(tmp_path / "claims.json", '{"sub": "o", "role": "observer"}')
    policy = _write(tmp_path / "policy.toml", "# nothing\n")
    cases = calls = wrong = 0
    params = gateway_stdio(policy, log, "--claims", str(claims),
                           GATEWAY_UPSTREAM_TOOLS_FILE=str(listing))
    async with Client(params, mode="legacy") as client:
        for _ in range(25):
            tools, twice = _listing(rng)
            _write(listing, json.dumps(tools))
            await raw_call(client, "relist")  # the upstream says its list changed
            await client.list_tools()
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
async def test_unknown_name_bursts_are_never_forwarded_and_relist_boundedly(tmp_path: Path) -> None:
    rng = random.Random(3)
    log = tmp_path / "upstream.jsonl"
    claims = _write(tmp_path / "claims.json", '{"sub": "o", "role": "observer"}')
    policy = _write(tmp_path / "policy.toml", "# nothing\n")
    cases = calls = wrong = 0
    params = gateway_stdio(policy, log, "--claims", str(claims), GATEWAY_UPSTREAM_MANY="200")
    async with Client(params, mode="legacy") as client:
        await client.list_tools()
        for case in range(8):
            since = len(read_log(log))
            names = [f"nope{case}_{i}_{rng.randrange(10**6)}" for i in range(rng.randint(5, 40))]
            start = anyio.current_time()
            async with anyio.create_task_group() as tg:
                for name in names:
                    tg.start_soon(raw_call, client, name)
            elapsed = anyio.current_time() - start
            calls += len(names)
            entries = read_log(log)[since:]
            wrong += sum(1 for e in entries if e["method"] == "tools/call")
            relists = sum(1 for e in entries if e["method"] == "tools/list")
            wrong += max(0, relists - (2 + int(elapsed)))  # more re-lists than the bound allows
            cases += 1
            await anyio.sleep(rng.choice([0.0, 0.5, 1.1]))
    TALLY.add("gateway: unknown-name bursts", cases=cases, calls=calls, wrongly_allowed=wrong)
    assert wrong == 0


# -- 4. sessions belong to their caller --------------------------------------------------------------
@pytest.fixture
def auth_gateway(tmp_path: Path, oidc_server: OidcServer) -> Iterator[Process]:
    policy = _write(tmp_path / "policy.toml",
                    f'[auth]\nissuer = "{oidc_server.issuer}"\naudience = "{AUDIENCE}"\n'
                    f'jwks_uri = "{oidc_server.jwks_uri}"\n')
    log = tmp_path / "upstream.jsonl"
    with upstream_http(log) as upstream, \
            gateway_http(policy, log, "--upstream-url", upstream.url, wait="/readyz") as gw:
        yield gw


def test_no_caller_uses_another_callers_session(auth_gateway: Process, oidc_server: OidcServer) -> None:
    rng = random.Random(4)
    tokens = {"mission-control": oidc_server.token,
              "observer": lambda: oidc_server.token("observer", scope="mission:read")}
    cases = calls = wrong = 0
    with httpx.Client(base_url=auth_gateway.url, headers=ACCEPT, timeout=30) as http:
        for _ in range(12):
            owner = rng.choice(list(tokens))
            other = next(c for c in tokens if c != owner)
            init = http.post("/mcp", headers={"authorization": f"Bearer {tokens[owner]()}"}, json={
                "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "r", "version": "1"}}})
            session = init.headers["mcp-session-id"]
            for _ in range(rng.randint(1, 4)):
                headers = {"mcp-session-id": session, "mcp-protocol-version": "2025-11-25",
                           "authorization": f"Bearer {tokens[other]()}"}
                action = rng.choice(["post", "get", "delete"])
                calls += 1
                if action == "post":
                    status = http.post("/mcp", headers=headers, json={
                        "jsonrpc": "2.0", "id": 2, "method": "tools/list"}).status_code
                elif action == "get":
                    with http.stream("GET", "/mcp", headers=headers) as stream:
                        status = stream.status_code
                else:
                    status = http.delete("/mcp", headers=headers).status_code
                wrong += status != 404
            owned = {"mcp-session-id": session, "mcp-protocol-version": "2025-11-25",
                     "authorization": f"Bearer {tokens[owner]()}"}
            calls += 1
            wrong += http.delete("/mcp", headers=owned).status_code != 200  # still the owner's
            cases += 1
    TALLY.add("gateway: session owners", cases=cases, calls=calls, wrongly_allowed=wrong)
    assert wrong == 0


# -- 5. errors say little to callers -----------------------------------------------------------------
async def test_what_a_caller_reads_never_names_the_policy_or_the_command(tmp_path: Path) -> None:
    """Near-miss policies, a tool that crashes its server, a server that is down: nothing a caller
    receives names the policy file, its entries, the server's command line or the temp folder."""
    rng = random.Random(5)
    claims = _write(tmp_path / "claims.json", '{"sub": "o", "role": "observer"}')
    cases = calls = leaks = 0
    for case in range(6):
        entry = rng.choice(["sec-ret", "Secret", "secrets", "ecHo", "sl0w_"])
        policy = _write(tmp_path / f"policy-{case}.toml",
                        f'[tools."{entry}"]\nrequirements = ["auth:claim:role:admin"]\n'
                        '[tools.crash]\nrequirements = []\n')
        log = tmp_path / f"upstream-{case}.jsonl"
        texts: list[str] = []
        async with Client(gateway_stdio(policy, log, "--claims", str(claims)), mode="legacy") as c:
            for name in ("echo", "secret", "crash", "echo", "no_such_tool"):
                calls += 1
                try:
                    texts.append(json.dumps(await raw_call(c, name)))
                except Exception as exc:  # a JSON-RPC error: what it says
                    texts.append(str(exc))
        secrets = [str(policy), entry, str(tmp_path), "gateway_upstream", "-m tests.fixtures"]
        leaks += sum(text.count(s) for text in texts for s in secrets if s not in ("echo",))
        cases += 1
    TALLY.add("gateway: quiet errors", cases=cases, calls=calls, confidential_seen=leaks)
    assert leaks == 0


# -- 6. slow clients ---------------------------------------------------------------------------------
def test_half_sent_requests_never_hold_a_connection(tmp_path: Path) -> None:
    """Each cut somewhere in a request: in its headers, or in the body they promise."""
    rng = random.Random(6)
    policy = _write(tmp_path / "policy.toml", "# nothing\n")
    cases = calls = wrong = 0
    with gateway_http(policy, tmp_path / "upstream.jsonl", "--header-timeout-seconds", "1",
                      "--", *UPSTREAM_STDIO) as gw:
        host, port = gw.url.removeprefix("http://").split(":")
        for _ in range(5):
            request = (b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json, "
                       b"text/event-stream\r\nContent-Type: application/json\r\n"
                       b"Content-Length: 64\r\n\r\n{\"jsonrpc\": \"2.0\", \"id\": 1")
            socks = []
            for _ in range(rng.randint(5, 25)):
                sock = socket.create_connection((host, int(port)), timeout=10)
                sock.sendall(request[:rng.randint(1, len(request) - 1)])
                socks.append(sock)
            for sock in socks:
                calls += 1
                try:
                    wrong += sock.recv(1024) != b""  # closed by the gateway, not answered
                except TimeoutError:  # still open after 10 s: the deadline did not hold
                    wrong += 1
                finally:
                    sock.close()
            cases += 1
        alive = httpx.get(gw.url + "/healthz", timeout=30).status_code == 200
    TALLY.add("gateway: slow clients", cases=cases, calls=calls, wrongly_allowed=wrong + (not alive))
    assert wrong == 0 and alive
