"""The approval pages for scripts (SPEC §15): a denied call makes a request, listed to those who may
decide it; a script's POST answers 200, 401, 403 (not an approver, or the caller), 404, 400 and 409;
the approved call runs once, as the upstream's log shows, and the decision is in the audit trail,
the decision records and the metrics, never a token. A stdio gateway serves the same pages on
`--pages-listen`.

In-process (tests/fixtures/inprocess.py): the gateway wired from its command line (`--config`) in the
test's loop, its server in memory, callers' and approvers' tokens signed here
(tests/fixtures/local_issuer.py), approvals in its memory store; a stdio gateway's `--pages-listen`
is a real socket of this loop. Signing in at the real oidc-provider and approving in Chromium, with
the approvals in Redis: test_approval_pages.py (interop).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from tests.fixtures.fleet import write_gateway_toml
from tests.fixtures.gateway_upstream import tool_calls
from tests.fixtures.inprocess import InProcess, cli_gateway, held
from tests.fixtures.local_issuer import ISSUER_KEY
from tests.fixtures.memory_upstream import STUB, MemoryServers, logging_env
from tests.fixtures.ports import free_port
from tests.integration.test_approval_pages import APPROVALS

pytestmark = pytest.mark.asyncio(loop_scope="module")
IN_MEMORY = APPROVALS.replace('store = "redis"\n', "")
TREASURERS = ("tess", "trent")  # hold the role the approvers need; alice and bob hold none
ISSUED: list[str] = []  # every token made here: none may show in what the gateway logs


def token(who: str) -> str:
    made = ISSUER_KEY.token(who, role="treasury" if who in TREASURERS else None, roles=None)
    ISSUED.append(made)
    return made


@pytest_asyncio.fixture(loop_scope="module")
async def gw(tmp_path: Path) -> AsyncIterator[tuple[InProcess, Path, Path]]:
    """`gateway --config` with one server `up` (the logging upstream, in memory), approvals for
    `up__echo`, callers' tokens verified; with its upstream's log and its decision log."""
    (tmp_path / "policy.toml").write_text(ISSUER_KEY.auth_policy() + IN_MEMORY, encoding="utf-8")
    log, decisions = tmp_path / "upstream.jsonl", tmp_path / "decisions.jsonl"
    servers = MemoryServers()
    with servers.installed():
        upstream = servers.logging_upstream("up", **logging_env(log))
        config = write_gateway_toml(tmp_path / "gateway.toml", "policy.toml",
                                    {"up": {"command": STUB, "args": upstream[1:]}})
        async with held(cli_gateway(["--config", str(config), "--listen", "http://127.0.0.1:0",
                                     "--decision-log", str(decisions)])) as gateway:
            await gateway.until_ready()
            yield gateway, log, decisions


async def call(gw: InProcess, who: str, arguments: dict[str, Any]) -> Any:
    async with gw.client("auto", headers={"Authorization": f"Bearer {token(who)}"}) as client:
        return await client.call_tool("up__echo", arguments)


async def denied(gw: InProcess, who: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await call(gw, who, arguments)
    assert result.is_error, result
    payload: dict[str, Any] = result.structured_content
    assert payload["error"] == "unmet_requirements" and payload["unmet"] == ["approval:payout"]
    return payload


async def waiting(http: httpx.AsyncClient, who: str) -> list[dict[str, Any]]:
    answer = await http.get("/approvals", headers={"Authorization": f"Bearer {token(who)}"})
    assert answer.status_code == 200, answer.text
    found: list[dict[str, Any]] = answer.json()["requests"]
    return found


async def decide(http: httpx.AsyncClient, request_id: str, who: str | None,
                 decision: str = "approve") -> httpx.Response:
    headers = {"Authorization": f"Bearer {token(who)}"} if who is not None else {}
    return await http.post(f"/approvals/{request_id}", json={"decision": decision}, headers=headers)


async def test_a_scripts_approval_lets_exactly_one_retry_run(
        gw: tuple[InProcess, Path, Path]) -> None:
    gateway, log, decisions = gw
    arguments = {"text": "pay 100 to acme"}
    await denied(gateway, "trent", arguments)
    async with gateway.http() as http:
        assert all(r["caller"]["subject"] != "trent"
                   for r in await waiting(http, "alice"))  # not an approver
        assert all(r["caller"]["subject"] != "trent" for r in await waiting(http, "trent"))  # his own
        ids = [r["id"] for r in await waiting(http, "tess")
               if r["caller"]["subject"] == "trent" and r["arguments"] == arguments]
        assert len(ids) == 1, ids
        request_id = str(ids[0])

        assert (await decide(http, request_id, None)).status_code == 401
        refused = await decide(http, request_id, "alice")
        assert refused.status_code == 403
        assert refused.json()["message"] == ("You cannot decide this request: the approver does not "
                                             "meet: auth:claim:role:treasury.")
        own = await decide(http, request_id, "trent")
        assert own.status_code == 403 and "nobody approves their own call" in own.json()["message"]
        assert (await decide(http, "no-such-request", "tess")).status_code == 404
        bad = await http.post(f"/approvals/{request_id}", content=b'{"decision": "yes"}',
                              headers={"Authorization": f"Bearer {token('tess')}"})
        assert bad.status_code == 400

        before = tool_calls(log).count("echo")
        taken = await decide(http, request_id, "tess")
        assert taken.status_code == 200 and taken.json() == {"id": request_id, "state": "approved"}
        assert (await decide(http, request_id, "tess", "refuse")).status_code == 409
        output = gateway.output()
        assert f"approval 'payout' request {request_id} approved by tess ({ISSUER_KEY.issuer})" \
            in output  # the audit trail: who decided
        assert not [made for made in ISSUED if made in output]  # never a token

        changed = await denied(gateway, "trent", {"text": "pay 999 to acme"})  # another call
        assert changed["unmet"] == ["approval:payout"]
        ran = await call(gateway, "trent", arguments)
        assert not ran.is_error, ran
        await denied(gateway, "trent", arguments)  # single use: the next one asks again
        assert tool_calls(log).count("echo") == before + 1
        records = [json.loads(line) for line in decisions.read_text(encoding="utf-8").splitlines()]
        assert [r["approval"]["result"] for r in records
                if r.get("approval", {}).get("id") == request_id][-1] == "used"
        metrics = (await http.get("/metrics")).text
    for result in ("requested", "approved", "used"):
        assert f'mcp_preconditions_approvals_total{{approval="payout",result="{result}"}}' in metrics


async def test_a_stdio_gateway_serves_the_approval_pages_on_pages_listen(tmp_path: Path) -> None:
    """Approvals alone (no connected account): the pages on --pages-listen, a script's POST with a
    token signed here, the caller (named by --claims) retrying once."""
    policy = tmp_path / "policy.toml"
    policy.write_text(ISSUER_KEY.auth_policy() + IN_MEMORY.replace("[tools.up__echo]",
                                                                   "[tools.echo]"), encoding="utf-8")
    claims = tmp_path / "claims.json"
    claims.write_text(json.dumps({"iss": ISSUER_KEY.issuer, "sub": "carl"}), encoding="utf-8")
    pages, log = f"http://127.0.0.1:{free_port()}", tmp_path / "upstream.jsonl"
    servers = MemoryServers()
    with servers.installed():
        upstream = servers.logging_upstream(**logging_env(log))
        async with cli_gateway(["--policy", str(policy), "--claims", str(claims), "--pages-listen",
                                pages, "--", *upstream]) as gw, gw.client() as client:
            result = await client.call_tool("echo", {"text": "hi"})
            assert result.is_error and result.structured_content is not None
            assert result.structured_content["unmet"] == ["approval:payout"]
            async with httpx.AsyncClient(base_url=pages, timeout=10) as http:
                bearer = {"Authorization": f"Bearer {token('tess')}"}
                listed = (await http.get("/approvals", headers=bearer)).json()["requests"]
                [request_id] = [r["id"] for r in listed if r["caller"]["subject"] == "carl"]
                page = await http.get(f"/approvals/{request_id}")
                assert page.status_code == 403 and "Sign-in is not configured" in page.text
                taken = await http.post(f"/approvals/{request_id}", headers=bearer,
                                        json={"decision": "approve"})
                assert taken.status_code == 200, taken.text
            assert not (await client.call_tool("echo", {"text": "hi"})).is_error
    assert tool_calls(log) == ["echo"]
