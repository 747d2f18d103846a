"""The `self` question (SPEC §15): what the caller is shown (tool and arguments, shortened past a
bound while the approval still covers every argument), a valid form-mode `elicitation/create`, and
the answer read strictly: anything but an exact accept, decline or cancel is no answer (denied).
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types
import pytest

from mcp_preconditions.approvals import Question, answer_of, canonical_json
from mcp_preconditions.approvals.question import (
    INPUT_KEY,
    MESSAGE_CHARS,
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


def test_large_arguments_are_shortened_in_the_message_only() -> None:
    arguments = canonical_json({"blob": "x" * (2 * MESSAGE_CHARS)})
    message = Question("rid", "d", "t", arguments, 1).message()
    assert message.endswith("\n… (shortened: the approval covers every argument)")
    assert len(message) < MESSAGE_CHARS + 200
    assert json.loads(arguments)["blob"] == "x" * (2 * MESSAGE_CHARS)


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
