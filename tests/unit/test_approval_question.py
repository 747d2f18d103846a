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
from mcp_preconditions.approvals.question import MESSAGE_CHARS


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
