"""Asking a hosted server's caller (SPEC §15), through the MCP SDK's session of the call: whether its
client can be asked (`can_ask`), how (at 2025-11-25 in flight, an `elicitation/create` in form mode;
at 2026-07-28 with an input round, the call's answer the SDK's own `InputRequiredResult`, sealed by
the SDK's request-state boundary where the server has one), as calls.py's `Client`. The state grants
nothing: an answer counts only for the very call its question is bound to (calls.py, late.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any

import anyio
from mcp_types import InputRequiredResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ..calls import Client, Reply
from ..late import Answer, Question, answer_of, asks_forms


def _modern(session: Any) -> bool:
    return getattr(session, "protocol_version", None) in MODERN_PROTOCOL_VERSIONS


def can_ask(session: Any) -> bool:
    """Whether the client of an SDK session can be asked: it declared form elicitation (in its
    `initialize`, or at 2026-07-28 in the request's `_meta`), and at 2025-11-25 its connection
    has a back channel (a 2026-07-28 client is asked with an input round)."""
    if session is None or not (_modern(session) or getattr(session, "can_send_request", False)):
        return False
    elicitation = getattr(getattr(session, "client_capabilities", None), "elicitation", None)
    dump = getattr(elicitation, "model_dump", None)
    declared = dump(mode="json", exclude_none=True, by_alias=True) if callable(dump) else None
    return asks_forms({"elicitation": declared})


def client_of(session: Any, reply: Reply | None) -> Client | None:
    """The call's client as calls.py asks it (None: the SDK gave no session to ask through)."""
    if session is None:
        return None

    async def elicit(question: Question) -> Answer | None:
        """The client's answer, within the question's time; anything else is no answer."""
        params = question.elicitation_params()
        with anyio.fail_after(question.timeout_seconds):
            asked: Awaitable[Any] = session.elicit_form(params["message"], params["requestedSchema"])
            result = await asked
        return answer_of(result.model_dump(mode="json", exclude_none=True))

    return Client(can_ask(session), _modern(session), reply, elicit)


def input_required(round_: Mapping[str, Any]) -> InputRequiredResult:
    """A 2026-07-28 input round of ours as the SDK's own result type (the server's request-state
    boundary seals its state)."""
    return InputRequiredResult.model_validate(round_)
