"""The gateway's own listener answers as an AuthZEN decision point while its policy has a
`[pdp_server]` table (SPEC §16: "so one deployment is both"; authzen/mounted.py): the same guard
decides the gateway's calls and the AuthZEN requests, by a tool's visible name; a reload adds or
removes the decision point without a restart; the gateway's Host and Origin checks and the policy's
`[auth]` hold on its paths too.

In-process (tests/fixtures/inprocess.py): the gateway wired from its command line in the test's
event loop, its upstream the logging upstream in memory, each reload awaited on the reloader's log
line. The decision point's own answers are tests/unit/test_authzen_app.py's.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.inprocess import InProcess, logging_gateway
from tests.fixtures.oidc import AUDIENCE, SigningKey, access_claims

pytestmark = pytest.mark.asyncio(loop_scope="module")

ISSUER = "https://issuer.test"
TOOLS = '[tools.echo]\nrequirements = ["auth:claim:role:pilot"]\n'
SERVED = TOOLS + '[pdp_server.subjects.bob]\nrole = "pilot"\n'
EVALUATION = "/access/v1/evaluation"
METADATA = "/.well-known/authzen-configuration"
LISTEN = ("--listen", "http://127.0.0.1:0", "--policy-poll-seconds", "0.1")


def ask(subject: str, properties: dict[str, Any] | None = None) -> dict[str, Any]:
    """The request a COAZ-MCP enforcement point sends about a call of `echo`."""
    return {"subject": {"type": "identity", "id": subject, "properties": properties or {}},
            "action": {"name": "tools/call"},
            "resource": {"type": "tool", "id": "echo", "properties": {"arguments": {"text": "hi"}}},
            "context": {"requirement": "pdp:gateway"}}


def _publish(path: Path, text: str) -> None:
    staged = path.with_suffix(".tmp")
    staged.write_text(text, encoding="utf-8")
    os.replace(staged, path)


async def _reloaded(gw: InProcess, path: Path, text: str) -> None:
    seen = len(gw.log.lines)
    _publish(path, text)
    await gw.log.wait_for(r"policy .* reloaded: revision", after=seen)


async def _statuses(gw: InProcess) -> tuple[int, int]:
    async with gw.http() as http:
        return ((await http.post(EVALUATION, json=ask("alice"))).status_code,
                (await http.get(METADATA)).status_code)


async def test_the_policys_decision_point_beside_mcp_decides_as_the_gateway_does(
        tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(SERVED, encoding="utf-8")
    async with logging_gateway(policy, tmp_path / "upstream.jsonl", *LISTEN) as gw, gw.http() as http:
        pilot = (await http.post(EVALUATION, json=ask("alice", {"role": "pilot"}))).json()
        other = (await http.post(EVALUATION, json=ask("carol", {"role": "cook"}))).json()
        listed = (await http.post(EVALUATION, json=ask("bob"))).json()  # [pdp_server.subjects]
        metadata = (await http.get(METADATA)).json()
        rebound = await http.post(EVALUATION, json=ask("alice", {"role": "pilot"}),
                                  headers={"host": "evil.example"})
        mcp = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                              headers={"accept": "application/json, text/event-stream"})
    assert pilot == {"decision": True}
    assert other == {"decision": False,
                     "context": {"reason_admin": {"unmet": ["auth:claim:role:pilot"]}}}
    assert listed == {"decision": True}
    assert metadata["policy_decision_point"] == "http://127.0.0.1:8000"
    assert metadata["access_evaluation_endpoint"] == "http://127.0.0.1:8000" + EVALUATION
    assert rebound.status_code == 421  # the gateway's DNS-rebinding check holds on these paths
    assert mcp.status_code != 404  # /mcp is still the gateway's


async def test_a_reload_adds_and_removes_the_decision_point(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(TOOLS, encoding="utf-8")
    async with logging_gateway(policy, tmp_path / "upstream.jsonl", *LISTEN) as gw:
        before = await _statuses(gw)
        await _reloaded(gw, policy, SERVED)
        served = await _statuses(gw)
        await _reloaded(gw, policy, TOOLS)
        after = await _statuses(gw)
    assert before == (404, 404)
    assert served == (200, 200)
    assert after == (404, 404)


async def test_with_auth_an_enforcement_point_needs_a_token_the_policy_accepts(
        tmp_path: Path) -> None:
    key = SigningKey("EC", "pep")
    jwk = ", ".join(f"{k} = {json.dumps(v)}" for k, v in key.public_jwk().items())
    auth = (f'[auth]\nissuer = "{ISSUER}"\naudience = "{AUDIENCE}"\nkeys = [{{ {jwk} }}]\n'
            f'algorithms = ["{key.alg}"]\n')
    token = key.sign(access_claims(ISSUER, exp=int(time.time()) + 600))
    policy = tmp_path / "policy.toml"
    policy.write_text(SERVED + auth, encoding="utf-8")
    async with logging_gateway(policy, tmp_path / "upstream.jsonl", *LISTEN) as gw, gw.http() as http:
        anonymous = await http.post(EVALUATION, json=ask("bob"))
        forged = await http.post(EVALUATION, json=ask("bob"),
                                 headers={"authorization": "Bearer not-a-token"})
        verified = await http.post(EVALUATION, json=ask("bob"),
                                   headers={"authorization": f"Bearer {token}"})
        public = await http.get(METADATA)
    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"].startswith("Bearer")
    assert forged.status_code == 401
    assert verified.json() == {"decision": True}  # the token says who may ask, not who is asked about
    assert public.status_code == 200
