"""The question of a `self` approval (SPEC §15): what the caller is asked in flight, an
`elicitation/create` in form mode at 2025-11-25 or an input round at 2026-07-28, showing the tool
and its arguments; and the caller's answer, read strictly (anything but a clean accept denies).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

# The message shows at most this much of the arguments (the request binds all of them).
MESSAGE_CHARS = 4000

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
        shown = json.dumps(json.loads(self.arguments), indent=2, ensure_ascii=False, sort_keys=True)
        if len(shown) > MESSAGE_CHARS:
            shown = shown[:MESSAGE_CHARS] + "\n… (shortened: the approval covers every argument)"
        return (f"Approve one call of tool '{self.tool}' (approval '{self.approval}') with these "
                f"arguments?\n{shown}")

    def elicitation_params(self) -> dict[str, Any]:
        """The params of the `elicitation/create` request (form mode; accepting is the answer, so
        the form asks for nothing else)."""
        return {"mode": "form", "message": self.message(),
                "requestedSchema": {"type": "object", "properties": {}}}


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
