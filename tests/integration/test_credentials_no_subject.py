"""A token without `sub` names no subject (SPEC §14, issue 39.8), through a real gateway process and
the real oidc-provider: a client registered as `alice` holds an opaque client-credentials token,
whose introspection answer carries its `client_id` and no `sub`. Before, the gateway named that
caller `alice` and sent the person alice's per-subject secret to the server for it; now the call is
denied for `credential:legacy` and nothing reaches the server, while alice herself still gets her
own. Its decision record says the subject is unknown.

In-process: the gateway wired from its command line (`--config`) and served over the bridge, its
`[auth]` verifying JWTs signed in this process (the key inline) and introspecting opaque tokens at a
small HTTP server of this process; the legacy server an SDK server on a socket of this loop that
knows each caller by its static key. Interop, marked, with why: the same through a real gateway
process, the real provider (its client-credentials token's introspection answer, its code flow's
JWTs) and a real server verifying the provider's tokens.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer

from tests.fixtures.credential_gateway import call, gateway, policy_text, secrets_file, text_of
from tests.fixtures.fleet import write_gateway_toml
from tests.fixtures.hosted import ISSUER
from tests.fixtures.inprocess import asgi_served, cli_gateway, until
from tests.fixtures.oidc import AUDIENCE, CRM, CRM_AUDIENCE, OPAQUE, OidcServer
from tests.fixtures.token_servers import token_server

pytestmark = pytest.mark.integration
CLIENT_TOKEN = "opaque-client-credentials-token-of-alice"  # client `alice`'s: no `sub`
SERVICE = "the-gateways-own-key"  # the gateway's static key at the legacy server (listing)
ALICES_KEY = "alices-own-key-at-legacy"


@contextmanager
def introspection() -> Iterator[str]:
    """An introspection endpoint on 127.0.0.1: the client `alice`'s token is active, with its
    `client_id` and no `sub` (a client-credentials token); any other is not."""
    class Endpoint(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            document: dict[str, Any] = {"active": False}
            if f"token={CLIENT_TOKEN}".encode() in body:
                document = {"active": True, "client_id": "alice", "aud": AUDIENCE,
                            "iss": ISSUER.issuer, "scope": "mission:read", "token_type": "Bearer",
                            "exp": int(time.time()) + 600}
            out = json.dumps(document).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/introspect"
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Legacy:
    """A server that knows each caller by a static key of theirs: who called, every key shown."""

    calls: list[str | None] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)

    def app(self) -> Any:
        keys = {SERVICE: "gateway", ALICES_KEY: "alice"}
        seen = self.seen

        class StaticKeys:
            async def verify_token(self, token: str) -> AccessToken | None:
                seen.append(token)
                who = keys.get(token)
                return None if who is None else AccessToken(
                    token=token, client_id=who, scopes=[], subject=who)

        server = MCPServer("legacy", token_verifier=StaticKeys(), auth=AuthSettings(
            issuer_url="https://legacy.test", resource_server_url="http://127.0.0.1/mcp",
            validate_token_resource=False))

        @server.tool(structured_output=False)
        def whoami() -> str:
            token = get_access_token()
            self.calls.append(token.subject if token is not None else None)
            return self.calls[-1] or ""

        return server.streamable_http_app(host="127.0.0.1")


@asynccontextmanager
async def in_process_gateway(directory: Path, legacy_url: str, endpoint: str) -> AsyncIterator[Any]:
    """`gateway --config` in this process: the legacy server with per-subject keys, `[auth]`
    verifying ISSUER's JWTs and introspecting opaque tokens at `endpoint`."""
    secrets_file(directory, {f"{ISSUER.issuer} alice": f"Bearer {ALICES_KEY}"})
    (directory / "policy.toml").write_text(
        f"[auth]\n{ISSUER.auth_lines()}[auth.introspection]\nendpoint = \"{endpoint}\"\n"
        'client_id_env = "INTROSPECTION_ID"\nclient_secret_env = "INTROSPECTION_SECRET"\n',
        encoding="utf-8")
    config = write_gateway_toml(directory / "gateway.toml", "policy.toml", {
        "legacy": {"url": f"{legacy_url}/mcp", "headers": {"Authorization": "env:LEGACY_SERVICE"}}})
    with config.open("a", encoding="utf-8") as out:
        out.write('\n[servers.legacy.credentials]\nkind = "per-subject"\nsecrets = "secrets.json"\n')
    async with cli_gateway(["--config", str(config), "--listen", "http://127.0.0.1:0",
                            "--decision-log", str(directory / "decisions.jsonl")]) as gw:
        await gw.until_ready()
        yield gw


async def test_a_client_registered_as_alice_is_never_sent_alices_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (("INTROSPECTION_ID", "introspector"),
                        ("INTROSPECTION_SECRET", "introspector-secret"),
                        ("LEGACY_SERVICE", f"Bearer {SERVICE}")):
        monkeypatch.setenv(name, value)
    legacy, decisions = Legacy(), tmp_path / "decisions.jsonl"

    def records() -> list[dict[str, Any]]:
        lines = decisions.read_text(encoding="utf-8").splitlines() if decisions.exists() else []
        return [json.loads(line) for line in lines]

    with introspection() as endpoint:
        async with asgi_served(legacy.app()) as url, \
                in_process_gateway(tmp_path, url, endpoint) as gw:
            async with gw.client(headers={"Authorization": f"Bearer {CLIENT_TOKEN}"}) as client:
                refused = await client.call_tool("legacy__whoami", {})
            assert refused.is_error and refused.structured_content["unmet"] == ["credential:legacy"]
            await until(lambda: any(r["tool"] == "legacy__whoami" for r in records()), "a record")
            record = records()[-1]
            assert (record["tool"], record["subject"], record["unmet"]) == (
                "legacy__whoami", None, ["credential:legacy"])  # the subject is unknown, and said so
            assert legacy.calls == [] and ALICES_KEY not in legacy.seen  # sent nowhere

            person = ISSUER.token("alice")  # the person alice: her own key, as before
            async with gw.client(headers={"Authorization": f"Bearer {person}"}) as client:
                mine = await client.call_tool("legacy__whoami", {})
            assert not mine.is_error and text_of(mine) == "alice" and legacy.calls == ["alice"]


@pytest.mark.interop
def test_a_client_registered_as_alice_is_never_sent_alices_secret(oidc_server: OidcServer,
                                                                  tmp_path: Path) -> None:
    alices_secret = oidc_server.user_token("alice", resource=CRM, scope="crm:read")
    client_token = oidc_server.token("alice", resource=OPAQUE, scope="mission:read")
    assert client_token.count(".") == 0  # opaque: its introspection answer names no `sub`
    directory = tmp_path / "gateway"
    directory.mkdir()
    (tmp_path / "legacy").mkdir()
    secrets_file(directory, {f"{oidc_server.issuer} alice": f"Bearer {alices_secret}"})
    introspection = (f'[auth.introspection]\nendpoint = "{oidc_server.introspection_endpoint}"\n'
                     'client_id_env = "INTROSPECTION_ID"\nclient_secret_env = "INTROSPECTION_SECRET"\n')
    with token_server(oidc_server.issuer, CRM_AUDIENCE, tmp_path / "legacy") as legacy, gateway(
            directory, oidc_server,
            {"legacy": {"url": legacy.url, "headers": {"Authorization": "env:LEGACY_SERVICE"},
                        "credentials": {"kind": "per-subject", "secrets": "secrets.json"}}},
            policy=policy_text(oidc_server, extra=introspection),
            env={"INTROSPECTION_ID": "introspector", "INTROSPECTION_SECRET": "introspector-secret",
                 "LEGACY_SERVICE": "Bearer " + oidc_server.token("mission-control", resource=CRM,
                                                                 scope=None)}) as gw:
        refused = asyncio.run(call(gw.url, client_token, "legacy__whoami"))
        assert refused.is_error and refused.structured_content["unmet"] == ["credential:legacy"]
        record = gw.records()[-1]
        assert (record["tool"], record["subject"], record["unmet"]) == (
            "legacy__whoami", None, ["credential:legacy"])  # the subject is unknown, and said so
        assert legacy.calls() == [] and alices_secret not in legacy.tokens_seen()  # sent nowhere

        person = oidc_server.user_token("alice")  # the person alice: her own secret, as before
        assert text_of(asyncio.run(call(gw.url, person, "legacy__whoami"))) == "alice"
