"""A policy reload that adds approvals (SPEC §15; issue 40.3): over HTTP the gateway's pages are
served at once, no restart (they answered 404, `/approvals` too, until the gateway restarted); on a
stdio gateway without `--pages-listen`, which has nowhere to serve them, the reload is refused: the
old policy stays in force, `policy_reloads_total{result="failure"}` counts it, and the reason is
logged.

In-process: the gateway wired from its command line (its policy poller among its tasks, the event
awaited being its log line), the logging upstream in memory, the callers' tokens signed in this
process and verified by `[auth]` with the key inline. (A real gateway process's policy poll is
test_fleet_replicas' and test_image_replicas', in the interop tier.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.gateway_upstream import tool_calls
from tests.fixtures.hosted import ISSUER
from tests.fixtures.inprocess import logging_gateway

pytestmark = pytest.mark.integration
OPEN = '[tools.echo]\nrequirements = []\n'
APPROVED = '''[approvals.payout]
approvers = ["auth:claim:role:treasury"]
[tools.echo]
requirements = ["approval:payout"]
'''
RELOADS = 'mcp_preconditions_policy_reloads_total{result="%s"} %s'
AUTH = f"[auth]\n{ISSUER.auth_lines()}"


async def test_over_http_a_reload_that_adds_approvals_serves_their_pages_at_once(
        tmp_path: Path) -> None:
    policy, log = tmp_path / "policy.toml", tmp_path / "upstream.jsonl"
    policy.write_text(AUTH + OPEN, encoding="utf-8")
    alice, tess = ISSUER.token("alice"), ISSUER.token("tess", role="treasury")
    bearer = {"Authorization": f"Bearer {tess}"}
    async with logging_gateway(policy, log, "--listen", "http://127.0.0.1:0",
                               "--policy-poll-seconds", "0.2") as gw, gw.http() as http:
        assert (await http.get("/approvals", headers=bearer)).status_code == 404  # none yet
        async with gw.client(headers={"Authorization": f"Bearer {alice}"}) as caller:
            assert not (await caller.call_tool("echo", {"text": "a"})).is_error
            mark = len(gw.log.lines)
            policy.write_text(AUTH + APPROVED, encoding="utf-8")
            await gw.logged(r"policy .* reloaded: revision", after=mark)
            assert RELOADS % ("success", "1.0") in (await http.get("/metrics")).text
            denied = await caller.call_tool("echo", {"text": "b"})
            assert denied.is_error and denied.structured_content["unmet"] == ["approval:payout"]
            listed = await http.get("/approvals", headers=bearer)
            assert listed.status_code == 200, listed.text  # it was 404 until a restart
            [request] = listed.json()["requests"]
            shown = await http.get(f"/approvals/{request['id']}", headers=bearer)
            assert shown.json()["state"] == "requested"
            page = await http.get(f"/approvals/{request['id']}", headers={"Accept": "text/html"})
            assert page.status_code == 403 and "Sign-in is not configured" in page.text  # served
            taken = await http.post(f"/approvals/{request['id']}", headers=bearer,
                                    json={"decision": "approve"})
            assert taken.status_code == 200, taken.text
            assert not (await caller.call_tool("echo", {"text": "b"})).is_error
    assert tool_calls(log) == ["echo", "echo"]


async def test_a_stdio_gateway_without_pages_refuses_the_reload_and_keeps_its_policy(
        tmp_path: Path) -> None:
    policy, log, claims = tmp_path / "policy.toml", tmp_path / "upstream.jsonl", tmp_path / "c.json"
    policy.write_text(OPEN, encoding="utf-8")
    claims.write_text('{"iss": "https://idp.example", "sub": "carl"}', encoding="utf-8")

    async with logging_gateway(policy, log, "--claims", str(claims), "--policy-poll-seconds",
                               "0.2") as gw, gw.http() as http, gw.client() as session:
        async def reloads(result: str) -> float:
            """How many reloads had `result` (a refused policy is tried again at every poll)."""
            page = (await http.get("/metrics")).text
            prefix = RELOADS % (result, "")
            return float(next(line for line in page.splitlines()
                              if line.startswith(prefix))[len(prefix):])

        assert not (await session.call_tool("echo", {"text": "a"})).is_error
        mark = len(gw.log.lines)
        policy.write_text(APPROVED, encoding="utf-8")
        logged = await gw.logged("policy reload failed, keeping revision", after=mark)
        assert await reloads("failure") >= 1
        kept = await session.call_tool("echo", {"text": "b"})  # the old policy: it runs
        assert not kept.is_error, kept
        assert await reloads("success") == 0
    assert tool_calls(log) == ["echo", "echo"]
    assert ("approvals.payout: approvers decide it on the gateway's approval pages, which a stdio "
            "gateway serves only with --pages-listen http://127.0.0.1:PORT" in logged), logged
