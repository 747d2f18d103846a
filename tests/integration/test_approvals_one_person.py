"""One person is one caller, whatever form their token takes (SPEC §14, issue 39.2): alice calls
with an opaque token whose introspection answer carries no `iss` (the real oidc-provider's answer,
its `iss` removed on the way, as some authorization servers answer), and her approval request is
bound to (issuer, alice); with her JWT of the same provider she is the same caller, so she cannot
approve her own call (403), while another approver can (200).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from mcp_preconditions import Credentials, Guard
from mcp_preconditions.approvals import MemoryApprovalStore, Party
from mcp_preconditions.late import Sidecar
from mcp_preconditions.namespaces import LiveSources
from mcp_preconditions.pages.approvals import ApprovalPages, approving_of
from mcp_preconditions.policy.load import PolicySource
from mcp_preconditions.policy.model import Policy
from tests.fixtures.oidc import AUDIENCE, OPAQUE, ROOT, OidcServer

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def introspection_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_INTROSPECTION_ID", "introspector")
    monkeypatch.setenv("TEST_INTROSPECTION_SECRET", "introspector-secret")


@pytest.fixture
def without_iss(oidc_server: OidcServer) -> Iterator[str]:
    """An introspection endpoint that asks the real provider's and answers without `iss`."""
    class Strip(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            answer = httpx.post(oidc_server.introspection_endpoint, content=body, timeout=10,
                                headers={k: v for k, v in self.headers.items()
                                         if k.lower() in ("authorization", "content-type")})
            document = answer.json()
            document.pop("iss", None)
            out = json.dumps(document).encode()
            self.send_response(answer.status_code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Strip)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/introspect"
    finally:
        server.shutdown()
        server.server_close()


def policy(oidc_server: OidcServer, endpoint: str) -> PolicySource:
    data: dict[str, Any] = {
        "auth": {"issuer": oidc_server.issuer, "audience": AUDIENCE, "jwks_uri": oidc_server.jwks_uri,
                 "introspection": {"endpoint": endpoint, "client_id_env": "TEST_INTROSPECTION_ID",
                                   "client_secret_env": "TEST_INTROSPECTION_SECRET"}},
        "approvals": {"payout": {"approvers": ["auth:oauth2"]}},
        "tools": {"pay": {"requirements": ["auth:oauth2", "approval:payout"]}}}
    return PolicySource(Policy.model_validate(data), "test-policy.toml", "test", ROOT)


def test_an_opaque_token_without_iss_and_a_jwt_are_one_caller(
        oidc_server: OidcServer, without_iss: str) -> None:
    store = MemoryApprovalStore()
    guard = Guard(policy(oidc_server, without_iss), {}, live=LiveSources(approvals=store),
                  entry_points=False)
    opaque = oidc_server.user_token("alice", resource=OPAQUE)
    assert opaque.count(".") == 0  # opaque: introspected
    denied = asyncio.run(guard.check("pay", Credentials(token=opaque), {"amount": 100},
                                     sidecar=Sidecar()))
    assert denied.unmet == ("approval:payout",)
    [request] = asyncio.run(store.waiting())
    assert request.binding.caller == Party(oidc_server.issuer, "alice")

    pages = ApprovalPages(approving_of(guard), guard, "http://testserver")
    client = TestClient(pages.app())

    def post(token: str) -> Any:
        return client.post(f"/approvals/{request.id}", json={"decision": "approve"},
                           headers={"Authorization": f"Bearer {token}"})

    own = post(oidc_server.user_token("alice"))  # her JWT (the real provider's): the same caller
    assert own.status_code == 403, own.text
    assert own.json()["message"] == "You cannot decide this request: nobody approves their own call."
    taken = post(oidc_server.user_token("bob"))
    assert taken.status_code == 200 and taken.json() == {"id": request.id, "state": "approved"}
