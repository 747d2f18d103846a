"""`pdp:` in the gateway, in-process (tests/fixtures/inprocess.py): the gateway wired from its command
line in this event loop, its server the logging upstream in memory, its decision point the
in-process PDP (tests/fixtures/fake_pdp.py) on a socket of this loop. The PDP's request names the
server key the tool routes to and the `--claims` caller; the listing hides what the PDP refuses;
the record carries the `pdp` field with the PDP's `reason_admin`, which the caller never sees; a
refused call never reaches the server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.fake_pdp import FakePdp
from tests.fixtures.gateway_upstream import read_log
from tests.fixtures.inprocess import asgi_served, logging_gateway
from tests.integration.test_gateway_calls import raw_call, raw_tools

pytestmark = pytest.mark.asyncio


def files(tmp: Path, url: str, roles: list[str]) -> tuple[Path, Path, Path]:
    policy, claims = tmp / "policy.toml", tmp / "claims.json"
    policy.write_text(f'[guard]\nlist_filtering = true\n[pdp.corp]\nurl = "{url}"\n'
                      f'subject_claims = ["roles"]\n[tools.echo]\nrequirements = ["pdp:corp"]\n',
                      encoding="utf-8")
    claims.write_text(json.dumps({"sub": "ada", "iss": "https://idp.test", "roles": roles}),
                      encoding="utf-8")
    return policy, claims, tmp / "decisions.jsonl"


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


async def test_the_gateway_asks_about_the_caller_and_the_server(tmp_path: Path) -> None:
    pdp = FakePdp()
    async with asgi_served(pdp) as url:
        policy, claims, decisions = files(tmp_path, url, ["operator"])
        log = tmp_path / "upstream.jsonl"
        async with logging_gateway(policy, log, "--claims", str(claims), "--decision-log",
                                   str(decisions)) as gw, gw.client() as client:
            assert "echo" in await raw_tools(client)
            result = await raw_call(client, "echo", {"text": "hi"})
            server = next(iter(m.key for m in gw.gateway.fleet))
    assert not result.get("isError")
    listing, called = [body["evaluations"][0] for body in pdp.asked]
    assert listing["action"] == {"name": "tools/list"}
    assert called["subject"] == {"type": "identity", "id": "ada",
                                 "properties": {"iss": "https://idp.test", "roles": ["operator"]}}
    assert called["resource"] == {"type": "tool", "id": "echo", "properties": {
        "server": server, "arguments": {"text": "hi"}}}
    (record,) = [r for r in records(decisions) if r["tool"] == "echo"]
    assert record["pdp"] == [{"name": "corp", "decision": True, "cached": False,
                              "reason_admin": None}]


async def test_a_refused_caller_sees_nothing_of_the_reason(tmp_path: Path) -> None:
    pdp = FakePdp()
    async with asgi_served(pdp) as url:
        policy, claims, decisions = files(tmp_path, url, ["viewer"])
        log = tmp_path / "upstream.jsonl"
        async with logging_gateway(policy, log, "--claims", str(claims), "--decision-log",
                                   str(decisions)) as gw, gw.client() as client:
            assert "echo" not in await raw_tools(client)
            refused = await raw_call(client, "echo", {"text": "hi"})
            assert gw.output().count("operators only") == 0
    assert refused["isError"] and "operators only" not in json.dumps(refused)
    assert refused["structuredContent"]["unmet"] == ["pdp:corp"]
    assert [e for e in read_log(log) if e["method"] == "tools/call"] == []
    (record,) = [r for r in records(decisions) if r["tool"] == "echo"]
    assert record["pdp"] == [{"name": "corp", "decision": False, "cached": False,
                              "reason_admin": {"rule": "operators only"}}]
