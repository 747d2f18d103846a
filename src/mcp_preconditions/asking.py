"""Asking the caller in flight (SPEC §15): what a late stage's question must offer (`Question`, the
`self` approval's is approvals/lifecycle.py), how it goes on the wire (an `elicitation/create` in form
mode at 2025-11-25, an input round of ours at 2026-07-28), and the caller's answer, read strictly:
anything but a clean accept is no.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol

# A 2026-07-28 input round of our own (a gateway's, a hosted server's): its `requestState` names the
# question (the prefix is the one the first questions, approvals', went out with: a retry in flight
# across an upgrade still reads), its one input request (`INPUT_KEY`) asks it.
STATE_PREFIX = "mcp-preconditions-approval:"
INPUT_KEY = "approval"

Answer = Literal["accept", "decline", "cancel"]
ANSWERS: tuple[Answer, ...] = ("accept", "decline", "cancel")


class Question(Protocol):
    """A question for the caller of one call: `request_id` names it (a round's state carries it to
    the retry), its answer is due within `timeout_seconds`."""

    @property
    def request_id(self) -> str: ...

    @property
    def timeout_seconds(self) -> float: ...

    def elicitation_params(self) -> dict[str, Any]:
        """The params of the `elicitation/create` (form mode) that asks it."""
        ...

    def input_round(self) -> dict[str, Any]:
        """The 2026-07-28 `input_required` result that asks it (`input_round` below)."""
        ...


def input_round(request_id: str, elicitation: Mapping[str, Any]) -> dict[str, Any]:
    """The `input_required` result asking a question at 2026-07-28: the retry carrying the answer
    echoes the state (`answering`) and answers under `INPUT_KEY` (`input_answer`)."""
    return {"resultType": "input_required", "requestState": STATE_PREFIX + request_id,
            "inputRequests": {INPUT_KEY: {"method": "elicitation/create", "params": dict(elicitation)}}}


def answering(state: object) -> str | None:
    """The question a 2026-07-28 retry's (plaintext) `requestState` names when the round was one of
    ours (`input_round`), else None. It grants nothing: an answer counts only for the call its
    question is bound to."""
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
