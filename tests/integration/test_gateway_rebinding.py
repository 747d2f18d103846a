"""A loopback gateway answers no page that rebinds its own name to 127.0.0.1 (issue 29): every path but
`/healthz` (`/metrics` and `/readyz` included) checks Host and Origin, as `/mcp` does; and every
refusal made before a decision (a Host, no token, a refused token, another's session) counts in
`mcp_preconditions_http_refused_total{reason}`. A real gateway process, real tokens.
"""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path

import httpx
import pytest

from tests.fixtures.oidc import OidcServer
from tests.integration.test_gateway_lockout import ACCEPT, gateway, initialize

pytestmark = pytest.mark.integration

REBOUND = "rebound.attacker.test"


def refused_counts(page: str) -> dict[str, float]:
    return {m[1]: float(m[2]) for m in re.finditer(
        r'^mcp_preconditions_http_refused_total\{reason="(\w+)"\} (\S+)$', page, re.MULTILINE)}


def test_a_rebound_host_reads_neither_metrics_nor_readiness_and_each_refusal_is_counted(
        tmp_path: Path, oidc_server: OidcServer) -> None:
    owner, other = oidc_server.token(), oidc_server.token("observer", scope="mission:read")
    with gateway(tmp_path, oidc_server) as gw, \
            httpx.Client(base_url=gw.url, timeout=30) as http:
        rebound = {path: http.get(path, headers={"host": f"{REBOUND}:{gw.url.rsplit(':', 1)[1]}"})
                   for path in ("/metrics", "/readyz", "/healthz", "/.well-known/oauth-protected-resource")}
        posted = http.post("/mcp", headers={**ACCEPT, "host": REBOUND,
                                            "authorization": f"Bearer {owner}"}, json={})
        origin = http.get("/readyz", headers={"origin": f"http://{REBOUND}"})
        missing = http.post("/mcp", headers=ACCEPT, json={})
        invalid = http.post("/mcp", headers={**ACCEPT, "authorization": "Bearer not.a.jwt"}, json={})
        session = initialize(http, owner).headers["mcp-session-id"]
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        unknown, anothers = (http.post("/mcp", json=listing, headers={
            **ACCEPT, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25",
            "authorization": f"Bearer {token}"}) for sid, token in (("no-such", owner),
                                                                    (session, other)))
        page = http.get("/metrics").text
    assert {p: (r.status_code, r.text) for p, r in rebound.items()} == {
        "/metrics": (421, "Invalid Host header"), "/readyz": (421, "Invalid Host header"),
        "/healthz": (200, '{"status":"up"}'),
        "/.well-known/oauth-protected-resource": (421, "Invalid Host header")}
    assert (posted.status_code, posted.text) == (421, "Invalid Host header")
    assert (origin.status_code, origin.text) == (403, "Invalid Origin header")
    assert [r.status_code for r in (missing, invalid, unknown, anothers)] == [401, 401, 404, 404]
    assert refused_counts(page) == {"token_missing": 1, "token_invalid": 1, "session": 2,
                                    "host": 5, "over_cap": 0}


def _without_host(url: str, request_line: bytes) -> bytes:
    """What an HTTP/1.0 client that sends no Host (haproxy's `option httpchk`) reads."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request_line + b"\r\n\r\n")
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
    return data


def test_a_probe_without_host_is_answered_and_mcp_without_host_is_not(
        tmp_path: Path, oidc_server: OidcServer) -> None:
    """No browser page can omit Host, so a health check or scrape without one (haproxy's HTTP/1.0
    `option httpchk`) is answered; `/mcp` refuses it, as the MCP SDK does."""
    with gateway(tmp_path, oidc_server) as gw:
        for _ in range(300):  # the upstream connects
            if httpx.get(gw.url + "/readyz", timeout=30).status_code == 200:
                break
            time.sleep(0.1)
        ready = _without_host(gw.url, b"GET /readyz HTTP/1.0")
        scraped = _without_host(gw.url, b"GET /metrics HTTP/1.0")
        mcp = _without_host(gw.url, b"POST /mcp HTTP/1.0\r\nContent-Length: 0")
    assert ready.startswith(b"HTTP/1.1 200 ") and b'"status":"ready"' in ready
    assert scraped.startswith(b"HTTP/1.1 200 ") and b"mcp_preconditions_http_refused_total" in scraped
    assert mcp.startswith(b"HTTP/1.1 421 ") and mcp.endswith(b"Invalid Host header")


def test_the_metrics_listener_of_its_own_answers_loopback_hosts_only(tmp_path: Path,
                                                                      oidc_server: OidcServer) -> None:
    with gateway(tmp_path, oidc_server, "--metrics-listen", "http://127.0.0.1:0") as gw:
        for _ in range(300):
            found = re.search(r"metrics on (\S+)", gw.output())
            if found:
                break
            time.sleep(0.1)
        assert found is not None, gw.output()
        url = found.group(1)
        port = url.split(":")[2].split("/")[0]
        rebound = httpx.get(url, headers={"host": f"{REBOUND}:{port}"}, timeout=30)
        origin = httpx.get(url, headers={"origin": f"http://{REBOUND}"}, timeout=30)
        page = httpx.get(url, timeout=30)
    assert (rebound.status_code, rebound.text) == (421, "Invalid Host header")
    assert (origin.status_code, origin.text) == (403, "Invalid Origin header")
    assert page.status_code == 200 and refused_counts(page.text)["host"] == 2
