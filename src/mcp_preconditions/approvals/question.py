"""The question of a `self` approval (SPEC §15): what the caller is asked in flight (asking.py: an
`elicitation/create` in form mode at 2025-11-25, an input round at 2026-07-28), showing the tool and
every argument (whole), and what a person is shown of a call they approve, on the approval page
and in the question alike: every character they could not see or could misread written as its
JSON escape.
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass
from typing import Any

from ..asking import ANSWERS, INPUT_KEY, STATE_PREFIX, Answer, answer_of, answering, asks_forms
from ..asking import input_answer as input_answer
from ..asking import input_round as round_of

__all__ = ["ANSWERS", "INPUT_KEY", "STATE_PREFIX", "Answer", "Question", "answer_of", "answering",
           "asks_forms", "escape", "hidden", "input_answer", "visible"]

# Controls, format characters (the bidirectional overrides and isolates, zero-width ones), line
# and paragraph separators, spaces other than U+0020, private-use, surrogate and unassigned code
# points. (A new line is kept: pretty-printed JSON has them, and a string's are escaped already.)
_HIDDEN = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"))


def hidden(char: str) -> bool:
    """Whether a person could not see `char`, or could misread what follows it."""
    return char != " " and char != "\n" and unicodedata.category(char) in _HIDDEN


def escape(char: str) -> str:
    """`char` as JSON writes it escaped (`\\u202e`; beyond the BMP, a surrogate pair)."""
    code = ord(char)
    if code > 0xFFFF:
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def visible(text: str) -> str:
    """`text` with every hidden character written as its JSON escape (within a JSON string, the
    same value)."""
    return "".join(escape(c) if hidden(c) else c for c in text)


@dataclass(frozen=True, slots=True)
class Question:
    """Ask the caller whether `tool` may run with `arguments` (canonical JSON), once; the answer is
    due within `timeout_seconds`. `request_id` names the request it answers (an input round's
    state carries it to the retry). An `asking.Question`."""

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
        """The `input_required` result that asks it at 2026-07-28 (`asking.input_round`)."""
        return round_of(self.request_id, self.elicitation_params())
