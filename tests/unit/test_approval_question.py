"""The `self` question (SPEC §15): what the caller is shown (the tool and every argument, whole,
hidden characters escaped), a valid form-mode `elicitation/create`, and the answer read strictly:
anything but an exact accept, decline or cancel is no answer (denied).
"""

from __future__ import annotations

from typing import Any

import mcp_types
import pytest

from mcp_preconditions.approvals import Question, answer_of, canonical_json
from mcp_preconditions.late import (
    INPUT_KEY,
    STATE_PREFIX,
    answering,
    input_answer,
)


def test_the_question_is_a_valid_form_elicitation() -> None:
    question = Question("rid", "deploy", "deploy_service", canonical_json({"env": "prod", "n": 2}), 120)
    params = mcp_types.ElicitRequestFormParams.model_validate(question.elicitation_params())
    assert params.mode == "form" and params.message == (
        "Approve one call of tool 'deploy_service' (approval 'deploy') with these arguments?\n"
        '{\n  "env": "prod",\n  "n": 2\n}')


def test_every_argument_is_shown_whole_and_hidden_characters_escaped() -> None:
    """The message used to stop at 4,000 characters: a padded value hid what followed (the same
    attack as on the approval page, issue 39.15), and a bidirectional override was sent raw."""
    arguments = canonical_json({"blob": "x" * 8000 + " z_scope: ALL-CUSTOMERS",
                                "to": "ACME \u202eHbmG\u202c", "z_scope": "ALL-CUSTOMERS"})
    message = Question("rid", "d", "t\u200b", arguments, 1).message()
    assert "x" * 8000 + " z_scope: ALL-CUSTOMERS" in message and message.endswith(
        '"z_scope": "ALL-CUSTOMERS"\n}')
    assert '"to": "ACME \\u202eHbmG\\u202c"' in message and "\u202e" not in message
    assert message.startswith("Approve one call of tool 't\\u200b' (approval 'd')")


@pytest.mark.parametrize(("result", "answer"), [
    ({"action": "accept"}, "accept"), ({"action": "accept", "content": {}}, "accept"),
    ({"action": "decline"}, "decline"), ({"action": "cancel"}, "cancel"),
    ({"action": "ACCEPT"}, None), ({"action": "accept "}, None), ({"action": ["accept"]}, None),
    ({"action": None}, None), ({}, None), ("accept", None), (None, None), (["accept"], None)])
def test_the_answer_is_read_strictly(result: Any, answer: str | None) -> None:
    assert answer_of(result) == answer


def test_the_input_round_is_the_sdks_input_required_result() -> None:
    question = Question("rid-1", "deploy", "deploy_service", canonical_json({"env": "prod"}), 120)
    found = mcp_types.InputRequiredResult.model_validate(question.input_round())
    assert found.request_state == STATE_PREFIX + "rid-1" and found.input_requests is not None
    request = found.input_requests[INPUT_KEY]
    assert isinstance(request, mcp_types.ElicitRequest)
    assert isinstance(request.params, mcp_types.ElicitRequestFormParams)
    assert request.params.message == question.message()


@pytest.mark.parametrize(("state", "expected"), [
    (STATE_PREFIX + "rid-1", "rid-1"), ("rid-1", None), ("v1.sealed-by-someone", None), (None, None),
    (42, None), ([STATE_PREFIX + "x"], None), (STATE_PREFIX + "x" * 200, None)])
def test_only_our_own_rounds_state_names_a_request(state: object, expected: str | None) -> None:
    assert answering(state) == expected


@pytest.mark.parametrize(("responses", "expected"), [
    ({INPUT_KEY: {"action": "accept", "content": {}}}, "accept"),
    ({INPUT_KEY: mcp_types.ElicitResult(action="decline")}, "decline"),
    ({INPUT_KEY: {"action": "ACCEPT"}}, None), ({"other": {"action": "accept"}}, None),
    ({INPUT_KEY: "accept"}, None), (None, None), ([{"action": "accept"}], None)])
def test_the_rounds_answer_is_read_strictly(responses: object, expected: str | None) -> None:
    assert input_answer(responses) == expected
