"""A reload that adds or removes `[auth]` takes effect on the HTTP listener at once (SPEC §5, §10):
the protected-resource metadata, the 401 challenge and the owner a session is bound to follow the
policy in force, not the one the gateway started with.

In-process (tests/fixtures/inprocess.py): the gateway wired from its command line in the test's event
loop, watching its policy file, its upstream in memory; each reload awaited on the reloader's log
line. The tokens are signed by a test key whose public JWK the policy names inline: the verification
is the gateway's own, and a JWKS fetched from a real identity provider is the interop tier's
(tests/integration/test_auth_oidc.py).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.fixtures.gateway_upstream import tool_calls
from tests.fixtures.inprocess import InProcess, logging_gateway
from tests.fixtures.oidc import AUDIENCE, SigningKey, access_claims

pytestmark = pytest.mark.asyncio(loop_scope="module")

ISSUER = "https://issuer.test"
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
OPEN = 'environment = ["production"]\n[tools.echo]\nrequirements = ["env:production"]\n'
CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "hi"},
                   "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                             "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
                             "io.modelcontextprotocol/clientCapabilities": {}}}}
MODERN = {**ACCEPT, "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "echo"}


@pytest.fixture(autouse=True)
def _no_environment_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)


def _publish(path: Path, text: str) -> None:
    staged = path.with_suffix(".tmp")
    staged.write_text(text, encoding="utf-8")
    os.replace(staged, path)


def _auth(key: SigningKey) -> str:
    jwk = ", ".join(f"{k} = {json.dumps(v)}" for k, v in key.public_jwk().items())
    return (f'[auth]\nissuer = "{ISSUER}"\naudience = "{AUDIENCE}"\nkeys = [{{ {jwk} }}]\n'
            f'algorithms = ["{key.alg}"]\n')


async def _status(gw: InProcess, token: str | None = None) -> int:
    headers = dict(MODERN)
    if token:
        headers["authorization"] = f"Bearer {token}"
    async with gw.http() as http:
        return (await http.post("/mcp", headers=headers, json=CALL)).status_code


async def _reloaded(gw: InProcess, path: Path, text: str) -> None:
    """Publish `text` and wait until the gateway's poller has swapped it in."""
    seen = len(gw.log.lines)
    _publish(path, text)
    await gw.log.wait_for(r"policy .* reloaded: revision", after=seen)


async def test_a_reload_that_adds_auth_challenges_and_one_that_removes_it_stops(
        tmp_path: Path) -> None:
    key = SigningKey("EC", "reload-test")
    token = key.sign(access_claims(ISSUER, exp=int(time.time()) + 600))
    policy, log = tmp_path / "policy.toml", tmp_path / "upstream.jsonl"
    policy.write_text(OPEN, encoding="utf-8")
    async with logging_gateway(policy, log, "--listen", "http://127.0.0.1:0",
                               "--policy-poll-seconds", "0.1") as gw:
        before = await _status(gw)
        async with gw.http() as http:
            no_metadata = (await http.get("/.well-known/oauth-protected-resource")).status_code

        await _reloaded(gw, policy, OPEN + _auth(key))
        anonymous = await _status(gw)
        async with gw.http() as http:
            challenged = await http.post("/mcp", headers=MODERN, json=CALL)
            metadata = (await http.get("/.well-known/oauth-protected-resource/mcp")).json()
        verified = await _status(gw, token)

        await _reloaded(gw, policy, OPEN)
        after = await _status(gw)
        async with gw.http() as http:
            gone = (await http.get("/.well-known/oauth-protected-resource")).status_code
    assert (before, no_metadata) == (200, 404)
    assert anonymous == 401
    assert challenged.headers["www-authenticate"].startswith("Bearer resource_metadata=")
    assert metadata["authorization_servers"] == [ISSUER]
    assert verified == 200
    assert (after, gone) == (200, 404)
    # One unauthenticated call before [auth], one verified call under it, one after it went.
    assert tool_calls(log) == ["echo", "echo", "echo"]
