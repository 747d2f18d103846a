"""A reload that adds or removes `[auth]` takes effect on the HTTP listener at once (SPEC §5, §10):
the protected-resource metadata, the 401 challenge and the owner a session is bound to follow the
policy in force, not the one the gateway started with. A real gateway process watching its policy
file, real OIDC tokens.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from mcp_preconditions.drivers.bundle import DEFAULT_FILE_POLL_SECONDS
from tests.fixtures.flagd import eventually
from tests.fixtures.gateway_upstream import gateway_http, tool_calls
from tests.fixtures.oidc import AUDIENCE, OidcServer

pytestmark = pytest.mark.integration

ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
OPEN = 'environment = ["production"]\n[tools.echo]\nrequirements = ["env:production"]\n'
CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "hi"},
                   "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                             "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
                             "io.modelcontextprotocol/clientCapabilities": {}}}}
MODERN = {**ACCEPT, "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "echo"}


def _publish(path: Path, text: str) -> None:
    staged = path.with_suffix(".tmp")
    staged.write_text(text, encoding="utf-8")
    os.replace(staged, path)


def _status(http: httpx.Client, token: str | None = None) -> int:
    headers = dict(MODERN)
    if token:
        headers["authorization"] = f"Bearer {token}"
    return http.post("/mcp", headers=headers, json=CALL).status_code


def test_a_reload_that_adds_auth_challenges_and_one_that_removes_it_stops(
        tmp_path: Path, oidc_server: OidcServer) -> None:
    auth = (f'[auth]\nissuer = "{oidc_server.issuer}"\naudience = "{AUDIENCE}"\n'
            f'jwks_uri = "{oidc_server.jwks_uri}"\n')
    policy, log = tmp_path / "policy.toml", tmp_path / "upstream.jsonl"
    policy.write_text(OPEN, encoding="utf-8")
    with gateway_http(policy, log) as gw, httpx.Client(base_url=gw.url, timeout=30) as http:
        assert _status(http) == 200
        assert http.get("/.well-known/oauth-protected-resource").status_code == 404

        _publish(policy, OPEN + auth)
        wait = 15 * DEFAULT_FILE_POLL_SECONDS  # a liveness deadline: a loaded machine is slow
        assert eventually(lambda: _status(http), 401, wait) == 401
        challenged = http.post("/mcp", headers=MODERN, json=CALL)
        assert challenged.headers["www-authenticate"].startswith("Bearer resource_metadata=")
        metadata = http.get("/.well-known/oauth-protected-resource/mcp").json()
        assert metadata["authorization_servers"] == [oidc_server.issuer]
        assert _status(http, oidc_server.token()) == 200

        _publish(policy, OPEN)
        assert eventually(lambda: _status(http), 200, wait) == 200
        assert http.get("/.well-known/oauth-protected-resource").status_code == 404
    # Two unauthenticated calls before [auth], one verified call under it, one after it went.
    assert tool_calls(log).count("echo") >= 3
