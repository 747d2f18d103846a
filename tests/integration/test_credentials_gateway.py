"""Each caller reaches a server as themselves through a real gateway process (SPEC §14): the real
oidc-provider verifies callers (the policy's `[auth]`) and exchanges their tokens (RFC 8693);
servers behind the gateway verify their own tokens with the SDK's auth, each for its own audience,
and record which subject called on which session. Two callers each reach a server as themselves;
one exchange per caller across many and concurrent calls (counted at the provider); failed
exchanges denied and never forwarded; a 401 from the server recovered once, or the call denied
for its credential; per-subject secrets; sessions per caller; the caller's token sent nowhere but
as `subject_token` (also with the gateway's `[auth]` off); no token or secret in any log line,
record, metric page or exported span; config errors exit 2 naming the key path.

Interop, each marked, with why: this is per-caller credentials end to end, a real gateway process
in front of real servers verifying their own tokens, the real provider verifying callers and
exchanging their tokens (counted at the provider), the spans exported to a real OTLP receiver. The
config errors run through main() in this process.
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

from mcp_preconditions.cli import main
from mcp_preconditions.wire import META_KEY
from tests.fixtures.credential_gateway import (
    CONNECTOR_SECRET,
    GATEWAY_SECRET,
    PAGES_KEY,
    PLAIN_TOKEN,
    TOKEN_KEY,
    Gateway,
    call,
    exchange,
    gateway,
    policy_text,
    secrets_file,
    text_of,
)
from tests.fixtures.gateway_upstream import read_log, upstream_http
from tests.fixtures.mcp_servers import raw_tools
from tests.fixtures.oidc import CRM, CRM_AUDIENCE, OidcServer
from tests.fixtures.otlp import OtlpReceiver
from tests.fixtures.ports import free_port
from tests.fixtures.token_servers import TokenServer, token_server

pytestmark = pytest.mark.integration
CALLERS = ("alice", "bob", "carol", "dave", "erin")


@pytest.fixture(scope="module")
def tokens(oidc_server: OidcServer) -> dict[str, str]:
    """Each caller's own access token (audience: the gateway), as the app they signed in to has it."""
    return {who: oidc_server.user_token(who) for who in CALLERS}


@pytest.fixture(scope="module")
def crm(oidc_server: OidcServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TokenServer]:
    with token_server(oidc_server.issuer, CRM_AUDIENCE, tmp_path_factory.mktemp("crm")) as server:
        yield server


@pytest.fixture(scope="module")
def legacy(oidc_server: OidcServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TokenServer]:
    """A server that takes a static key per user (here: a long-lived token of its audience)."""
    with token_server(oidc_server.issuer, CRM_AUDIENCE, tmp_path_factory.mktemp("legacy")) as server:
        yield server


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A server without credentials: the gateway's static header only (it logs what it receives)."""
    log = tmp_path_factory.mktemp("plain") / "plain.jsonl"
    with upstream_http(log) as process:
        yield process.url, log


@pytest.fixture(scope="module")
def service_token(oidc_server: OidcServer) -> str:
    """The gateway's own token for crm (its listing and pings): a client of its own, not a caller."""
    return oidc_server.token("mission-control", resource=CRM, scope=None)


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    found = OtlpReceiver()
    yield found
    found.close()


@pytest.fixture(scope="module")
def per_subject(oidc_server: OidcServer) -> dict[str, str]:
    """The legacy server's key per caller: `"<issuer> <subject>"` -> a header value."""
    return {f"{oidc_server.issuer} {who}": "Bearer " + oidc_server.user_token(
        who, resource=CRM, scope="crm:read") for who in ("alice", "bob")}


@pytest.fixture(scope="module")
def gw(oidc_server: OidcServer, crm: TokenServer, legacy: TokenServer, plain: tuple[str, Path],
       service_token: str, receiver: OtlpReceiver, per_subject: dict[str, str],
       tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    directory = tmp_path_factory.mktemp("gateway")
    secrets_file(directory, per_subject)
    service = {"Authorization": "env:CRM_SERVICE"}
    servers = {
        "crm": {"url": crm.url, "headers": service, "credentials": exchange(oidc_server)},
        "nowhere": {"url": crm.url, "headers": service,  # a target the provider does not know
                    "credentials": exchange(oidc_server, "urn:mcp:nowhere")},
        "down": {"url": crm.url, "headers": service, "credentials": {  # a token endpoint not there
            **exchange(oidc_server), "token_endpoint": f"http://127.0.0.1:{free_port()}/token"}},
        "legacy": {"url": legacy.url, "headers": service, "credentials": {
            "kind": "per-subject", "secrets": "secrets.json"}},
        "plain": {"url": plain[0], "headers": {"Authorization": "env:PLAIN_TOKEN"}},
    }
    env = {"CRM_SERVICE": f"Bearer {service_token}", "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
           "OTEL_SERVICE_NAME": "credentials-test", "OTEL_BSP_SCHEDULE_DELAY": "50"}
    with gateway(directory, oidc_server, servers, env=env) as running:
        yield running


def denial(result: Any) -> dict[str, Any]:
    assert result.is_error, result
    payload: dict[str, Any] = result.structured_content
    return payload


@pytest.mark.interop
def test_two_callers_each_reach_the_server_as_themselves_on_sessions_of_their_own(
        gw: Gateway, crm: TokenServer, tokens: dict[str, str]) -> None:
    before = len(crm.calls())
    for who in ("alice", "bob", "alice"):
        result = asyncio.run(call(gw.url, tokens[who], "crm__whoami"))
        assert not result.is_error and text_of(result) == who
    calls = crm.calls()[before:]
    assert [(c["subject"], c["audience"], c["client_id"]) for c in calls] == [
        ("alice", CRM_AUDIENCE, "gateway"), ("bob", CRM_AUDIENCE, "gateway"),
        ("alice", CRM_AUDIENCE, "gateway")]
    sessions = [c["session"] for c in calls]
    assert sessions[0] == sessions[2] and sessions[0] != sessions[1] and None not in sessions
    assert all(c["subject"] != "mission-control" for c in crm.calls())  # the gateway's own: listing


@pytest.mark.interop
def test_one_exchange_per_caller_across_many_and_concurrent_calls(
        gw: Gateway, crm: TokenServer, tokens: dict[str, str], oidc_server: OidcServer) -> None:
    async def burst() -> list[Any]:
        return await asyncio.gather(*(call(gw.url, tokens["carol"], "crm__whoami") for _ in range(8)))

    # The provider is the worker's (session-scoped): other files' gateways may have exchanged for
    # carol there before, so this gateway's exchanges are counted from here.
    before = oidc_server.exchanges("carol", CRM)
    results = asyncio.run(burst())
    assert [text_of(r) for r in results] == ["carol"] * 8
    for _ in range(5):
        assert text_of(asyncio.run(call(gw.url, tokens["carol"], "crm__note", {"text": "x"}))) == "carol: x"
    assert oidc_server.exchanges("carol", CRM) == before + 1
    mine = [c["session"] for c in crm.calls() if c["subject"] == "carol"]
    assert len(mine) == 13 and len(set(mine)) == 1  # one session for carol, opened once
    cached = [r["credential"] for r in gw.records() if r["tool"].startswith("crm__")
              and r["subject"] == "carol"]
    assert cached.count({"kind": "token-exchange", "cached": False}) == 1
    assert cached.count({"kind": "token-exchange", "cached": True}) == 12


@pytest.mark.interop
def test_failed_exchanges_are_denied_and_never_forwarded(
        gw: Gateway, crm: TokenServer, tokens: dict[str, str]) -> None:
    before = len(crm.calls())
    refused = asyncio.run(call(gw.url, tokens["alice"], "nowhere__whoami"))
    assert denial(refused)["unmet"] == ["credential:nowhere"]
    failed = asyncio.run(call(gw.url, tokens["alice"], "down__whoami"))
    assert denial(failed)["unmet"] == ["credential:down"]
    assert len(crm.calls()) == before  # nothing reached the server
    records = {r["tool"]: r for r in gw.records()[-2:]}
    assert records["nowhere__whoami"]["errors"] == {}
    assert list(records["down__whoami"]["errors"]) == ["credential:down"]
    assert records["down__whoami"]["credential"] == {"kind": "token-exchange", "cached": False}
    anonymous = httpx2.post(gw.url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                          "params": {"name": "crm__whoami", "arguments": {}}},
                            headers={"Accept": "application/json, text/event-stream"}, timeout=10)
    assert anonymous.status_code == 401 and len(crm.calls()) == before


@pytest.mark.interop
def test_a_401_from_the_server_is_recovered_once_else_the_call_is_denied_for_its_credential(
        gw: Gateway, crm: TokenServer, tokens: dict[str, str], oidc_server: OidcServer) -> None:
    dave = tokens["dave"]
    assert text_of(asyncio.run(call(gw.url, dave, "crm__whoami"))) == "dave"
    crm.refuse_next("dave")  # the server refuses the token the gateway holds for dave
    assert text_of(asyncio.run(call(gw.url, dave, "crm__whoami"))) == "dave"
    assert oidc_server.exchanges("dave", CRM) == 2  # renewed once
    before = len(crm.calls())
    crm.refuse_next("dave")
    crm.refuse_next("dave")  # ...and the renewed one too
    refused = asyncio.run(call(gw.url, dave, "crm__whoami"))
    assert denial(refused) == {"error": "unmet_requirements", "tool": "crm__whoami",
                               "unmet": ["credential:crm"], "withheld": 0}
    assert len(crm.calls()) == before and oidc_server.exchanges("dave", CRM) == 3
    allowed, overruled = gw.records()[-2:]
    assert (allowed["allowed"], overruled["allowed"], overruled["unmet"]) == (True, False,
                                                                              ["credential:crm"])
    assert text_of(asyncio.run(call(gw.url, dave, "crm__whoami"))) == "dave"  # obtained afresh


@pytest.mark.interop
def test_per_subject_secrets_reach_the_server_as_each_caller(
        gw: Gateway, legacy: TokenServer, tokens: dict[str, str]) -> None:
    assert text_of(asyncio.run(call(gw.url, tokens["alice"], "legacy__whoami"))) == "alice"
    assert gw.records()[-1]["credential"] == {"kind": "per-subject", "cached": True}  # asked nobody
    before = len(legacy.calls())
    refused = asyncio.run(call(gw.url, tokens["erin"], "legacy__whoami"))  # no entry for erin
    assert denial(refused)["unmet"] == ["credential:legacy"] and len(legacy.calls()) == before


@pytest.mark.interop
def test_a_server_without_credentials_gets_only_its_static_headers(
        gw: Gateway, plain: tuple[str, Path], tokens: dict[str, str]) -> None:
    result = asyncio.run(call(gw.url, tokens["alice"], "plain__echo", {"text": "hi"}))
    assert not result.is_error
    sent = [e["headers"].get("authorization") for e in read_log(plain[1])]
    assert sent and set(sent) == {PLAIN_TOKEN}


@pytest.mark.interop
def test_listing_shows_the_credential_requirement_like_any_other(
        gw: Gateway, tokens: dict[str, str]) -> None:
    async def listed() -> dict[str, dict[str, Any]]:
        async with Client(streamable_http_client(gw.url, http_client=httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {tokens['bob']}"}, timeout=10))) as client:
            return {t["name"]: t for t in await raw_tools(client.session)}

    tools = asyncio.run(listed())
    assert tools["crm__whoami"]["execution"]["requirements"] == ["credential:crm"]
    assert tools["legacy__note"]["_meta"][META_KEY] == ["credential:legacy"]
    assert "execution" not in tools["plain__echo"]


@pytest.mark.interop
def test_no_token_or_secret_in_logs_records_metrics_or_spans(
        gw: Gateway, crm: TokenServer, legacy: TokenServer, plain: tuple[str, Path],
        tokens: dict[str, str], service_token: str, per_subject: dict[str, str],
        receiver: OtlpReceiver) -> None:
    # Every kind of attempt, made here (the test runs alone too): obtained and cached exchanges
    # of two callers, a refused and a failed exchange, a per-subject secret, static headers.
    for who in ("bob", "alice", "bob"):
        assert text_of(asyncio.run(call(gw.url, tokens[who], "crm__whoami"))) == who
    assert asyncio.run(call(gw.url, tokens["alice"], "nowhere__whoami")).is_error
    assert asyncio.run(call(gw.url, tokens["alice"], "down__whoami")).is_error
    assert text_of(asyncio.run(call(gw.url, tokens["alice"], "legacy__whoami"))) == "alice"
    assert not asyncio.run(call(gw.url, tokens["alice"], "plain__echo", {"text": "hi"})).is_error
    metrics = gw.metrics()
    assert 'mcp_preconditions_credentials_total{kind="token-exchange",result="obtained",server="crm"}' \
        in metrics
    assert 'result="cached",server="crm"' in metrics and 'result="refused",server="nowhere"' in metrics
    assert 'kind="token-exchange",result="error",server="down"}' in metrics
    exported = ""
    for _ in range(100):  # until the span is received (the exporter sends every 50 ms), 10 s net
        exported = repr([(s.name, s.attributes) for s in receiver.spans])
        if "crm__whoami" in exported:
            break
        asyncio.run(asyncio.sleep(0.1))  # a poll of the receiver, within the wait
    assert "crm__whoami" in exported
    records = gw.decisions.read_text(encoding="utf-8")
    secrets = {*tokens.values(), *crm.tokens_seen(), *legacy.tokens_seen(), service_token,
               *(v.removeprefix("Bearer ") for v in per_subject.values()), GATEWAY_SECRET,
               CONNECTOR_SECRET, TOKEN_KEY, PAGES_KEY}
    assert len(crm.tokens_seen()) >= 3  # alice's and bob's exchanged tokens, the service token
    for where, text in (("log", gw.output()), ("records", records), ("metrics", metrics),
                        ("spans", exported)):
        assert text, where
        leaked = [s[:12] for s in secrets if s in text]
        assert not leaked, f"{where} holds {leaked}"
    # The callers' own tokens reached no server: only the provider, as subject_token.
    seen = crm.tokens_seen() | legacy.tokens_seen() | {
        e["headers"].get("authorization", "").removeprefix("Bearer ") for e in read_log(plain[1])}
    assert not seen & set(tokens.values())


@pytest.mark.interop
def test_with_the_gateways_auth_off_no_caller_token_goes_anywhere(
        oidc_server: OidcServer, crm: TokenServer, plain: tuple[str, Path], service_token: str,
        tmp_path: Path) -> None:
    # A token the crm server itself would accept: passed through, it would be its caller's.
    accepted = oidc_server.user_token("frank", resource=CRM, scope="crm:read")
    servers = {"crm": {"url": crm.url, "headers": {"Authorization": "env:CRM_SERVICE"},
                       "credentials": exchange(oidc_server)},
               "plain": {"url": plain[0], "headers": {"Authorization": "env:PLAIN_TOKEN"}}}
    before = len(read_log(plain[1]))
    with gateway(tmp_path, oidc_server, servers, policy=policy_text(oidc_server, auth=False),
                 env={"CRM_SERVICE": f"Bearer {service_token}"}) as running:
        refused = asyncio.run(call(running.url, accepted, "crm__whoami"))
        assert denial(refused)["unmet"] == ["credential:crm"]
        assert not asyncio.run(call(running.url, accepted, "plain__echo", {"text": "hi"})).is_error
        assert "per-caller credentials but the policy's [auth] verifies no token" in running.output()
    assert accepted not in crm.tokens_seen() and oidc_server.exchanges("frank") == 0
    assert {e["headers"].get("authorization") for e in read_log(plain[1])[before:]} == {PLAIN_TOKEN}


@pytest.mark.parametrize(("table", "message"), [
    ('[servers.fs]\ncommand = "python3"\n[servers.fs.credentials]\nkind = "per-subject"\n'
     'secrets = "s.json"\n',
     "servers.fs.credentials: for a 'url' server only: a stdio server is one process the gateway "
     "starts, not reached by each caller as themselves"),
    ('[servers.crm]\nurl = "https://crm.test/mcp"\n[servers.crm.credentials]\nkind = "saml"\n',
     "servers.crm.credentials.kind: Input should be one of 'token-exchange', 'oauth', "
     "'per-subject', got 'saml'"),
    ('[servers.gh]\nurl = "https://gh.test/mcp"\n[servers.gh.credentials]\nkind = "oauth"\n'
     'issuer = "https://gh.test"\nclient_id = "gh"\nclient_secret = "env:GW_SECRET"\n'
     'encryption_key = "env:GW_TOKEN_KEY"\n',
     'servers.gh.credentials: kind = "oauth" requires [auth.sign_in] in the policy: a connect link '
     'is completed only by the person it was made for, signed in'),
])
def test_config_errors_exit_2_naming_the_key_path(tmp_path: Path, table: str, message: str,
                                                  capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`mcp-preconditions gateway --config` as main() runs it, in this process."""
    monkeypatch.setenv("GW_SECRET", "s")
    monkeypatch.setenv("GW_TOKEN_KEY", TOKEN_KEY)
    (tmp_path / "policy.toml").write_text("", encoding="utf-8")
    config = tmp_path / "gateway.toml"
    config.write_text(f'policy = "policy.toml"\n{table}', encoding="utf-8")
    assert main(["gateway", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith(message), lines
    assert "Traceback" not in err
