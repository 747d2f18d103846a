"""A policy reload that adds approvals (SPEC §15; issue 40.3), through real gateway processes: over
HTTP their pages are served at once, no restart (they answered 404, `/approvals` too, until the
gateway restarted); on a stdio gateway without `--pages-listen`, which has nowhere to serve them,
the reload is refused: the old policy stays in force, `policy_reloads_total{result="failure"}`
counts it, and the reason is logged.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession
from mcp.client.stdio import stdio_client

from tests.fixtures.credential_gateway import call
from tests.fixtures.gateway_upstream import UPSTREAM_STDIO, gateway_http, gateway_stdio, tool_calls
from tests.fixtures.oidc import AUDIENCE, OidcServer
from tests.fixtures.ports import free_port

pytestmark = pytest.mark.integration
WAIT_SECONDS = 60.0
OPEN = '[tools.echo]\nrequirements = []\n'
APPROVED = '''[approvals.payout]
approvers = ["auth:claim:role:treasury"]
[tools.echo]
requirements = ["approval:payout"]
'''
RELOADS = 'mcp_preconditions_policy_reloads_total{result="%s"} %s'


def until(read: Callable[[], Any], expected: Any, output: Callable[[], str] = lambda: "") -> Any:
    """Read until it gives `expected` (the machine is shared: no fixed sleeps)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while (found := read()) != expected:
        assert time.monotonic() < deadline, f"{found!r} != {expected!r}\n{output()}"
        time.sleep(0.2)
    return found


def auth(oidc_server: OidcServer) -> str:
    return (f'[auth]\nissuer = "{oidc_server.issuer}"\naudience = "{AUDIENCE}"\n'
            f'jwks_uri = "{oidc_server.jwks_uri}"\n')


def test_over_http_a_reload_that_adds_approvals_serves_their_pages_at_once(
        tmp_path: Path, oidc_server: OidcServer) -> None:
    policy, log = tmp_path / "policy.toml", tmp_path / "upstream.jsonl"
    policy.write_text(auth(oidc_server) + OPEN, encoding="utf-8")
    alice, tess = oidc_server.user_token("alice"), oidc_server.user_token("tess")
    bearer = {"Authorization": f"Bearer {tess}"}
    with gateway_http(policy, log, "--policy-poll-seconds", "0.2", "--", *UPSTREAM_STDIO,
                      wait="/readyz") as gw, httpx.Client(base_url=gw.url, timeout=30) as http:
        assert http.get("/approvals", headers=bearer).status_code == 404  # none yet
        assert not anyio.run(call, gw.url + "/mcp", alice, "echo", {"text": "a"}).is_error
        policy.write_text(auth(oidc_server) + APPROVED, encoding="utf-8")
        until(lambda: RELOADS % ("success", "1.0") in http.get("/metrics").text, True, gw.output)
        denied = anyio.run(call, gw.url + "/mcp", alice, "echo", {"text": "b"})
        assert denied.is_error and denied.structured_content["unmet"] == ["approval:payout"]
        listed = http.get("/approvals", headers=bearer)
        assert listed.status_code == 200, listed.text  # it was 404 until a restart
        [request] = listed.json()["requests"]
        assert http.get(f"/approvals/{request['id']}", headers=bearer).json()["state"] == "requested"
        page = http.get(f"/approvals/{request['id']}", headers={"Accept": "text/html"})
        assert page.status_code == 403 and "Sign-in is not configured" in page.text  # (served)
        taken = http.post(f"/approvals/{request['id']}", headers=bearer, json={"decision": "approve"})
        assert taken.status_code == 200, taken.text
        assert not anyio.run(call, gw.url + "/mcp", alice, "echo", {"text": "b"}).is_error
    assert tool_calls(log) == ["echo", "echo"]


async def test_a_stdio_gateway_without_pages_refuses_the_reload_and_keeps_its_policy(
        tmp_path: Path) -> None:
    policy, log, claims = tmp_path / "policy.toml", tmp_path / "upstream.jsonl", tmp_path / "c.json"
    policy.write_text(OPEN, encoding="utf-8")
    claims.write_text('{"iss": "https://idp.example", "sub": "carl"}', encoding="utf-8")
    metrics = f"http://127.0.0.1:{free_port()}"
    params = gateway_stdio(policy, log, "--claims", str(claims), "--policy-poll-seconds", "0.2",
                           "--metrics-listen", metrics)
    errors = tmp_path / "stderr.log"

    def reloads(result: str) -> float:
        """How many reloads had `result` (a refused policy is tried again at every poll)."""
        page = httpx.get(metrics + "/metrics", timeout=30).text
        prefix = RELOADS % (result, "")
        return float(next(line for line in page.splitlines() if line.startswith(prefix))[len(prefix):])

    with errors.open("a", encoding="utf-8") as errlog:
        async with stdio_client(params, errlog=errlog) as streams, ClientSession(*streams) as session:
            await session.initialize()
            assert not (await session.call_tool("echo", {"text": "a"})).is_error
            policy.write_text(APPROVED, encoding="utf-8")
            await anyio.to_thread.run_sync(lambda: until(lambda: reloads("failure") >= 1, True,
                                                         lambda: errors.read_text()))
            kept = await session.call_tool("echo", {"text": "b"})  # the old policy: it runs
            assert not kept.is_error, kept
            assert reloads("success") == 0
    assert tool_calls(log) == ["echo", "echo"]
    logged = errors.read_text(encoding="utf-8")
    assert ("policy reload failed, keeping revision" in logged and
            "approvals.payout: approvers decide it on the gateway's approval pages, which a stdio "
            "gateway serves only with --pages-listen http://127.0.0.1:PORT" in logged), logged
