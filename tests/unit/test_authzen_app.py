"""The decision point's HTTP app in-process (authzen/app.py, ASGI called directly): a request read as
a call exactly as SPEC §16 says, decided by the guard, confidential requirements never named, the
three semantics, every malformed request's status and one line, the enforcement point's bearer
token, DNS rebinding, and one record per decision."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import httpx
import pytest

from mcp_preconditions import Guard
from mcp_preconditions.authzen import DecisionPoint
from mcp_preconditions.authzen.app import MAX_BODY, AuthzenApp
from mcp_preconditions.outcomes import Decision
from mcp_preconditions.policy.load import parse_policy
from mcp_preconditions.rebinding import Security
from tests.fixtures.oidc import AUDIENCE, SigningKey, access_claims

BASE = "http://127.0.0.1:8080"
POLICY = """
confidential = ["state:vault.open"]
[state.values]
"vault.open" = false
[tools.read]
requirements = ["auth:claim:role:reader"]
[tools.open_vault]
requirements = ["auth:claim:role:keeper", "state:vault.open"]
[tools.free]
requirements = []
[tools.launch]
requirements = ["capability:launch"]
[tools.mine]
requirements = ["auth:claim:sub:ada"]
[tools.doc]
requirements = ["capability:doc"]
[[capabilities.grants]]
capabilities = ["launch"]
when = ["auth:claim:role:pilot"]
arguments = { "/vehicle" = ["falcon9"] }
[[capabilities.grants]]
capabilities = ["doc"]
when = ["auth:claim:role:reader"]
arguments = { "/resource_id" = ["doc-1"], "/resource_type" = ["document"] }
[pdp_server.actions]
can_read = "read"
can_read_doc = "doc"
[pdp_server.subjects.ada]
role = "keeper"
"""
KEY = SigningKey("EC", "pep")
AUTH = (f'[auth]\nissuer = "https://idp.test"\naudience = "{AUDIENCE}"\nalgorithms = ["ES256"]\n'
        f"public_keys_pem = '''{KEY.public_pem()}'''\n")


class Records:
    def __init__(self) -> None:
        self.decisions: list[Decision] = []

    def record(self, decision: Decision) -> None:
        self.decisions.append(decision)


def client(policy: str = POLICY, security: Security | None = None,
           records: Records | None = None) -> httpx.AsyncClient:
    guard = Guard(parse_policy(policy.encode(), "p.toml"), entry_points=False, recorder=records)
    app = AuthzenApp(DecisionPoint(guard), BASE, security)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE)


def ask(subject: str = "bob", action: str = "can_read", resource: dict[str, Any] | None = None,
        **properties: Any) -> dict[str, Any]:
    who: dict[str, Any] = {"type": "user", "id": subject}
    if properties:
        who["properties"] = properties
    return {"subject": who, "action": {"name": action},
            "resource": resource or {"type": "document", "id": "doc-1"}}


def tool(name: str, arguments: Any = None) -> dict[str, Any]:
    return {"type": "tool", "id": name, **({"properties": {"arguments": arguments}}
                                           if arguments is not None else {})}


async def decide(request: dict[str, Any], policy: str = POLICY) -> Any:
    async with client(policy) as http:
        answer = await http.post("/access/v1/evaluation", json=request)
    assert answer.status_code == 200, answer.text
    return answer.json()


# -- a request read as a call -----------------------------------------------------------------------
async def test_an_allowed_call_is_decision_true_and_nothing_else() -> None:
    assert await decide(ask(role="reader")) == {"decision": True}


async def test_a_denial_names_its_unmet_requirements_for_the_administrator() -> None:
    assert await decide(ask(role="writer")) == {
        "decision": False, "context": {"reason_admin": {"unmet": ["auth:claim:role:reader"]}}}


async def test_a_confidential_requirement_is_never_named() -> None:
    async with client() as http:
        answer = await http.post("/access/v1/evaluation", json=ask("ada", "open_vault"))
    assert answer.json() == {"decision": False, "context": {"reason_admin": {"unmet": []}}}
    assert b"vault" not in answer.content


async def test_a_tool_resource_is_the_tool_and_its_arguments() -> None:
    launch = ask("bob", "tools/call", tool("launch", {"vehicle": "falcon9"}), role="pilot")
    assert await decide(launch) == {"decision": True}
    other = ask("bob", "tools/call", tool("launch", {"vehicle": "starship"}), role="pilot")
    assert (await decide(other))["decision"] is False
    assert (await decide(ask("bob", "tools/call", tool("launch"), role="pilot")))["decision"] is False


async def test_a_tool_resource_whose_arguments_are_no_object_is_malformed() -> None:
    async with client() as http:
        answer = await http.post("/access/v1/evaluation",
                                 json=ask("bob", "x", tool("launch", ["falcon9"])))
    assert (answer.status_code, answer.text) == (
        400, "resource.properties.arguments: must be an object")


async def test_an_action_is_mapped_to_its_tool_or_is_the_tool_itself() -> None:
    assert (await decide(ask(role="reader")))["decision"] is True  # can_read -> read
    assert await decide(ask(action="free")) == {"decision": True}  # `requirements = []`


async def test_a_tool_the_policy_does_not_name_is_denied() -> None:
    assert await decide(ask(action="can_launch_the_nukes", role="reader")) == {
        "decision": False,
        "context": {"reason_admin": {"unmet": [], "unlisted_tool": "can_launch_the_nukes"}}}


async def test_the_resource_id_and_type_are_arguments_no_property_can_replace() -> None:
    assert (await decide(ask(action="can_read_doc", role="reader")))["decision"] is True
    moved = ask(action="can_read_doc", resource={"type": "document", "id": "doc-2", "properties": {
        "resource_id": "doc-1"}}, role="reader")
    assert (await decide(moved))["decision"] is False


async def test_the_directory_wins_over_properties_and_the_id_is_the_sub() -> None:
    assert (await decide(ask("ada", "open_vault", role="reader")))["context"]["reason_admin"][
        "unmet"] == []  # role keeper (the directory), not reader: only the vault is shut
    assert (await decide(ask("ada", "mine", sub="eve")))["decision"] is True
    assert (await decide(ask("eve", "mine", sub="ada")))["decision"] is False


# -- batches ----------------------------------------------------------------------------------------
BATCH = {"subject": {"type": "user", "id": "bob", "properties": {"role": "reader"}},
         "evaluations": [{"action": {"name": "can_read"}}, {"action": {"name": "open_vault"}},
                         {"action": {"name": "free"}}],
         "resource": {"type": "document", "id": "doc-1"}}


@pytest.mark.parametrize(("semantic", "decisions"), [
    (None, [True, False, True]), ("execute_all", [True, False, True]),
    ("deny_on_first_deny", [True, False]), ("permit_on_first_permit", [True])])
async def test_the_three_semantics(semantic: str | None, decisions: list[bool]) -> None:
    body = {**BATCH, **({"options": {"evaluations_semantic": semantic}} if semantic else {})}
    async with client() as http:
        answer = (await http.post("/access/v1/evaluations", json=body)).json()
    assert [d["decision"] for d in answer["evaluations"]] == decisions


async def test_a_malformed_item_is_false_and_the_others_are_answered() -> None:
    body = {**BATCH, "evaluations": [{"action": {"name": "can_read"}}, {"action": "can_read"},
                                     {"action": {"name": "x"}, "resource": tool("launch", 7)}]}
    async with client() as http:
        answer = (await http.post("/access/v1/evaluations", json=body)).json()
    assert answer == {"evaluations": [
        {"decision": True},
        {"decision": False, "context": {"error": {
            "status": 400, "message": "evaluations[1].action: must be an object, got a string"}}},
        {"decision": False, "context": {"error": {
            "status": 400, "message": "resource.properties.arguments: must be an object"}}}]}


async def test_a_batch_without_items_is_one_evaluation() -> None:
    async with client() as http:
        answer = await http.post("/access/v1/evaluations", json={**ask(role="reader"),
                                                                 "evaluations": []})
    assert answer.json() == {"decision": True}


async def test_each_decision_is_recorded_once_for_its_subject() -> None:
    records = Records()
    async with client(records=records) as http:
        await http.post("/access/v1/evaluations", json=BATCH)
        await http.post("/access/v1/evaluation", json=ask("ada", "nothing"))
    assert [(d.tool, d.subject, d.allowed) for d in records.decisions] == [
        ("read", "bob", True), ("open_vault", "bob", False), ("free", "bob", True),
        ("nothing", "ada", False)]


# -- HTTP -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("method", "path", "body", "headers", "status", "said"), [
    ("POST", "/access/v1/evaluation", b"{", {"content-type": "application/json"}, 400,
     "(request): not JSON: "),
    ("POST", "/access/v1/evaluation", b"[]", {"content-type": "application/json"}, 400,
     "(request): must be an object, got an array"),
    ("POST", "/access/v1/evaluation", b"{}", {"content-type": "text/plain"}, 400,
     "content-type: must be application/json"),
    ("POST", "/access/v1/evaluation", b"{}", {}, 400, "content-type: must be application/json"),
    ("POST", "/access/v1/evaluations", b'{"evaluations": 1}', {"content-type": "application/json"},
     400, "evaluations: must be an array, got a number"),
    ("POST", "/access/v1/evaluation", b'{"n": 1e400}', {"content-type": "application/json"}, 400,
     "(request): not JSON: number is infinity"),
    ("GET", "/access/v1/evaluation", b"", {}, 405, "Method Not Allowed"),
    ("POST", "/.well-known/authzen-configuration", b"", {}, 405, "Method Not Allowed"),
    ("GET", "/access/v1/search/subject", b"", {}, 404, "Not Found"),
])
async def test_a_bad_request_is_one_line(method: str, path: str, body: bytes,
                                         headers: dict[str, str], status: int, said: str) -> None:
    async with client() as http:
        answer = await http.request(method, path, content=body, headers=headers)
    assert answer.status_code == status
    assert answer.text.startswith(said) and "\n" not in answer.text


async def test_a_body_over_the_bound_is_413() -> None:
    async with client() as http:
        answer = await http.post("/access/v1/evaluation", content=b" " * (MAX_BODY + 1),
                                 headers={"content-type": "application/json"})
    assert (answer.status_code, answer.text) == (413, f"the request body is over {MAX_BODY} bytes")


async def test_the_metadata_and_the_request_id() -> None:
    async with client() as http:
        metadata = await http.get("/.well-known/authzen-configuration")
        echoed = await http.post("/access/v1/evaluation", content=b"{",
                                 headers={"content-type": "application/json", "x-request-id": "r-1"})
    assert metadata.json() == {"policy_decision_point": BASE,
                               "access_evaluation_endpoint": f"{BASE}/access/v1/evaluation",
                               "access_evaluations_endpoint": f"{BASE}/access/v1/evaluations"}
    assert echoed.headers["x-request-id"] == "r-1"


async def test_the_policy_names_the_identifier() -> None:
    async with client(POLICY + '[pdp_server]\nurl = "https://pdp.example.com/"\n') as http:
        metadata = (await http.get("/.well-known/authzen-configuration")).json()
    assert metadata["policy_decision_point"] == "https://pdp.example.com"
    assert metadata["access_evaluation_endpoint"] == "https://pdp.example.com/access/v1/evaluation"


async def test_a_loopback_listener_refuses_another_host() -> None:
    async with client(security=Security.for_host("127.0.0.1")) as http:
        refused = await http.post("/access/v1/evaluation", json=ask(),
                                  headers={"host": "evil.example"})
        origin = await http.post("/access/v1/evaluation", json=ask(),
                                 headers={"origin": "http://evil.example"})
        fine = await http.post("/access/v1/evaluation", json=ask(role="reader"))
    assert (refused.status_code, origin.status_code, fine.status_code) == (421, 403, 200)


# -- the calling enforcement point's token ----------------------------------------------------------
def pep_token(**overrides: Any) -> str:
    now = int(time.time())
    return KEY.sign(access_claims("https://idp.test", sub="pep", role="nothing", iat=now,
                                  exp=now + 600, **overrides))


async def test_with_auth_an_enforcement_point_needs_a_token_it_accepts() -> None:
    async with client(POLICY + AUTH) as http:
        none = await http.post("/access/v1/evaluation", json=ask(role="reader"))
        bad = await http.post("/access/v1/evaluation", json=ask(role="reader"),
                              headers={"authorization": "Bearer not.a.token"})
        other = await http.post("/access/v1/evaluation", json=ask(role="reader"),
                                headers={"authorization": f"Bearer {pep_token(aud='elsewhere')}"})
        good = await http.post("/access/v1/evaluation", json=ask(role="reader"),
                               headers={"authorization": f"Bearer {pep_token()}"})
        metadata = await http.get("/.well-known/authzen-configuration")
    assert (none.status_code, none.headers["www-authenticate"]) == (401, "Bearer")
    assert (bad.status_code, bad.headers["www-authenticate"]) == (401, 'Bearer error="invalid_token"')
    assert other.status_code == 401
    assert none.text == "this decision point needs a valid bearer token"
    # the subject is the request's (bob, a reader), never the token's (pep, role "nothing")
    assert (good.status_code, good.json()) == (200, {"decision": True})
    assert metadata.status_code == 200


async def test_without_auth_no_token_is_asked() -> None:
    assert json.dumps(await decide(ask(role="reader"))) == '{"decision": true}'


async def test_a_reload_reads_requests_by_the_new_policy_at_once() -> None:
    guard = Guard(parse_policy(POLICY.encode(), "p.toml"), entry_points=False)
    app = AuthzenApp(DecisionPoint(guard), BASE)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as http:
        before = (await http.post("/access/v1/evaluation", json=ask(role="reader"))).json()
        guard.reload(parse_policy(POLICY.replace('can_read = "read"', 'can_read = "open_vault"')
                                  .encode(), "p.toml"))
        after = (await http.post("/access/v1/evaluation", json=ask(role="reader"))).json()
    assert before == {"decision": True}
    assert after["decision"] is False  # can_read now asks about open_vault


async def test_a_subject_is_read_afresh_whenever_its_properties_change() -> None:
    """The reading keeps the principal of a subject sent with the same properties (so the guard's
    memo knows it): new properties are a new caller, never the one kept."""
    async with client() as http:
        answers = [(await http.post("/access/v1/evaluation", json=ask(role=role))).json()["decision"]
                   for role in ("reader", "writer", "reader", "writer")]
    assert answers == [True, False, True, False]


async def test_a_request_read_by_one_revision_and_decided_by_another_is_never_answered_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Reloads between reading a request and deciding it (three in a row, here forced): no mixed
    answer and no record, a false decision saying why."""
    records = Records()
    guard = Guard(parse_policy(POLICY.encode(), "p.toml"), entry_points=False, recorder=records)
    point = DecisionPoint(guard)
    decide_once = point._decide

    async def reloaded_meanwhile(snapshot: Any, call: Any) -> Decision:
        return dataclasses.replace(await decide_once(snapshot, call), revision="another")

    monkeypatch.setattr(point, "_decide", reloaded_meanwhile)
    app = AuthzenApp(point, BASE)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as http:
        answer = (await http.post("/access/v1/evaluation", json=ask(role="reader"))).json()
    assert answer == {"decision": False,
                      "context": {"error": {"status": 503, "message": "the policy is reloading"}}}
    assert records.decisions == []
