"""The SEP-2643 envelope on the client side (SPEC §6, §15): parsed strictly (each malformed shape
ignored with the warning a user sees), the most open remediation, context IDs echoed once on the
same call's retry, and `approval:` / `credential:` never learned from a denial.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from mcp_preconditions.client import Knowledge, filter_tools
from mcp_preconditions.client_denials import Denials, DeniedCall
from mcp_preconditions.envelope import (
    AUTHORIZATION_META_KEY,
    CONTEXT_ID_META_KEY,
    AuthorizationDenial,
    ContextIds,
    Remediation,
    RemediationHint,
    most_open,
)

KEY = AUTHORIZATION_META_KEY
GOOD = {"reason": "insufficient_authorization", "remediation": "available",
        "authorizationContextId": "ctx-1",
        "remediationHints": [
            {"type": "url", "url": "https://gw.example/approvals/abc"},
            {"type": "authorization_remediation", "authorization_details": [
                {"type": "urn:mcp-preconditions:scope", "scopes": ["files:write"]}]},
            {"type": "task", "taskId": "t-9"},
            {"type": "future_kind", "x": 1}]}


def test_a_good_envelope_is_a_typed_value() -> None:
    denial = AuthorizationDenial.from_meta({KEY: GOOD, "other": 1})
    assert denial is not None
    assert (denial.remediation, denial.context_id, denial.reason) == (
        Remediation.AVAILABLE, "ctx-1", "insufficient_authorization")
    assert denial.urls == ("https://gw.example/approvals/abc",)
    assert denial.authorization_details == ({"type": "urn:mcp-preconditions:scope",
                                             "scopes": ["files:write"]},)
    assert denial.hints[2] == RemediationHint("task", task_id="t-9")
    assert denial.hints[3].type == "future_kind" and denial.hints[3].raw == {"type": "future_kind", "x": 1}
    assert denial.to_meta() == {KEY: GOOD}  # written back as read


def test_no_envelope_is_none_without_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    assert AuthorizationDenial.from_meta(None) is None
    assert AuthorizationDenial.from_meta({"x": 1}) is None
    assert caplog.records == []


def bad(**changes: Any) -> dict[str, Any]:
    envelope = {**GOOD, **changes}
    return {k: v for k, v in envelope.items() if v is not ...}


@pytest.mark.parametrize(("envelope", "problem"), [
    ("yes", "the envelope must be an object, got str"),
    (bad(reason=...), "'reason' must be a non-empty string of at most 2048 characters, got NoneType"),
    (bad(reason=7), "'reason' must be a non-empty string of at most 2048 characters, got int"),
    (bad(remediation="maybe"),
     "'remediation' must be 'available', 'unavailable' or 'undisclosed', got 'maybe'"),
    (bad(remediation=["available"]),
     "'remediation' must be 'available', 'unavailable' or 'undisclosed', got ['available']"),
    (bad(authorizationContextId=""),
     "'authorizationContextId' must be a non-empty string of at most 256 characters, got str"),
    (bad(authorizationContextId="x" * 257),
     "'authorizationContextId' must be a non-empty string of at most 256 characters, got str"),
    (bad(remediationHints={"type": "url"}), "'remediationHints' must be a list of at most 16 hints"),
    (bad(remediationHints=[{"type": "task", "taskId": "t"}] * 17),
     "'remediationHints' must be a list of at most 16 hints"),
    (bad(remediation="unavailable"), "hints come only with remediation 'available', not 'unavailable'"),
    (bad(remediationHints=["url"]), "remediationHints[0] must be an object with a string 'type'"),
    (bad(remediationHints=[{"type": "url", "url": "javascript:alert(1)"}]),
     "remediationHints[0]: 'url' must be an http(s) URL, got scheme 'javascript'"),
    (bad(remediationHints=[{"type": "url"}]),
     "remediationHints[0]: 'url' must be a non-empty string of at most 2048 characters, got NoneType"),
    (bad(remediationHints=[{"type": "authorization_remediation", "authorization_details": [{}]}]),
     "remediationHints[0]: 'authorization_details' must be a list of RFC 9396 objects, each with a "
     "string 'type'"),
    (bad(remediationHints=[{"type": "task"}]),
     "remediationHints[0]: 'taskId' must be a non-empty string of at most 256 characters, got NoneType"),
])
def test_a_malformed_envelope_is_ignored_with_a_warning(
        envelope: Any, problem: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "mcp_preconditions.envelope"):
        assert AuthorizationDenial.from_meta({KEY: envelope}) is None
    assert [r.getMessage() for r in caplog.records] == [
        f"ignored a malformed authorization envelope (SEP-2643): {problem}"]


@pytest.mark.parametrize(("remedies", "expected"), [
    ([], Remediation.UNAVAILABLE), ([Remediation.UNAVAILABLE], Remediation.UNAVAILABLE),
    ([Remediation.UNAVAILABLE, Remediation.UNDISCLOSED], Remediation.UNDISCLOSED),
    ([Remediation.UNDISCLOSED, Remediation.AVAILABLE, Remediation.UNAVAILABLE], Remediation.AVAILABLE)])
def test_the_envelope_takes_the_most_open_remedy(remedies: list[Remediation], expected: Remediation) -> None:
    assert most_open(remedies) is expected


def test_a_context_id_is_echoed_once_on_the_same_call() -> None:
    ids = ContextIds()
    denial = AuthorizationDenial(Remediation.UNAVAILABLE, "ctx-7")
    ids.remember("deploy", {"b": 1, "a": [1.0]}, denial)
    assert ids.echo("deploy", {"a": [2]}) is None  # other arguments
    assert ids.echo("other", {"b": 1, "a": [1.0]}) is None  # another tool
    assert ids.echo("deploy", {"a": [1], "b": 1}, {"k": "v"}) == {CONTEXT_ID_META_KEY: "ctx-7", "k": "v"}
    assert ids.echo("deploy", {"a": [1], "b": 1}) is None  # once
    ids.remember("deploy", {}, denial)
    assert ids.echo("deploy", None, {CONTEXT_ID_META_KEY: "mine"}) == {CONTEXT_ID_META_KEY: "mine"}
    ids.remember("deploy", {}, denial)
    ids.remember("deploy", {}, None)  # the call went through meanwhile: nothing to echo
    assert ids.echo("deploy", {}) is None


def test_context_ids_expire_and_are_bounded() -> None:
    now = [0.0]
    ids = ContextIds(ttl=10, maxsize=2, clock=lambda: now[0])
    for i in range(3):
        ids.remember("t", {"i": i}, AuthorizationDenial(Remediation.UNAVAILABLE, f"c{i}"))
    assert ids.echo("t", {"i": 0}) is None  # evicted
    now[0] = 11
    assert ids.echo("t", {"i": 2}) is None  # expired


PAYLOAD = {"error": "unmet_requirements", "tool": "deploy", "withheld": 1,
           "unmet": ["approval:deploy", "credential:gh", "env:staging"]}


def test_approval_and_credential_are_never_learned() -> None:
    knowledge = Knowledge()
    assert knowledge.learn_denial(PAYLOAD) == ("env:staging",)
    assert knowledge.learned() == {"env:staging"}
    tools = [{"name": "deploy", "execution": {"requirements": ["approval:deploy", "credential:gh"]}}]
    assert filter_tools(tools, knowledge).hidden == ()  # unknown: the tool stays


def test_declared_approval_knowledge_is_the_applications() -> None:
    knowledge = Knowledge(unsatisfiable=["approval:deploy"])
    tools = [{"name": "deploy", "execution": {"requirements": ["approval:deploy"]}}]
    assert filter_tools(tools, knowledge).hidden == (("deploy", ("approval:deploy",)),)


def test_denials_learn_remember_and_tell_the_application() -> None:
    heard: list[DeniedCall] = []
    denials = Denials(Knowledge(), heard.append)
    meta = {KEY: GOOD}
    denied = denials.result("deploy", {"env": "prod"}, PAYLOAD, meta)
    assert denied is not None and heard == [denied]
    assert (denied.tool, denied.arguments, denied.unmet, denied.withheld, denied.context_id) == (
        "deploy", {"env": "prod"}, ("approval:deploy", "credential:gh", "env:staging"), 1, "ctx-1")
    assert denials.request_meta("deploy", {"env": "prod"}) == {CONTEXT_ID_META_KEY: "ctx-1"}
    assert denials.knowledge.learned() == {"env:staging"}
    assert denials.result("deploy", {}, None, None) is None and len(heard) == 1


def test_a_jsonrpc_denial_is_heard_with_its_envelope() -> None:
    heard: list[DeniedCall] = []
    denials = Denials(Knowledge(), heard.append)
    denials.error("deploy", None, {**PAYLOAD, "_meta": {KEY: GOOD}})
    assert [d.context_id for d in heard] == ["ctx-1"]
    assert denials.request_meta("deploy", {}) is None  # arguments unknown: nothing kept to echo


def test_a_failing_callback_never_breaks_a_call(caplog: pytest.LogCaptureFixture) -> None:
    def broken(denied: DeniedCall) -> None:
        raise RuntimeError("app bug")

    assert Denials(Knowledge(), broken).result("deploy", {}, PAYLOAD, None) is not None
    assert "on_denial callback failed for tool 'deploy'" in caplog.text
