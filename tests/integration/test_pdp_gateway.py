"""`pdp:` through a real gateway process (SPEC §16), interop: the real Cerbos PDP (npm
`@cerbos/cerbos-linux-x64`, tests/fixtures/cerbos.py, policies in tests/fixtures/cerbos/policies/)
decides who may see and call which tool of a token-verifying SDK server (`crm`,
tests/fixtures/token_servers.py) behind the gateway; callers hold the real oidc-provider's tokens,
which the gateway verifies, and the PDP's subject is the verified caller. A denied call never
reaches the server; the decision records carry the `pdp` field and `/metrics` counts
`mcp_preconditions_pdp_total`. Then PDPs that fail: one that hangs, one that answers 500, one that
answers garbage (a real HTTP server of this process, tests/fixtures/misbehaving_pdp.py), and a
Cerbos that goes down and comes back: every call is denied while it gives no decision, and
allowed again once it does. Interop because each component is the real one (the gateway's process,
its HTTP listener, the IdP, the SDK server, the Cerbos binary).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.fixtures.cerbos import CerbosPdp, started
from tests.fixtures.credential_gateway import Gateway, call, gateway, policy_text, text_of
from tests.fixtures.misbehaving_pdp import misbehaving_pdp
from tests.fixtures.oidc import CRM, CRM_AUDIENCE, OidcServer
from tests.fixtures.token_servers import TokenServer, token_server

pytestmark = [pytest.mark.integration, pytest.mark.interop]
TOOLS = """
[guard]
list_filtering = true
[tools.crm__whoami]
requirements = ["auth:oauth2", "pdp:corp"]
[tools.crm__note]
requirements = ["auth:oauth2", "pdp:corp"]
"""


def pdp_policy(oidc: OidcServer, url: str, timeout: float = 2.0) -> str:
    return policy_text(oidc, sign_in=False, extra=(
        f'[pdp.corp]\nurl = "{url}"\nsubject_claims = ["roles"]\ntimeout_seconds = {timeout}\n'
        f"cache_seconds = 0\n" + TOOLS))


@pytest.fixture(scope="module")
def crm(oidc_server: OidcServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TokenServer]:
    with token_server(oidc_server.issuer, CRM_AUDIENCE, tmp_path_factory.mktemp("crm")) as server:
        yield server


@pytest.fixture(scope="module")
def callers(oidc_server: OidcServer) -> dict[str, str]:
    """Mission control (roles mission_control, engineer), an observer (roles observer) and alice (a
    person with no roles), each with a token for the gateway."""
    return {"mc": oidc_server.token("mission-control"),
            "observer": oidc_server.token("observer", scope="mission:read"),
            "alice": oidc_server.user_token("alice")}


def servers(oidc: OidcServer, crm: TokenServer) -> tuple[dict[str, Any], dict[str, str]]:
    token = oidc.token("mission-control", resource=CRM, scope=None)  # the gateway's own, for crm
    return ({"crm": {"url": crm.url, "headers": {"Authorization": "env:CRM_SERVICE"}}},
            {"CRM_SERVICE": f"Bearer {token}"})


@pytest.fixture(scope="module")
def gw(oidc_server: OidcServer, crm: TokenServer, cerbos: CerbosPdp,
       tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tables, env = servers(oidc_server, crm)
    with gateway(tmp_path_factory.mktemp("gateway"), oidc_server, tables, env=env,
                 policy=pdp_policy(oidc_server, cerbos.url)) as running:
        yield running


async def listed(url: str, token: str) -> list[str]:
    async with Client(streamable_http_client(url, http_client=httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {token}"}, timeout=10))) as client:
        return sorted(t.name for t in (await client.list_tools()).tools)


def test_cerbos_decides_who_sees_and_calls_which_tool(gw: Gateway, crm: TokenServer,
                                                      callers: dict[str, str]) -> None:
    assert asyncio.run(listed(gw.url, callers["mc"])) == ["crm__note", "crm__whoami"]
    assert asyncio.run(listed(gw.url, callers["observer"])) == ["crm__whoami"]
    assert asyncio.run(listed(gw.url, callers["alice"])) == []
    before = len(crm.calls())
    note = asyncio.run(call(gw.url, callers["mc"], "crm__note", {"text": "hello"}))
    assert not note.is_error and text_of(note).endswith(": hello")
    assert not asyncio.run(call(gw.url, callers["observer"], "crm__whoami")).is_error
    for who, tool, arguments in [("mc", "crm__note", {"text": "launch codes"}),
                                 ("observer", "crm__note", {"text": "hello"}),
                                 ("alice", "crm__whoami", {})]:
        refused = asyncio.run(call(gw.url, callers[who], tool, arguments))
        assert refused.is_error
        assert refused.structured_content["unmet"] == ["pdp:corp"]
    assert [c["tool"] for c in crm.calls()[before:]] == ["note", "whoami"]  # no denied call ran
    records = {(r["tool"], r["allowed"]): r for r in gw.records() if r.get("pdp")}
    assert records[("crm__note", False)]["pdp"] == [
        {"name": "corp", "decision": False, "cached": False, "reason_admin": None}]
    assert records[("crm__whoami", True)]["pdp"][0]["decision"] is True
    metrics = gw.metrics()
    assert 'mcp_preconditions_pdp_total{pdp="corp",result="allow"}' in metrics
    assert 'mcp_preconditions_pdp_total{pdp="corp",result="deny"}' in metrics


@pytest.mark.parametrize("mode", ["hang", "500", "garbage"])
def test_a_pdp_that_gives_no_decision_denies_every_call(
        mode: str, oidc_server: OidcServer, crm: TokenServer, callers: dict[str, str],
        tmp_path: Path) -> None:
    tables, env = servers(oidc_server, crm)
    with misbehaving_pdp(mode) as pdp, gateway(
            tmp_path, oidc_server, tables, env=env,
            policy=pdp_policy(oidc_server, pdp.url, timeout=0.5)) as gw:
        before = len(crm.calls())
        refused = asyncio.run(call(gw.url, callers["mc"], "crm__whoami"))
        assert refused.is_error
        assert refused.structured_content["unmet"] == ["pdp:corp"]
        assert list(gw.records()[-1]["errors"]) == ["pdp:corp"]
        assert asyncio.run(listed(gw.url, callers["mc"])) == []  # an error hides the tool too
        assert crm.calls()[before:] == []
        assert pdp.posts >= 2
        assert 'mcp_preconditions_pdp_total{pdp="corp",result="error"}' in gw.metrics()
        assert pdp.url not in text_of(refused)  # the PDP's address is the operator's to know
        assert f"pdp: the decision point {pdp.url}" in gw.output()


def test_a_pdp_that_goes_down_and_comes_back(oidc_server: OidcServer, crm: TokenServer,
                                             callers: dict[str, str], tmp_path: Path) -> None:
    cerbos = started()
    try:
        tables, env = servers(oidc_server, crm)
        with gateway(tmp_path, oidc_server, tables, env=env,
                     policy=pdp_policy(oidc_server, cerbos.url)) as gw:
            assert not asyncio.run(call(gw.url, callers["mc"], "crm__whoami")).is_error
            cerbos.stop()
            down = asyncio.run(call(gw.url, callers["mc"], "crm__whoami"))
            assert down.structured_content["unmet"] == ["pdp:corp"]
            assert list(gw.records()[-1]["errors"]) == ["pdp:corp"]
            cerbos.start()  # on the port it had
            assert not asyncio.run(call(gw.url, callers["mc"], "crm__whoami")).is_error
    finally:
        cerbos.stop()
