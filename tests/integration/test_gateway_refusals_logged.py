"""A real gateway process tells its operator why it refused a token (SPEC §15, issue 40.6): the
caller gets the transport's bare 401, and the gateway's stderr says, at WARNING, what was wrong
with the token (here: issued by the real oidc-provider for another audience), never the token.
`--log-level ERROR` silences those lines and leaves the decision records. Before, the reason was
logged at DEBUG, below what the gateway prints: the operator saw nothing.

Interop: what is judged is a real gateway process's stderr, with `--log-level` as the operator
gives it, and the real oidc-provider's token; the in-process logging capture would not show what
the process prints.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fixtures.credential_gateway import Gateway, call, gateway
from tests.fixtures.gateway_upstream import upstream_http
from tests.fixtures.oidc import CRM, OidcServer

pytestmark = [pytest.mark.integration, pytest.mark.interop]  # (tests/fixtures/tiers.py)
LINE = ("mcp_preconditions.auth: bearer token refused: audience 'urn:mcp:crm' is not "
        "'urn:mcp:mission-server'")


@pytest.fixture
def plain(tmp_path: Path) -> Iterator[str]:
    with upstream_http(tmp_path / "plain.jsonl") as process:
        yield process.url


def refused(gw: Gateway, token: str) -> None:
    answer = httpx.post(gw.url, headers={"Authorization": f"Bearer {token}",
                                         "Accept": "application/json, text/event-stream"},
                        json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, timeout=10)
    assert answer.status_code == 401 and "audience" not in answer.text  # the caller learns nothing


def test_the_operator_sees_why_a_token_was_refused_and_log_level_sets_it(
        oidc_server: OidcServer, plain: str, tmp_path: Path) -> None:
    elsewhere = oidc_server.token("mission-control", resource=CRM, scope=None)  # another audience
    servers = {"plain": {"url": plain, "headers": {"Authorization": "env:PLAIN_TOKEN"}}}
    with gateway(tmp_path / "default", oidc_server, servers) as gw:
        refused(gw, elsewhere)
        assert gw.output().splitlines().count(LINE) == 1
        assert elsewhere not in gw.output()

    with gateway(tmp_path / "quiet", oidc_server, servers, args=("--log-level", "error")) as gw:
        refused(gw, elsewhere)
        result = asyncio.run(call(gw.url, oidc_server.user_token("alice"), "plain__echo", {"text": "hi"}))
        assert not result.is_error
        output = gw.output()
        assert "bearer token refused" not in output
        assert '"tool": "plain__echo", "subject": "alice", "allowed": true' in output  # records stay
