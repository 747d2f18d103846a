"""A loopback gateway answers no page that rebinds its own name to 127.0.0.1 (issue 29): every path but
`/healthz` (`/metrics` and `/readyz` included) checks Host and Origin, as `/mcp` does; and every
refusal made before a decision (a Host, no token, a refused token, another's session) counts in
`mcp_preconditions_http_refused_total{reason}`.

In-process (tests/fixtures/inprocess.py): the checks and the counts are the gateway's app's, wired
from its command line in the test's loop, tokens signed here. Two stay with a gateway process
(interop): a probe that sends no Host at all, which only bytes on the listener's socket can be (an
HTTP client always sends one), and the metrics listener of its own (`--metrics-listen`), which the
command starts beside the gateway.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

import anyio
import httpx
import pytest

from tests.fixtures.inprocess import BASE_URL, logging_gateway
from tests.fixtures.local_issuer import ISSUER_KEY
from tests.fixtures.oidc import OidcServer
from tests.integration.test_gateway_lockout import ACCEPT, INITIALIZE, gateway

pytestmark = pytest.mark.integration

REBOUND = "rebound.attacker.test"


def refused_counts(page: str) -> dict[str, float]:
    return {m[1]: float(m[2]) for m in re.finditer(
        r'^mcp_preconditions_http_refused_total\{reason="(\w+)"\} (\S+)$', page, re.MULTILINE)}


async def test_a_rebound_host_reads_neither_metrics_nor_readiness_and_each_refusal_is_counted(
        tmp_path: Path) -> None:
    owner, other = ISSUER_KEY.token(), ISSUER_KEY.token("observer", scope="mission:read")
    policy = tmp_path / "policy.toml"
    policy.write_text(ISSUER_KEY.auth_policy(), encoding="utf-8")
    port = BASE_URL.rsplit(":", 1)[1]
    async with logging_gateway(policy, tmp_path / "upstream.jsonl",
                               "--listen", "http://127.0.0.1:0") as gw, gw.http() as http:
        rebound = {path: await http.get(path, headers={"host": f"{REBOUND}:{port}"})
                   for path in ("/metrics", "/readyz", "/healthz",
                                "/.well-known/oauth-protected-resource")}
        posted = await http.post("/mcp", headers={**ACCEPT, "host": REBOUND,
                                                  "authorization": f"Bearer {owner}"}, json={})
        origin = await http.get("/readyz", headers={"origin": f"http://{REBOUND}"})
        missing = await http.post("/mcp", headers=ACCEPT, json={})
        invalid = await http.post("/mcp", headers={**ACCEPT, "authorization": "Bearer not.a.jwt"},
                                  json={})
        session = (await http.post("/mcp", json=INITIALIZE, headers={
            **ACCEPT, "authorization": f"Bearer {owner}"})).headers["mcp-session-id"]
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        unknown, anothers = [await http.post("/mcp", json=listing, headers={
            **ACCEPT, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25",
            "authorization": f"Bearer {token}"}) for sid, token in (("no-such", owner),
                                                                    (session, other))]
        page = (await http.get("/metrics")).text
    assert {p: (r.status_code, r.text) for p, r in rebound.items()} == {
        "/metrics": (421, "Invalid Host header"), "/readyz": (421, "Invalid Host header"),
        "/healthz": (200, '{"status":"up"}'),
        "/.well-known/oauth-protected-resource": (421, "Invalid Host header")}
    assert (posted.status_code, posted.text) == (421, "Invalid Host header")
    assert (origin.status_code, origin.text) == (403, "Invalid Origin header")
    assert [r.status_code for r in (missing, invalid, unknown, anothers)] == [401, 401, 404, 404]
    assert refused_counts(page) == {"token_missing": 1, "token_invalid": 1, "session": 2,
                                    "host": 5, "over_cap": 0}


def until_ready(url: str) -> None:
    """Once `/readyz` answers 200 (the upstream is connected and listed), for 10 s at most."""
    async def ready() -> None:
        async with httpx.AsyncClient(timeout=10) as http:
            with anyio.fail_after(10):
                while (await http.get(url + "/readyz")).status_code != 200:
                    await anyio.sleep(0.05)
    anyio.run(ready)


def _without_host(url: str, request_line: bytes) -> bytes:
    """What an HTTP/1.0 client that sends no Host (haproxy's `option httpchk`) reads."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request_line + b"\r\n\r\n")
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
    return data


@pytest.mark.interop
def test_a_probe_without_host_is_answered_and_mcp_without_host_is_not(
        tmp_path: Path, oidc_server: OidcServer) -> None:
    """No browser page can omit Host, so a health check or scrape without one (haproxy's HTTP/1.0
    `option httpchk`) is answered; `/mcp` refuses it, as the MCP SDK does. Interop: an HTTP/1.0
    request without Host is bytes on the listener's socket, read by a gateway process."""
    with gateway(tmp_path, oidc_server) as gw:
        until_ready(gw.url)
        ready = _without_host(gw.url, b"GET /readyz HTTP/1.0")
        scraped = _without_host(gw.url, b"GET /metrics HTTP/1.0")
        mcp = _without_host(gw.url, b"POST /mcp HTTP/1.0\r\nContent-Length: 0")
    assert ready.startswith(b"HTTP/1.1 200 ") and b'"status":"ready"' in ready
    assert scraped.startswith(b"HTTP/1.1 200 ") and b"mcp_preconditions_http_refused_total" in scraped
    assert mcp.startswith(b"HTTP/1.1 421 ") and mcp.endswith(b"Invalid Host header")


@pytest.mark.interop
def test_the_metrics_listener_of_its_own_answers_loopback_hosts_only(tmp_path: Path,
                                                                      oidc_server: OidcServer) -> None:
    """Interop: `--metrics-listen` is a listener the command starts beside the gateway's own."""
    with gateway(tmp_path, oidc_server, "--metrics-listen", "http://127.0.0.1:0") as gw:
        # announced before the gateway listens, which the fixture waited for
        found = re.search(r"metrics on (\S+)", gw.output())
        assert found is not None, gw.output()
        url = found.group(1)
        port = url.split(":")[2].split("/")[0]
        rebound = httpx.get(url, headers={"host": f"{REBOUND}:{port}"}, timeout=10)
        origin = httpx.get(url, headers={"origin": f"http://{REBOUND}"}, timeout=10)
        page = httpx.get(url, timeout=10)
    assert (rebound.status_code, rebound.text) == (421, "Invalid Host header")
    assert (origin.status_code, origin.text) == (403, "Invalid Origin header")
    assert page.status_code == 200 and refused_counts(page.text)["host"] == 2
