"""The AuthZEN 1.0 wire types (pdp/wire.py): every malformed request's one line, the batch's
defaults and semantics, unknown keys ignored, and the enforcement point's side (a request written,
a decision read strictly: no boolean `decision` is Malformed)."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_preconditions.errors import Malformed
from mcp_preconditions.pdp.wire import (
    MAX_EVALUATIONS,
    AccessDecision,
    Action,
    Entity,
    Evaluation,
    Metadata,
    Semantic,
    batch_json,
    decision_of,
    decisions_of,
    evaluation_of,
    evaluations_of,
    metadata_of,
)

ALICE = {"type": "user", "id": "alice@example.com"}
READ = {"name": "can_read"}
DOC = {"type": "document", "id": "1"}


@pytest.mark.parametrize(("body", "problem"), [
    ([], "(request): must be an object, got an array"),
    ({"action": READ, "resource": DOC}, "subject: required"),
    ({"subject": ALICE, "resource": DOC}, "action: required"),
    ({"subject": ALICE, "action": READ}, "resource: required"),
    ({"subject": "alice", "action": READ, "resource": DOC}, "subject: must be an object, got a string"),
    ({"subject": {"id": "a"}, "action": READ, "resource": DOC},
     "subject.type: must be a non-empty string, got null"),
    ({"subject": {"type": "user", "id": ""}, "action": READ, "resource": DOC},
     "subject.id: must be a non-empty string, got an empty string"),
    ({"subject": {**ALICE, "properties": [1]}, "action": READ, "resource": DOC},
     "subject.properties: must be an object, got an array"),
    ({"subject": ALICE, "action": {"name": 7}, "resource": DOC},
     "action.name: must be a non-empty string, got a number"),
    ({"subject": ALICE, "action": READ, "resource": {"type": "document", "id": 1}},
     "resource.id: must be a non-empty string, got a number"),
    ({"subject": ALICE, "action": READ, "resource": DOC, "context": "now"},
     "context: must be an object, got a string"),
])
def test_a_malformed_request_is_one_line_naming_the_key(body: Any, problem: str) -> None:
    with pytest.raises(Malformed) as err:
        evaluation_of(body)
    assert str(err.value) == problem


def test_unknown_keys_are_ignored_and_null_is_absent() -> None:
    read = evaluation_of({"subject": {**ALICE, "extra": 1, "properties": None}, "action": READ,
                          "resource": DOC, "context": None, "future": {"x": 1}})
    assert read == Evaluation(Entity("user", "alice@example.com"), Action("can_read"),
                              Entity("document", "1"))


def test_each_item_inherits_the_top_level_defaults_and_overrides_them() -> None:
    """AuthZEN 1.0 §"Default values": the third item overrides the action (the spec's example)."""
    batch = evaluations_of({
        "subject": ALICE, "context": {"time": "2024-05-31T15:22-07:00"}, "action": READ,
        "evaluations": [{"resource": {"type": "document", "id": "boxcarring.md"}},
                        {"resource": {"type": "document", "id": "subject-search.md"}},
                        {"action": {"name": "can_edit"},
                         "resource": {"type": "document", "id": "resource-search.md"}}]})
    assert [(i.subject.id, i.action.name, i.resource.id, dict(i.context or {})) for i in batch.items
            if isinstance(i, Evaluation)] == [
        ("alice@example.com", "can_read", "boxcarring.md", {"time": "2024-05-31T15:22-07:00"}),
        ("alice@example.com", "can_read", "subject-search.md", {"time": "2024-05-31T15:22-07:00"}),
        ("alice@example.com", "can_edit", "resource-search.md", {"time": "2024-05-31T15:22-07:00"})]
    assert batch.semantic is Semantic.EXECUTE_ALL and batch.single is None


def test_a_malformed_item_is_that_item_alone() -> None:
    batch = evaluations_of({"subject": ALICE, "action": READ, "evaluations": [
        {"resource": DOC}, 5, {"resource": {"type": "document"}}, {}]})
    assert [str(i) if isinstance(i, Malformed) else "ok" for i in batch.items] == [
        "ok", "evaluations[1]: must be an object, got a number",
        "evaluations[2].resource.id: must be a non-empty string, got null",
        "evaluations[3].resource: required"]


@pytest.mark.parametrize(("body", "problem"), [
    ({"evaluations": {}}, "evaluations: must be an array, got an object"),
    ({"evaluations": [], "options": []}, "options: must be an object, got an array"),
    ({"evaluations": [], "options": {"evaluations_semantic": "all"}},
     "options.evaluations_semantic: must be one of execute_all, deny_on_first_deny, "
     "permit_on_first_permit, got 'all'"),
    ({"evaluations": [], "options": {"evaluations_semantic": ["execute_all"]}},
     "options.evaluations_semantic: must be one of execute_all, deny_on_first_deny, "
     "permit_on_first_permit, got an array"),
    ({"subject": {"type": "user"}, "evaluations": [{"subject": ALICE}]},
     "subject.id: must be a non-empty string, got null"),
    ({"action": {}, "evaluations": []}, "action.name: must be a non-empty string, got null"),
    ({"evaluations": [{}] * (MAX_EVALUATIONS + 1)},
     f"evaluations: at most {MAX_EVALUATIONS} items, got {MAX_EVALUATIONS + 1}"),
])
def test_a_malformed_envelope_is_a_malformed_request(body: Any, problem: str) -> None:
    with pytest.raises(Malformed) as err:
        evaluations_of(body)
    assert str(err.value) == problem


def test_no_items_is_the_single_request() -> None:
    batch = evaluations_of({"subject": ALICE, "action": READ, "resource": DOC, "evaluations": []})
    assert batch.items == () and batch.single == evaluation_of(
        {"subject": ALICE, "action": READ, "resource": DOC})
    assert isinstance(evaluations_of({"subject": ALICE}).single, Malformed)


@pytest.mark.parametrize(("semantic", "stops"), [
    (Semantic.EXECUTE_ALL, (False, False)), (Semantic.DENY_ON_FIRST_DENY, (False, True)),
    (Semantic.PERMIT_ON_FIRST_PERMIT, (True, False))])
def test_where_each_semantic_stops(semantic: Semantic, stops: tuple[bool, bool]) -> None:
    assert (semantic.stops_after(True), semantic.stops_after(False)) == stops


def test_an_enforcement_point_writes_a_batch_with_its_defaults_once() -> None:
    subject = Entity("identity", "ada", {"iss": "https://idp.example"})
    context = {"requirement": "pdp:corp"}
    items = [Evaluation(subject, Action("tools/call"), Entity("tool", name), context)
             for name in ("echo", "add")]
    written = batch_json(items, Semantic.DENY_ON_FIRST_DENY, items[0])
    assert written == {"subject": subject.to_json(), "action": {"name": "tools/call"},
                       "resource": {"type": "tool", "id": "echo"}, "context": context,
                       "options": {"evaluations_semantic": "deny_on_first_deny"},
                       "evaluations": [{}, {"resource": {"type": "tool", "id": "add"}}]}
    read = evaluations_of(written)  # and reads back exactly
    assert read.items == tuple(items) and read.semantic is Semantic.DENY_ON_FIRST_DENY


@pytest.mark.parametrize(("answer", "problem"), [
    ({}, "(answer).decision: must be a boolean, got null"),
    ({"decision": "true"}, "(answer).decision: must be a boolean, got a string"),
    ({"decision": 1}, "(answer).decision: must be a boolean, got a number"),
    ({"decision": True, "context": []}, "(answer).context: must be an object, got an array"),
    ([True], "(answer): must be an object, got an array"),
])
def test_a_decision_without_a_boolean_is_malformed(answer: Any, problem: str) -> None:
    with pytest.raises(Malformed) as err:
        decision_of(answer)
    assert str(err.value) == problem


def test_decisions_are_read_in_order_one_per_item_asked() -> None:
    assert decisions_of({"evaluations": [{"decision": True}, {"decision": False, "context": {
        "reason_admin": {"unmet": ["x"]}}}]}, 2) == (
        AccessDecision(True), AccessDecision(False, {"reason_admin": {"unmet": ["x"]}}))


@pytest.mark.parametrize(("body", "semantic", "problem"), [
    ({"evaluations": [{"decision": True}] * 3}, Semantic.EXECUTE_ALL,
     "evaluations: must be an array of 2 decision(s), got 3"),
    ({"evaluations": [{"decision": True}]}, Semantic.EXECUTE_ALL,
     "evaluations: must be an array of 2 decision(s), got 1"),
    ({"evaluations": []}, Semantic.DENY_ON_FIRST_DENY,
     "evaluations: must be an array of 1 to 2 decision(s), got 0"),
    ({"decision": True}, Semantic.EXECUTE_ALL, "evaluations: must be an array of 2 decision(s), got null"),
    ({"evaluations": [{"decision": False}, {"decision": True}]}, Semantic.DENY_ON_FIRST_DENY,
     "evaluations: answered past the first stop of deny_on_first_deny"),
])
def test_an_answer_with_another_count_is_malformed(body: Any, semantic: Semantic,
                                                   problem: str) -> None:
    with pytest.raises(Malformed) as err:
        decisions_of(body, 2, semantic)
    assert str(err.value) == problem


def test_a_short_circuited_answer_is_read_up_to_its_stop() -> None:
    assert decisions_of({"evaluations": [{"decision": True}]}, 3,
                        Semantic.PERMIT_ON_FIRST_PERMIT) == (AccessDecision(True),)


def test_metadata_reads_back_and_says_whether_batches_are_served() -> None:
    served = Metadata.at("https://pdp.example.com")
    assert metadata_of(served.to_json()) == served
    alone = metadata_of({"policy_decision_point": "https://p", "access_evaluation_endpoint": "https://p/e"})
    assert alone.access_evaluations_endpoint is None
    with pytest.raises(Malformed, match="access_evaluation_endpoint: must be a non-empty string"):
        metadata_of({"policy_decision_point": "https://p"})
