"""The second red-team pass (issue 22), through the gateway's public surface: an upstream that lists a
name twice, a burst of unknown names, another caller's session, a refreshed token in the middle of
an input round, quiet errors, slow clients, `unlisted_tools = "deny"` with an open tool the policy
names, and the caller named in every decision.

In-process (tests/fixtures/inprocess.py): the gateway wired from its command line in the test's
loop, its upstreams in memory, callers' tokens signed here (tests/fixtures/local_issuer.py), the
re-list bound for unknown names on a fake clock, the decision records read from what it logs. Three
stay with real processes (interop, each saying why): another caller's session with the
oidc-provider's tokens, slow clients against the listener of a gateway process, and a clean start
in front of npm server-filesystem.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from mcp_preconditions.gateway import catalog
from mcp_preconditions.gateway.downstream.listener import HEALTH_RESERVE
from tests.fixtures import asking_upstream
from tests.fixtures.clock import FakeClock
from tests.fixtures.gateway_upstream import Process, gateway_http, read_log, tool_calls, upstream_http
from tests.fixtures.inprocess import InProcess, cli_gateway, logging_gateway
from tests.fixtures.local_issuer import ISSUER_KEY
from tests.fixtures.loop_clock import on_fake_loop_time
from tests.fixtures.mcp_servers import ROOT, server_env
from tests.fixtures.memory_upstream import MemoryServers
from tests.fixtures.oidc import AUDIENCE, OidcServer
from tests.fixtures.upstreams import filesystem_stdio
from tests.fixtures.upstreams import gateway_stdio as gateway_in_front_of
from tests.integration.test_gateway_calls import raw_call, raw_tools

pytestmark = pytest.mark.integration

ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
OBSERVER = '{"sub": "olga", "role": "observer"}'


@pytest.fixture
def claims(tmp_path: Path) -> Path:
    path = tmp_path / "observer.json"
    path.write_text(OBSERVER, encoding="utf-8")
    return path


def _policy(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(text, encoding="utf-8")
    return path


# -- 2. the upstream's list is untrusted input -------------------------------------------------------
async def test_a_name_listed_twice_is_refused_whichever_copy_is_open(tmp_path: Path, claims: Path) -> None:
    policy, log = _policy(tmp_path, "# nothing\n"), tmp_path / "upstream.jsonl"
    async with logging_gateway(policy, log, "--claims", str(claims), GATEWAY_UPSTREAM_DUP="1") as gw, \
            gw.client() as client:
        tools = await raw_tools(client)
        refused = await raw_call(client, "dup")
        echoed = await raw_call(client, "echo")
    assert "dup" not in tools and "echo" in tools
    assert refused["isError"] is True
    assert refused["structuredContent"] == {"error": "unlisted_tool", "tool": "dup", "unmet": [],
                                            "withheld": 0}
    assert "more than one tool of that name" in refused["content"][0]["text"]
    assert echoed["isError"] is False
    assert tool_calls(log) == ["echo"]


# -- 3. no caller can stall another ----------------------------------------------------------------
async def test_unknown_names_re_list_the_upstream_at_most_once_a_second(
        tmp_path: Path, claims: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a fake clock: 40 unknown names at once re-list once; half a second later, not at all;
    a second after the first burst, once again."""
    clock = FakeClock()
    on_fake_loop_time(monkeypatch, clock)
    policy, log = _policy(tmp_path, "# nothing\n"), tmp_path / "upstream.jsonl"
    relisted: list[int] = []
    results: list[dict[str, Any]] = []
    async with logging_gateway(policy, log, "--claims", str(claims), GATEWAY_UPSTREAM_MANY="300") as gw, \
            gw.client() as client:
        await raw_tools(client)

        async def unknown(i: int) -> None:
            results.append(await raw_call(client, f"no_such_tool_{i}"))
        for advance in (0.0, 0.5, catalog.UNKNOWN_NAME_RELIST_SECONDS):
            clock.advance(advance)
            before = sum(1 for e in read_log(log) if e["method"] == "tools/list")
            async with anyio.create_task_group() as tg:
                for i in range(40):
                    tg.start_soon(unknown, i)
            relisted.append(sum(1 for e in read_log(log) if e["method"] == "tools/list") - before)
        echoed = await raw_call(client, "echo")
    assert all(r["structuredContent"]["error"] == "unlisted_tool" for r in results)
    assert echoed["isError"] is False
    # One listing at a time, at most one a second for unknown names (the first at once).
    assert relisted == [1, 0, 1]
    assert "tools/call" not in {e["method"] for e in read_log(log) if "no_such" in json.dumps(e)}


# -- 4. sessions belong to their caller ------------------------------------------------------------
@pytest.fixture
def auth_gateway(tmp_path: Path, oidc_server: OidcServer) -> Iterator[tuple[Process, Path]]:
    policy = _policy(tmp_path, f'[auth]\nissuer = "{oidc_server.issuer}"\naudience = "{AUDIENCE}"\n'
                               f'jwks_uri = "{oidc_server.jwks_uri}"\n')
    log = tmp_path / "upstream.jsonl"
    with upstream_http(log) as upstream, \
            gateway_http(policy, log, "--upstream-url", upstream.url, wait="/readyz") as gw:
        yield gw, log


def _open_session(http: httpx.Client, token: str) -> str:
    init = http.post("/mcp", headers={"authorization": f"Bearer {token}"}, json={
        "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw-http", "version": "1"}}})
    assert init.status_code == 200, init.text
    session = init.headers["mcp-session-id"]
    http.post("/mcp", headers=_on(session, token), json={"jsonrpc": "2.0",
                                                         "method": "notifications/initialized"})
    return session


def _on(session: str, token: str) -> dict[str, str]:
    return {"mcp-session-id": session, "mcp-protocol-version": "2025-11-25",
            "authorization": f"Bearer {token}"}


@pytest.mark.interop
def test_another_callers_token_cannot_use_read_or_end_a_session(
        auth_gateway: tuple[Process, Path], oidc_server: OidcServer) -> None:
    """Interop: the oidc-provider's tokens (a refreshed one is another token of the same client),
    verified at its JWKS by a gateway process over its own listener, in front of an HTTP upstream
    process (tests/reliability/test_gateway_attacks.py holds the generated cases in-process)."""
    gw, _log = auth_gateway
    owner, other = oidc_server.token(), oidc_server.token("observer", scope="mission:read")
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    with httpx.Client(base_url=gw.url, headers=ACCEPT, timeout=10) as http:
        session = _open_session(http, owner)
        assert http.post("/mcp", headers=_on(session, other), json=listing).status_code == 404
        with http.stream("GET", "/mcp", headers=_on(session, other)) as stream:
            assert stream.status_code == 404
        assert http.delete("/mcp", headers=_on(session, other)).status_code == 404
        # The owner's session is untouched, and a fresh token of the same principal continues it.
        assert http.post("/mcp", headers=_on(session, owner), json=listing).status_code == 200
        refreshed = oidc_server.token()
        assert refreshed != owner
        assert http.post("/mcp", headers=_on(session, refreshed), json=listing).status_code == 200
        assert http.delete("/mcp", headers=_on(session, refreshed)).status_code == 200
        assert http.post("/mcp", headers=_on(session, owner), json=listing).status_code == 404


async def _modern_call(http: httpx.AsyncClient, token: str, params: dict[str, Any]) -> dict[str, Any]:
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"sampling": {}},
            "io.modelcontextprotocol/clientInfo": {"name": "raw-http", "version": "1"}}
    response = await http.post("/mcp", headers={"authorization": f"Bearer {token}",
                                                "mcp-protocol-version": "2026-07-28",
                                                "mcp-method": "tools/call", "mcp-name": params["name"]},
                               json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                     "params": {**params, "_meta": meta}})
    body = response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        body = next(line[5:] for line in body.splitlines() if line.startswith("data:"))
    message: dict[str, Any] = json.loads(body)
    return message


@asynccontextmanager
async def http_gateway(tmp_path: Path, policy: str, upstream: list[str]) -> AsyncIterator[InProcess]:
    """`gateway --policy P --listen http://127.0.0.1:0 -- UPSTREAM` in-process, once listed."""
    async with cli_gateway(["--policy", str(_policy(tmp_path, policy)), "--listen",
                            "http://127.0.0.1:0", "--", *upstream]) as gw:
        await gw.until_ready(lambda body: all(s["tools_loaded"] for s in body["servers"].values()))
        yield gw


async def test_an_input_round_continues_with_a_refreshed_token_and_never_with_another_callers(
        tmp_path: Path) -> None:
    log = tmp_path / "asked.jsonl"
    servers = MemoryServers()
    with servers.installed():
        upstream = servers.asking_upstream(ASKING_UPSTREAM_LOG=str(log))
        async with http_gateway(tmp_path, ISSUER_KEY.auth_policy(), upstream) as gw, \
                gw.http() as http:
            http.headers.update(ACCEPT)
            first = (await _modern_call(http, ISSUER_KEY.token(), {"name": "ask", "arguments": {}})
                     )["result"]
            assert first["resultType"] == "input_required"
            [key] = first["inputRequests"]
            retry = {"name": "ask", "arguments": {}, "requestState": first["requestState"],
                     "inputResponses": {key: {"role": "assistant", "model": "m",
                                              "content": {"type": "text", "text": "4"}}}}
            stolen = await _modern_call(http, ISSUER_KEY.token("observer", scope="mission:read"),
                                        retry)
            assert stolen["error"]["message"] == "Invalid or expired requestState"
            final = (await _modern_call(http, ISSUER_KEY.token(), retry))["result"]  # refreshed
    assert final["content"] == [{"type": "text", "text": "the answer is 4"}]


# -- 5. errors say little to callers ---------------------------------------------------------------
async def test_an_unusable_policy_names_neither_its_path_nor_its_entries(tmp_path: Path,
                                                                      claims: Path) -> None:
    policy = _policy(tmp_path, '[tools.sec-ret]\nrequirements = ["auth:claim:role:observer"]\n')
    log = tmp_path / "upstream.jsonl"
    async with logging_gateway(policy, log, "--claims", str(claims)) as gw, gw.client() as client:
        refused = await raw_call(client, "echo")
    text = json.dumps(refused)
    assert refused["content"][0]["text"] == "the gateway's policy is unusable"
    assert str(policy) not in text and "sec-ret" not in text and str(tmp_path) not in text
    assert not tool_calls(log)


async def test_readiness_names_servers_by_key_and_no_policy_entry(tmp_path: Path) -> None:
    policy = _policy(tmp_path, '[tools.sec-ret]\nrequirements = ["auth:claim:role:observer"]\n')
    async with logging_gateway(policy, tmp_path / "upstream.jsonl",
                               "--listen", "http://127.0.0.1:0") as gw, gw.http() as http:
        ready = await http.get("/readyz")  # once the upstream is listed (logging_gateway)
    body = ready.text
    assert ready.headers["content-type"] == "application/json", (ready.status_code, body)
    assert ready.status_code == 503
    assert "problem" in ready.json()["servers"]["upstream"]
    assert "sec-ret" not in body and str(tmp_path) not in body and "gateway_upstream" not in body
    assert "memory_server" not in body  # the in-memory upstream's command line


# -- 6. the HTTP listener bounds slow clients ------------------------------------------------------
@pytest.mark.interop
def test_half_sent_headers_and_bodies_are_cut_off_and_connections_are_capped(tmp_path: Path) -> None:
    """Interop: the listener of a gateway process, its sockets and their deadlines, end to end
    (tests/reliability/test_gateway_attacks.py cuts requests at random through the same listener
    in-process)."""
    policy, log = _policy(tmp_path, "# nothing\n"), tmp_path / "upstream.jsonl"
    with gateway_http(policy, log, "--header-timeout-seconds", "1", "--max-connections", "40",
                      "--", *asking_upstream.command()) as gw:
        host, port = gw.url.removeprefix("http://").split(":")
        slow = [socket.create_connection((host, int(port)), timeout=10) for _ in range(30)]
        for sock in slow[:15]:
            sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Ty")  # half its headers
        for sock in slow[15:]:  # whole headers, then part of the body they promise
            sock.sendall(f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\n".encode()
                         + b"Content-Type: application/json\r\nAccept: application/json, "
                           b"text/event-stream\r\nContent-Length: 100\r\n\r\n{")
        for sock in slow:  # each is closed by the gateway: the read ends (b"") instead of hanging
            assert sock.recv(1024) == b""
            sock.close()
        assert httpx.get(gw.url + "/healthz", timeout=10).status_code == 200
        held = [socket.create_connection((host, int(port)), timeout=10)
                for _ in range(40 + HEALTH_RESERVE + 8)]
        try:  # more idle connections than the cap and the reserve, from one address: each is
            # ended without an answer (for a newer one, or at its deadline), none refused with a
            # 503, and the gateway answers meanwhile
            health = httpx.get(gw.url + "/healthz", timeout=10).status_code
            got = [_read_all(sock) for sock in held]
        finally:
            for sock in held:
                sock.close()
    assert health == 200
    assert got == [b""] * len(held)
    assert not tool_calls(log)


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(1024):
        data += chunk
    return data


# -- 8. unlisted_tools = "deny" exposes an open tool the policy names ----------------------------
async def test_deny_mode_exposes_a_tool_named_with_no_requirements(tmp_path: Path,
                                                                  claims: Path) -> None:
    policy = _policy(tmp_path, '[gateway]\nunlisted_tools = "deny"\n[tools.echo]\nrequirements = []\n')
    log = tmp_path / "upstream.jsonl"
    async with logging_gateway(policy, log, "--claims", str(claims)) as gw, gw.client() as client:
        echoed = await raw_call(client, "echo")
        refused = await raw_call(client, "slow", {"seconds": 0})
    assert echoed["isError"] is False
    assert refused["structuredContent"]["error"] == "unlisted_tool"
    assert tool_calls(log) == ["echo"]


# -- 9. every decision names its caller ------------------------------------------------------------
async def test_every_decision_record_names_the_caller_and_the_server(tmp_path: Path,
                                                                    claims: Path) -> None:
    policy = _policy(tmp_path, '[gateway]\nunlisted_tools = "deny"\n'
                               '[tools.echo]\nrequirements = []\n'
                               '[tools.secret]\nrequirements = ["auth:claim:role:admin"]\n')
    async with logging_gateway(policy, tmp_path / "upstream.jsonl", "--claims", str(claims)) as gw:
        async with gw.client() as client:
            for name in ("echo", "secret", "slow", "no_such_tool"):
                await raw_call(client, name, {"seconds": 0})
        lines = list(gw.log.lines)  # what a stdio gateway writes on stderr
    records = [json.loads(line.split(": ", 1)[1]) for line in lines
               if line.startswith("mcp_preconditions.decisions: ")]
    assert [r["tool"] for r in records] == ["echo", "secret", "slow", "no_such_tool"]  # once each
    assert [r["subject"] for r in records] == ["olga"] * 4
    assert [r.get("server") for r in records] == ["upstream", "upstream", "upstream", None]


# -- 12. a clean start is quiet ----------------------------------------------------------------------
@pytest.mark.interop
def test_a_clean_start_in_front_of_server_filesystem_logs_no_failure(tmp_path: Path) -> None:
    """Interop: npm server-filesystem, which asks its client for roots once it is initialised,
    behind a gateway process; what both write on stderr is read once the server has said what it
    made of the roots (or that it could not get them)."""
    policy, stderr = _policy(tmp_path, "# nothing\n"), tmp_path / "err"
    (tmp_path / "files").mkdir()
    argv = gateway_in_front_of(policy, filesystem_stdio(tmp_path / "files"))
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=server_env(), cwd=ROOT)

    async def listed(err: Any) -> None:
        async with Client(stdio_client(params, errlog=err), mode="legacy") as client:
            assert "list_directory" in await raw_tools(client)
            with anyio.fail_after(10):  # the line the server writes once it asked for roots
                while not re.search(r"(?i)\broots?\b", stderr.read_text(errors="replace")):
                    await anyio.sleep(0.05)
    with stderr.open("wb") as err:
        anyio.run(listed, err)
    text = stderr.read_text()
    assert "Failed" not in text and "not routed" not in text, text
