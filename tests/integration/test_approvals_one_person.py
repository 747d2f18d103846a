"""One person is one caller, whatever form their token takes (SPEC §14, issue 39.2): alice calls
with an opaque token whose introspection answer carries no `iss` (as some authorization servers
answer), and her approval request is bound to (issuer, alice); with her JWT of the same issuer she
is the same caller, so she cannot approve her own call (403), while another approver can (200).

In-process, the issuer signs its JWTs in this process (its key inline in `[auth]`) and its
introspection endpoint is a small HTTP server of this process answering for alice's opaque token.
Interop, marked, with why: the same through the real oidc-provider (its code flow's JWTs, its
introspection's answer with `iss` removed on the way), the shape of a real provider's answer.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
from tests.fixtures.hosted import ISSUER
from tests.fixtures.oidc import AUDIENCE, OPAQUE, ROOT, OidcServer

pytestmark = pytest.mark.integration
OPAQUE_ALICE = "opaque-token-of-alice"


@pytest.fixture(autouse=True)
def introspection_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_INTROSPECTION_ID", "introspector")
    monkeypatch.setenv("TEST_INTROSPECTION_SECRET", "introspector-secret")


@contextmanager
def introspection(answer: Callable[[bytes, dict[str, str]], tuple[int, dict[str, Any]]]
                  ) -> Iterator[str]:
    """An introspection endpoint on 127.0.0.1 whose answer is `answer(body, headers)`."""
    class Endpoint(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            status, document = answer(body, {k: v for k, v in self.headers.items()
                                             if k.lower() in ("authorization", "content-type")})
            out = json.dumps(document).encode()
            self.send_response(status)
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


def local_answer(body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """What an authorization server answers for alice's opaque token, without `iss`."""
    if f"token={OPAQUE_ALICE}".encode() not in body:
        return 200, {"active": False}
    return 200, {"active": True, "sub": "alice", "client_id": "mission-app", "aud": AUDIENCE,
                 "scope": "mission:read mission:write", "token_type": "Bearer",
                 "exp": 4_000_000_000, "iat": 1_700_000_000}


def policy(issuer: str, endpoint: str, **keys: Any) -> PolicySource:
    data: dict[str, Any] = {
        "auth": {"issuer": issuer, "audience": AUDIENCE, **keys,
                 "introspection": {"endpoint": endpoint, "client_id_env": "TEST_INTROSPECTION_ID",
                                   "client_secret_env": "TEST_INTROSPECTION_SECRET"}},
        "approvals": {"payout": {"approvers": ["auth:oauth2"]}},
        "tools": {"pay": {"requirements": ["auth:oauth2", "approval:payout"]}}}
    return PolicySource(Policy.model_validate(data), "test-policy.toml", "test", ROOT)


def one_caller(source: PolicySource, issuer: str, opaque: str, jwt_of: Callable[[str], str]) -> None:
    store = MemoryApprovalStore()
    guard = Guard(source, {}, live=LiveSources(approvals=store), entry_points=False)
    assert opaque.count(".") == 0  # opaque: introspected
    denied = asyncio.run(guard.check("pay", Credentials(token=opaque), {"amount": 100},
                                     sidecar=Sidecar()))
    assert denied.unmet == ("approval:payout",)
    [request] = asyncio.run(store.waiting())
    assert request.binding.caller == Party(issuer, "alice")

    pages = ApprovalPages(approving_of(guard), guard, "http://testserver")
    client = TestClient(pages.app())

    def post(token: str) -> Any:
        return client.post(f"/approvals/{request.id}", json={"decision": "approve"},
                           headers={"Authorization": f"Bearer {token}"})

    own = post(jwt_of("alice"))  # her JWT: the same caller
    assert own.status_code == 403, own.text
    assert own.json()["message"] == "You cannot decide this request: nobody approves their own call."
    taken = post(jwt_of("bob"))
    assert taken.status_code == 200 and taken.json() == {"id": request.id, "state": "approved"}


def test_an_opaque_token_without_iss_and_a_jwt_are_one_caller() -> None:
    with introspection(local_answer) as endpoint:
        source = policy(ISSUER.issuer, endpoint, keys=[ISSUER.key.public_jwk()],
                        algorithms=["RS256"])
        one_caller(source, ISSUER.issuer, OPAQUE_ALICE, lambda subject: ISSUER.token(subject))


@pytest.mark.interop
def test_the_real_providers_opaque_token_without_iss_and_its_jwt_are_one_caller(
        oidc_server: OidcServer) -> None:
    def stripped(body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        answer = httpx.post(oidc_server.introspection_endpoint, content=body, headers=headers,
                            timeout=10)
        document: dict[str, Any] = answer.json()
        document.pop("iss", None)
        return answer.status_code, document

    with introspection(stripped) as endpoint:
        source = policy(oidc_server.issuer, endpoint, jwks_uri=oidc_server.jwks_uri)
        one_caller(source, oidc_server.issuer, oidc_server.user_token("alice", resource=OPAQUE),
                   oidc_server.user_token)
