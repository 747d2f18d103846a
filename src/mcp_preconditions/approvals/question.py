"""The question of a `self` approval, and what a person is shown of a call: moved to lifecycle.py (a
request's life, from its binding to its record). These names stay importable from here, with the
wire vocabulary (late.py, once asking.py) they always re-exported."""

from __future__ import annotations

from ..late import ANSWERS, INPUT_KEY, STATE_PREFIX, Answer, answer_of, answering, asks_forms
from ..late import input_answer as input_answer
from .lifecycle import Question, escape, hidden, visible

__all__ = ["ANSWERS", "INPUT_KEY", "STATE_PREFIX", "Answer", "Question", "answer_of", "answering",
           "asks_forms", "escape", "hidden", "input_answer", "visible"]
