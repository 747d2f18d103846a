"""`approvers = "self"` on a hosted server (SPEC §15): a call of a tool with an `approval:`
requirement is decided with a sidecar and its caller asked: at 2025-11-25 in flight
(`elicitation/create`, form mode, through the SDK session of the call), at 2026-07-28 with an input
round (the call's "denial" is the SDK's `InputRequiredResult`, sealed by the SDK's request-state
boundary where the server has one; the retry's answer is kept and the call decided again with it).
The state grants nothing: an answer counts only for the very call its question is bound to, and
only the call whose accept was kept runs (a concurrent identical call is asked its own question). What
the approvals left for the denial's remedy, or the round to return, is kept for the deciding task.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import Any, NamedTuple

import anyio
from mcp_types import InputRequiredResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ..approvals import Answer, HeldApproval, Question, answer_of, asks_forms
from ..approvals.question import answering, input_answer
from ..guard import Guard
from ..late import Sidecar
from ..outcomes import Decision
from ..principal import Credentials

# The wire fields of a 2026-07-28 round: those of ours never reach the tool (`without_round`).
ROUND_FIELDS = ("requestState", "inputResponses")


class Reply(NamedTuple):
    """What a 2026-07-28 retry carries for one of our rounds: the approval request its state
    names, and the caller's answer (None: none, or garbage)."""

    request_id: str
    answer: Answer | None


class _Held(NamedTuple):
    decision: Decision
    held: Mapping[str, Any]
    ask: Question | None  # a 2026-07-28 question to ask with an input round


# The last call this task decided with approvals: what they left (by requirement), and the round.
_HELD: ContextVar[_Held | None] = ContextVar("mcp_preconditions_approvals_held", default=None)


def approving(guard: Guard, tool: str) -> bool:
    """Whether `tool` has an `approval:` requirement in the policy in force."""
    return tool in guard.snapshot.approving


def reply_of(state: object, responses: object) -> Reply | None:
    """The retry's reply to one of our rounds (its plaintext `requestState` and `inputResponses`),
    or None: no round, or the tool's own."""
    request_id = answering(state)
    return Reply(request_id, input_answer(responses)) if request_id is not None else None


def without_round(params: Mapping[str, Any]) -> dict[str, Any]:
    """A retry's raw `tools/call` params less our round's fields, for the tool that now runs."""
    return {k: v for k, v in params.items() if k not in ROUND_FIELDS}


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


async def confirmed(guard: Guard, tool: str, credentials: Credentials,
                    arguments: Mapping[str, Any] | None, echo: object, session: Any,
                    observe: Callable[[Decision], None] | None, reply: Reply | None = None
                    ) -> Decision:
    """The call decided with its approvals: each `self` question asked (at most one per
    approval; at 2026-07-28 one per round, answered by `reply`), the final decision observed
    (counted) and its approvals kept for its denial (`held_for`) or its round (`input_round`)."""
    modern = _modern(session)
    sidecar = Sidecar(can_ask=can_ask(session),  # a retry continues the question its round asked
                      answered=reply.request_id if reply is not None and modern else None)
    decision = await guard.check(tool, credentials, arguments, sidecar=sidecar, echo=echo)
    ask: Question | None = None
    for _ in range(len(guard.snapshot.source.policy.approvals)):
        held = next((h for h in sidecar.held.values() if isinstance(h, HeldApproval)), None)
        question = held.question if held is not None and sidecar.can_ask else None
        if decision.allowed or held is None or question is None:
            break
        if modern and (reply is None or reply.request_id != question.request_id):
            ask = question  # not answered yet: the round asks it
            break
        try:
            taken = await held.answer(reply.answer if reply is not None and modern
                                      else await _elicited(session, question))
        except Exception:  # the store is down: the call stays denied
            break
        sidecar = Sidecar(can_ask=True, answered=question.request_id, accepted=taken)
        decision = await guard.check(tool, credentials, arguments, sidecar=sidecar, echo=echo)
    if observe is not None:
        observe(decision)
    _HELD.set(_Held(decision, sidecar.held, ask))
    return decision


async def _elicited(session: Any, question: Question) -> Answer | None:
    """The client's answer, within the question's time; anything else is no answer."""
    params = question.elicitation_params()
    try:
        with anyio.fail_after(question.timeout_seconds):
            asked: Awaitable[Any] = session.elicit_form(params["message"],
                                                        params["requestedSchema"])
            result = await asked
        return answer_of(result.model_dump(mode="json", exclude_none=True))
    except Exception:  # timed out, closed, refused by the client: no answer
        return None


def held_for(decision: Decision) -> Mapping[str, Any] | None:
    """What the approvals left for `decision`, when this task just decided it (`confirmed`)."""
    found = _HELD.get()
    return found.held if found is not None and found.decision is decision else None


def input_round(decision: Decision) -> InputRequiredResult | None:
    """The 2026-07-28 input round that asks `decision`'s caller (the SDK's own result type; the
    server's request-state boundary seals its state), when this task just decided it so."""
    found = _HELD.get()
    if found is None or found.decision is not decision or found.ask is None:
        return None
    return InputRequiredResult.model_validate(found.ask.input_round())
