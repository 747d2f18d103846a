"""`pdp:NAME` as an enforcement point (SPEC §16), against a decision point in this process
(tests/fixtures/fake_pdp.py): COAZ-MCP's request with the verified caller as subject, allow / deny /
every kind of `error`, `reason_admin` in the record and never in a reason, an anonymous caller never
asked, the order of the late stages, and tables sharing one batch.
"""

from __future__ import annotations

from typing import Any

import pytest

from mcp_preconditions import Credentials, Guard, LiveSources, Principal, Status, parse_policy
from mcp_preconditions.calls import decide
from mcp_preconditions.late import Sidecar
from mcp_preconditions.pdp.live import PdpLive
from tests.fixtures.fake_pdp import FakePdp

pytestmark = pytest.mark.anyio

POLICY = """
[pdp.corp]
url = "https://pdp.example.com"
subject_claims = ["roles"]
[pdp.audit]
url = "https://pdp.example.com"
subject_claims = ["roles"]
[pdp.other]
url = "https://other.example.com"
[quotas.q]
calls = 1
per_seconds = 3600
[tools.add]
requirements = ["auth:claim:team:ops", "pdp:corp"]
[tools.both]
requirements = ["pdp:corp", "pdp:audit", "pdp:other"]
[tools.metered]
requirements = ["quota:q", "pdp:corp"]
"""
OPERATOR = {"sub": "alice", "iss": "https://idp.example.com", "roles": ["operator"], "team": "ops"}
VIEWER = {"sub": "bob", "iss": "https://idp.example.com", "roles": ["viewer"], "team": "ops"}


def guard(pdp: FakePdp, policy: str = POLICY, **live: Any) -> Guard:
    wired = LiveSources(pdp=PdpLive(transport=pdp.transport(), **live))
    return Guard(parse_policy(policy.encode(), "p.toml"), {}, live=wired, entry_points=False)


def who(claims: dict[str, Any]) -> Credentials:
    return Credentials(principal=Principal.from_claims(claims))


async def test_the_request_is_coaz_mcp_with_the_verified_caller_as_subject() -> None:
    pdp = FakePdp()
    sidecar = Sidecar()
    decision = await guard(pdp).check("add", who(OPERATOR), {"a": 1, "sub": "mallory"},
                                      sidecar=sidecar)
    assert decision.allowed
    assert pdp.asked == [{"evaluations": [{
        "subject": {"type": "identity", "id": "alice",
                    "properties": {"iss": "https://idp.example.com", "roles": ["operator"]}},
        "action": {"name": "tools/call"},
        "resource": {"type": "tool", "id": "add",
                     "properties": {"arguments": {"a": 1, "sub": "mallory"}}},
        "context": {"requirement": "pdp:corp"}}]}]
    assert decision.notes == {"pdp": [{"name": "corp", "decision": True, "cached": False,
                                       "reason_admin": None}]}


async def test_every_adapter_records_the_pdp_notes_without_a_sidecar_of_its_own() -> None:
    """A hosted adapter with no session to ask through (calls.decide, client None) still carries a
    sidecar for a `pdp:` tool, so its decision record has the `pdp` field (SPEC §16)."""
    decided = decide(guard(FakePdp()), "add", who(OPERATOR), {"a": 1})
    if not isinstance(decided, tuple):
        decided = await decided
    assert decided.decision.allowed
    assert decided.decision.notes == {"pdp": [{"name": "corp", "decision": True, "cached": False,
                                               "reason_admin": None}]}


async def test_a_deny_is_unsatisfied_and_its_reason_admin_goes_to_the_record_only() -> None:
    pdp = FakePdp()
    decision = await guard(pdp).check("add", who(VIEWER), {}, sidecar=Sidecar())
    assert not decision.allowed
    (outcome,) = [o for o in decision.outcomes if o.requirement == "pdp:corp"]
    assert outcome.status is Status.UNSATISFIED
    assert outcome.reason == "denied by the decision point 'corp'"
    assert "operators only" not in repr(decision.outcomes)
    assert decision.notes == {"pdp": [{"name": "corp", "decision": False, "cached": False,
                                       "reason_admin": {"rule": "operators only"}}]}


@pytest.mark.parametrize(("mode", "logged"), [
    ("status", "the decision point https://pdp.example.com answered 500 to /access/v1/evaluations"),
    ("garbage", "the decision point https://pdp.example.com answered /access/v1/evaluations with "
                "a body that is not JSON"),
    ("not_boolean", "the decision point's answer is malformed: evaluations[0].decision: must be a "
                    "boolean, got a string"),
    ("short", "the decision point's answer is malformed: evaluations: must be an array of 1 "
              "decision(s), got 0"),
])
async def test_no_decision_is_an_error_that_denies(mode: str, logged: str,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    pdp = FakePdp(mode=mode)
    g = guard(pdp)
    decision = await g.check("add", who(OPERATOR), {}, sidecar=Sidecar())
    assert not decision.allowed
    (outcome,) = [o for o in decision.outcomes if o.requirement == "pdp:corp"]
    assert (outcome.status, outcome.reason) == (Status.ERROR,
                                                "the decision point 'corp' gave no decision")
    assert decision.notes == {"pdp": [{"name": "corp", "decision": "error", "cached": False,
                                       "reason_admin": None}]}
    assert f"pdp: {logged}" in caplog.text
    # An error is never cached: the next call asks again.
    pdp.mode = "ok"
    assert (await g.check("add", who(OPERATOR), {})).allowed
    assert len(pdp.asked) == 2


async def test_a_decision_point_that_hangs_is_an_error_after_its_timeout() -> None:
    pdp = FakePdp(mode="hang")
    policy = POLICY.replace('subject_claims = ["roles"]\n[pdp.audit]',
                            'subject_claims = ["roles"]\ntimeout_seconds = 0.05\n[pdp.audit]')
    decision = await guard(pdp, policy).check("add", who(OPERATOR), {})
    assert not decision.allowed
    assert decision.errors == ("pdp:corp",)
    pdp.release.set()


async def test_an_anonymous_caller_is_unsatisfied_without_a_request() -> None:
    pdp = FakePdp()
    g = guard(pdp, POLICY + '[tools.open]\nrequirements = ["pdp:corp"]\n')
    decision = await g.check("open", Credentials(), {})
    assert not decision.allowed
    assert decision.unmet == ("pdp:corp",)
    no_subject = await g.check("open", who({"iss": "x", "client_id": "c", "roles": ["operator"]}))
    assert not no_subject.allowed
    assert pdp.requests == []


async def test_a_call_refused_for_another_reason_never_reaches_the_pdp() -> None:
    pdp = FakePdp()
    decision = await guard(pdp).check("add", who({**OPERATOR, "team": "sales"}), {})
    assert decision.unmet == ("auth:claim:team:ops",)
    assert pdp.requests == []


async def test_pdp_is_decided_before_a_quota_unit_is_taken() -> None:
    pdp = FakePdp()
    g = guard(pdp)
    assert not (await g.check("metered", who(VIEWER), {})).allowed  # denied: no unit taken
    assert (await g.check("metered", who(OPERATOR), {})).allowed
    assert (await g.check("metered", who(VIEWER | {"sub": "alice", "roles": ["operator"]}),
                          {"x": 1})).unmet == ("quota:q",)


async def test_tables_with_one_url_and_token_share_one_batch() -> None:
    pdp = FakePdp()
    decision = await guard(pdp).check("both", who(OPERATOR), {})
    assert not decision.allowed  # `other` sends no roles: denied
    # corp and audit share an endpoint, but one tool is one resource: a batch each (Cerbos 0.51
    # answers items of one resource in a batch alike); `other` has its own endpoint.
    batches = [body["evaluations"] for body in pdp.asked]
    assert sorted(e["context"]["requirement"] for b in batches for e in b) == \
        ["pdp:audit", "pdp:corp", "pdp:other"]
    assert [len(b) for b in batches] == [1, 1, 1]
    assert [o.status for o in decision.outcomes] == [Status.SATISFIED, Status.SATISFIED,
                                                      Status.UNSATISFIED]


async def test_without_a_batch_endpoint_each_evaluation_is_asked_alone() -> None:
    pdp = FakePdp(batches=False)
    decision = await guard(pdp).check("both", who(OPERATOR), {})
    assert [o.status for o in decision.outcomes] == [Status.SATISFIED, Status.SATISFIED,
                                                      Status.UNSATISFIED]
    assert sorted(path for path, _ in pdp.requests if path.startswith("/access")) == \
        ["/access/v1/evaluation"] * 3


async def test_the_token_is_sent_to_the_pdp_and_nowhere_in_a_record(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PDP_TOKEN", "s3cret-pdp-token")
    pdp = FakePdp()
    policy = POLICY.replace('[pdp.audit]', 'token = "env:PDP_TOKEN"\n[pdp.audit]')
    decision = await guard(pdp, policy).check("add", who(VIEWER), {}, sidecar=Sidecar())
    assert {h.get("authorization") for h in pdp.headers if "authorization" in h} == \
        {"Bearer s3cret-pdp-token"}
    assert "s3cret" not in repr(decision) + repr(decision.notes)


async def test_the_metric_counts_each_decision_once() -> None:
    pdp = FakePdp()
    counted: list[tuple[str, str]] = []
    g = guard(pdp, results=lambda name, result: counted.append((name, result)))
    await g.check("add", who(OPERATOR), {})
    await g.check("add", who(OPERATOR), {})
    await g.check("add", who(VIEWER), {})
    pdp.mode = "status"
    await g.check("add", who(OPERATOR), {"new": True})
    assert counted == [("corp", "allow"), ("corp", "cached"), ("corp", "deny"), ("corp", "error")]


async def test_a_listing_asks_once_for_every_tool_and_hides_false_and_errors() -> None:
    pdp = FakePdp(decide=lambda item: {"decision": item["resource"]["id"] != "both"})
    policy = POLICY.replace("[quotas.q]", "[guard]\nlist_filtering = true\n[quotas.q]")
    g = guard(pdp, policy)
    shown = await g.callable_tools(who(OPERATOR), ["add", "both", "metered", "plain"])
    assert shown == ["add", "metered", "plain"]
    batches = [body["evaluations"] for body in pdp.asked]
    # One batch per endpoint for every tool; `both` asks corp and audit (one endpoint) about one
    # resource, so audit's item goes in a second batch: three in all.
    assert sorted(len(b) for b in batches) == [1, 1, 3]
    assert {e["action"]["name"] for b in batches for e in b} == {"tools/list"}
    assert all("arguments" not in e["resource"].get("properties", {}) for b in batches for e in b)
    assert await g.callable_tools(who(OPERATOR), ["add", "both"]) == ["add"]
    assert len(pdp.asked) == 3  # cached
    pdp.mode = "status"
    assert await g.callable_tools(who(VIEWER), ["add", "plain"]) == ["plain"]
    assert await g.callable_tools(Credentials(), ["add", "plain"]) == ["plain"]
    assert len(pdp.asked) == 4  # the viewer's failed batch; the anonymous caller asked nothing


class Later:
    """A late stage decided after `pdp:`, as `credential:` (100) and `approval:` (500) are: it
    records the calls that reached it."""

    namespace = "later"
    order = 100
    not_a_condition = "late"

    def __init__(self) -> None:
        self.reached: list[str] = []

    def validate(self, requirement: str) -> None:
        return None

    def resolve(self, requirement: str, context: object) -> Any:
        raise AssertionError("a late requirement is decided by its stage")

    def stage(self, requirements: Any) -> Any:
        outer = self

        class Stage:
            namespace = "later"
            timeout = None

            def __init__(self) -> None:
                self.requirements = tuple(requirements)

            def decide(self, call: Any) -> Any:
                from mcp_preconditions.outcomes import Outcome
                outer.reached.append(call.tool)
                return tuple(Outcome.satisfied(r, "fine") for r in self.requirements)

            def release(self, call: Any) -> None:
                return None
        return Stage()


async def test_pdp_is_decided_before_the_later_stages() -> None:
    pdp, later = FakePdp(), Later()
    policy = POLICY + '[tools.forwarded]\nrequirements = ["later:x", "pdp:corp"]\n'
    g = Guard(parse_policy(policy.encode(), "p.toml"), {}, entry_points=False, resolvers=[later],
              live=LiveSources(pdp=PdpLive(transport=pdp.transport())))
    assert not (await g.check("forwarded", who(VIEWER), {})).allowed
    assert later.reached == []  # refused by the PDP: the later stage never asked
    assert (await g.check("forwarded", who(OPERATOR), {})).allowed
    assert later.reached == ["forwarded"]


def _answering(handler: Any) -> PdpLive:
    import httpx2

    return PdpLive(transport=httpx2.MockTransport(handler))


@pytest.mark.parametrize(("answer", "logged"), [
    ("refused", "cannot reach the decision point https://pdp.example.com: connection failed"),
    ("huge", "the decision point https://pdp.example.com sent more than 1048576 bytes"),
    ("extra", "the decision point's answer is malformed: evaluations: must be an array of 1 "
              "decision(s), got 2"),
    ("null", "the decision point's answer is malformed: evaluations[0].decision: must be a "
             "boolean, got null"),
    ("redirect", "the decision point https://pdp.example.com answered 307 to "
                 "/access/v1/evaluations"),
])
async def test_every_other_answer_is_an_error(answer: str, logged: str,
                                              caplog: pytest.LogCaptureFixture) -> None:
    import httpx2

    def handler(request: httpx2.Request) -> httpx2.Response:
        if request.url.path.startswith("/.well-known"):
            return httpx2.Response(404)
        if answer == "refused":
            raise httpx2.ConnectError("refused", request=request)
        if answer == "huge":
            return httpx2.Response(200, content=b" " * (1 << 20) + b'{"evaluations": []}')
        if answer == "redirect":
            return httpx2.Response(307, headers={"location": "https://elsewhere.example/"})
        decided = {"extra": [{"decision": True}, {"decision": True}],
                   "null": [{"decision": None}]}[answer]
        return httpx2.Response(200, json={"evaluations": decided})

    g = Guard(parse_policy(POLICY.encode(), "p.toml"), {}, entry_points=False,
              live=LiveSources(pdp=_answering(handler)))
    decision = await g.check("add", who(OPERATOR), {})
    assert not decision.allowed and decision.errors == ("pdp:corp",)
    assert f"pdp: {logged}" in caplog.text


async def test_arguments_with_no_canonical_form_are_an_error_without_a_request() -> None:
    pdp = FakePdp()
    decision = await guard(pdp).check("add", who(OPERATOR), {"n": float("nan")})
    assert decision.errors == ("pdp:corp",)
    assert pdp.requests == []


async def test_a_listing_of_many_tools_goes_in_batches_of_at_most_1024() -> None:
    pdp = FakePdp()
    names = [f"t{i}" for i in range(1500)]
    policy = POLICY + "".join(f'[tools.{n}]\nrequirements = ["pdp:corp"]\n' for n in names)
    shown = await guard(pdp, policy).callable_tools(who(OPERATOR), names)
    assert shown == names
    assert sorted(len(body["evaluations"]) for body in pdp.asked) == [476, 1024]
