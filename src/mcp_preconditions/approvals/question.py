"""The question of a `self` approval (SPEC §15): what the caller is asked in flight, an
`elicitation/create` in form mode at 2025-11-25 or an input round at 2026-07-28, showing the tool
and every argument (whole, hidden characters escaped: shown.py); and the caller's answer, read
strictly (anything but a clean accept denies).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .shown import visible

# A 2026-07-28 input round of our own (a gateway's, a hosted server's): its `requestState` names
# the approval request, its one input request (`INPUT_KEY`) asks the question.
STATE_PREFIX = "mcp-preconditions-approval:"
INPUT_KEY = "approval"

Answer = Literal["accept", "decline", "cancel"]
ANSWERS: tuple[Answer, ...] = ("accept", "decline", "cancel")


@dataclass(frozen=True, slots=True)
class Question:
    """Ask the caller whether `tool` may run with `arguments` (canonical JSON), once; the answer is
    due within `timeout_seconds`. `request_id` names the request it answers (an input round's
    state carries it to the retry)."""

    request_id: str
    approval: str
    tool: str
    arguments: str
    timeout_seconds: float

    def message(self) -> str:
        """The question, with every argument (never shortened: what is not shown could hide what
        runs), each character a person could not see written as its escape."""
        shown = json.dumps(json.loads(self.arguments), indent=2, ensure_ascii=False, sort_keys=True)
        return (f"Approve one call of tool '{visible(self.tool)}' (approval '{self.approval}') with "
                f"these arguments?\n{visible(shown)}")

    def elicitation_params(self) -> dict[str, Any]:
        """The params of the `elicitation/create` request (form mode; accepting is the answer, so
        the form asks for nothing else)."""
        return {"mode": "form", "message": self.message(),
                "requestedSchema": {"type": "object", "properties": {}}}

    def input_round(self) -> dict[str, Any]:
        """The `input_required` result that asks it at 2026-07-28: the retry carrying the answer
        echoes the state (`answering`) and answers under `INPUT_KEY` (`input_answer`)."""
        return {"resultType": "input_required", "requestState": STATE_PREFIX + self.request_id,
                "inputRequests": {INPUT_KEY: {"method": "elicitation/create",
                                              "params": self.elicitation_params()}}}


def answering(state: object) -> str | None:
    """The approval request a 2026-07-28 retry's (plaintext) `requestState` names when the round
    was one of ours (`Question.input_round`), else None. It grants nothing: the answer counts only
    for the call that request is bound to (`ApprovalPlan.answer`)."""
    if isinstance(state, str) and state.startswith(STATE_PREFIX) and len(state) < 200:
        return state[len(STATE_PREFIX):]
    return None


def input_answer(responses: object) -> Answer | None:
    """The answer a 2026-07-28 retry's `inputResponses` carries for our round (None: none)."""
    response = responses.get(INPUT_KEY) if isinstance(responses, Mapping) else None
    dump = getattr(response, "model_dump", None)  # an SDK model, or the raw JSON
    return answer_of(dump(mode="json", exclude_none=True) if callable(dump) else response)


def answer_of(result: Any) -> Answer | None:
    """The caller's answer in an `elicitation/create` result (`{"action": ...}`): "accept",
    "decline" or "cancel"; None for anything else (garbage is no answer, and no answer denies)."""
    if not isinstance(result, Mapping):
        return None
    action = result.get("action")
    for answer in ANSWERS:
        if action == answer and action.__class__ is str:
            return answer
    return None


def asks_forms(capabilities: object) -> bool:
    """Whether a client's declared capabilities (its `initialize`'s, raw JSON) let it be asked a
    form: `elicitation` an object with `form`, or empty (2025-11-25: an empty `elicitation` is
    form mode, as before URL mode existed)."""
    elicitation = capabilities.get("elicitation") if isinstance(capabilities, Mapping) else None
    if not isinstance(elicitation, Mapping):
        return False
    return not elicitation or isinstance(elicitation.get("form"), Mapping)
