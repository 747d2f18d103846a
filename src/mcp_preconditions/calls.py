"""One tool call's late part, the same for every adapter (SPEC §3, §14, §15): the hosted servers
(integrations/_hosted.py: `GuardedMCPServer`, `guard_server`, the FastMCP middleware) and the
gateway take a call through `take` (or its parts), each with its own ways to ask its client, to
deny and to run:

    refuse   what is refused before the guard (a name listed twice, requirements that cannot be
             read, a policy unusable for the server): `Guard.refuse`, then denied;
    decide   `Guard.check`, with a sidecar (late.py) when a late stage may leave something for the
             call: the adapter forwards it (`carry`), or the tool's stages may ask its caller;
    ask      each question a held answer asks (`Held.question`), one per question-asking
             requirement at most (`Snapshot.asking`): in flight at 2025-11-25 (`Client.elicit`), at
             2026-07-28 as an input round of ours that the retry answers (`Reply`); the answer
             kept (`Held.answer`) and the call decided again;
    deny     the denial shaped for its client: the held answers' and the resolvers' offers;
    run      the adapter's handler, or the gateway's forwarding (which reads `Held.outbound`);
    finish   the held answers told how the call ended (`Held.finished`: allowed, ran).

A decision is observed (counted, written on the server span) once per call, when it is final: a
call answered with an input round is not decided yet (its retry is). No MCP SDK here.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, NamedTuple, TypeVar

from .guard import Guard
from .late import Answer, Question, Sidecar, answering, input_answer
from .outcomes import Decision, Refusal
from .principal import Credentials
from .remedies import Recipient, recipient_of

log = logging.getLogger("mcp_preconditions.guard")

R = TypeVar("R")
# The wire fields of a 2026-07-28 round: those of ours never reach the tool (`without_round`).
ROUND_FIELDS = ("requestState", "inputResponses")

# How an adapter asks the guard for the call (its decision span around it, say), with a sidecar.
Check = Callable[[Sidecar | None], Decision | Awaitable[Decision]]
# How it counts the call's final decision.
Observe = Callable[[Decision], None]
# How it asks its client in flight (2025-11-25); None for no answer in time, or garbage.
Elicit = Callable[[Question], Awaitable[Answer | None]]


class Reply(NamedTuple):
    """What a 2026-07-28 retry carries for one of our rounds: the question its state names, and the
    caller's answer (None: none, or garbage)."""

    request_id: str
    answer: Answer | None


def reply_of(state: object, responses: object) -> Reply | None:
    """The retry's reply to one of our rounds (its plaintext `requestState` and `inputResponses`),
    or None: no round, or the tool's own."""
    request_id = answering(state)
    return Reply(request_id, input_answer(responses)) if request_id is not None else None


def without_round(params: Mapping[str, Any]) -> dict[str, Any]:
    """A retry's raw `tools/call` params less our round's fields, for the tool that now runs."""
    return {k: v for k, v in params.items() if k not in ROUND_FIELDS}


class Client(NamedTuple):
    """What the adapter knows of the client that made the call. `can_ask`: it declared form
    elicitation and can be asked now; `modern`: 2026-07-28 (asked with an input round, answered by
    the retry: `reply`, what this retry answers to one of ours); `elicit`: how it is asked in
    flight at 2025-11-25."""

    can_ask: bool = False
    modern: bool = False
    reply: Reply | None = None
    elicit: Elicit | None = None


class Decided(NamedTuple):
    """A call decided: its final Decision, the sidecar it was decided with (None: it carried none),
    and, for a 2026-07-28 caller whose question is not answered yet, the input round to answer the
    call with instead of a denial."""

    decision: Decision
    sidecar: Sidecar | None = None
    round: dict[str, Any] | None = None


def decide(guard: Guard, tool: str, credentials: Credentials, arguments: Mapping[str, Any] | None,
           *, echo: object = None, client: Client | None = None,
           refusal: tuple[Refusal, str] | None = None, carry: bool = False,
           check: Check | None = None, observe: Observe | None = None
           ) -> Decided | Coroutine[Any, Any, Decided]:
    """The call refused, or decided with its questions asked (the module's docstring): at once when
    nothing needs awaiting, else a coroutine. `client`: None when the adapter cannot reach it (no
    session): nothing is asked and, unless it `carry`s one or a stage of the tool `carries` one
    (`Snapshot.carrying`), no sidecar is made. `check`: the
    adapter's way to ask the guard (default `Guard.check_now`); `observe`: told the final decision."""
    if refusal is not None:
        return _refused(guard, tool, credentials, refusal, echo, observe)
    snapshot = guard.snapshot
    asks = snapshot.asking.get(tool, 0)
    sidecar = None
    if carry or (asks and client is not None) or tool in snapshot.carrying:
        reply = client.reply if client is not None and client.modern else None
        sidecar = Sidecar(can_ask=asks > 0 and client is not None and client.can_ask,
                          answered=reply.request_id if reply is not None else None, reports=True)
    checked = check(sidecar) if check is not None else guard.check_now(
        tool, credentials, arguments, sidecar=sidecar, echo=echo)
    if checked.__class__ is Decision or isinstance(checked, Decision):
        decision = checked
        if decision.allowed or sidecar is None or not sidecar.can_ask:
            if observe is not None:
                observe(decision)
            return Decided(decision, sidecar)
    return _asked(guard, tool, credentials, arguments, echo, checked, sidecar, client, asks, check,
                  observe)


async def _refused(guard: Guard, tool: str, credentials: Credentials,
                   refusal: tuple[Refusal, str], echo: object, observe: Observe | None) -> Decided:
    decision = await guard.refuse(tool, credentials, *refusal, echo=echo)
    if observe is not None:
        observe(decision)
    return Decided(decision)


async def _asked(guard: Guard, tool: str, credentials: Credentials,
                 arguments: Mapping[str, Any] | None, echo: object,
                 checked: Decision | Awaitable[Decision], sidecar: Sidecar | None,
                 client: Client | None, asks: int, check: Check | None, observe: Observe | None
                 ) -> Decided:
    """The decision, and while it is a denial a held answer's question can undo, the question
    asked and the call decided again with its answer: one question per asking requirement at most
    (a question a reload or a concurrent call made anew is not asked again)."""
    decision = checked if isinstance(checked, Decision) else await checked
    if sidecar is None or client is None or not sidecar.can_ask:
        asks = 0
    for _ in range(asks):
        assert sidecar is not None and client is not None  # (asks is 0 otherwise)
        found = sidecar.question() if not decision.allowed else None
        if found is None:
            break
        held, question = found
        reply = client.reply
        if client.modern and (reply is None or reply.request_id != question.request_id):
            return Decided(decision, sidecar, question.input_round())  # its retry is decided
        answer = reply.answer if client.modern and reply is not None else await _elicited(
            client, question)
        try:
            taken = await held.answer(answer)
        except Exception as exc:  # the store is down: the call stays denied
            log.warning("the caller's answer to question %s was not kept: %s", question.request_id,
                        type(exc).__name__)
            break
        sidecar = Sidecar(can_ask=True, answered=question.request_id, accepted=taken, reports=True)
        again = check(sidecar) if check is not None else guard.check_now(
            tool, credentials, arguments, sidecar=sidecar, echo=echo)
        decision = again if isinstance(again, Decision) else await again
    if observe is not None:
        observe(decision)
    return Decided(decision, sidecar)


async def _elicited(client: Client, question: Question) -> Answer | None:
    """The client's answer in flight; its failure, or no way to ask, is no answer (a denial)."""
    if client.elicit is None:
        return None
    try:
        return await client.elicit(question)
    except Exception:  # timed out, closed, refused by the client: no answer
        return None


def recipient(guard: Guard, decided: Decided, credentials: Credentials,
              arguments: Mapping[str, Any] | None, url_elicitation: bool
              ) -> Recipient | Awaitable[Recipient]:
    """Who the call's denial goes to (`remedies.recipient_of`): whether its client declared URL
    elicitation, and what the held answers and the resolvers offer; at once when nobody is asked."""
    sidecar = decided.sidecar
    return recipient_of(decided.decision, guard.snapshot.registry, url_elicitation=url_elicitation,
                        identity=lambda: guard.authenticate(credentials), arguments=arguments,
                        held=sidecar.held if sidecar is not None else None)


def finish(decided: Decided, ran: bool) -> None:
    """Tell the held answers of an allowed call how it ended (refused ones were told as decided)."""
    sidecar = decided.sidecar
    if sidecar is not None and sidecar.told and decided.decision.allowed:
        sidecar.finish(True, ran)


async def take(guard: Guard, tool: str, credentials: Credentials,
               arguments: Mapping[str, Any] | None, *,
               run: Callable[[Decided], Awaitable[R]],
               deny: Callable[[Decision, Recipient], R | Awaitable[R]],
               ask: Callable[[dict[str, Any]], R], url_elicitation: bool = False,
               echo: object = None, client: Client | None = None,
               refusal: tuple[Refusal, str] | None = None, carry: bool = False,
               check: Check | None = None, observe: Observe | None = None) -> R:
    """The whole of one call: `decide`; then the input round (`ask`), the denial (`deny`, given
    its recipient), or the call run (`run`, given what was decided) and `finish`ed as run (when
    whatever `run` did may have happened; a `run` that knows it sent nothing, a server having
    refused the caller's credential, says so first with `finish(decided, ran=False)`)."""
    pending = decide(guard, tool, credentials, arguments, echo=echo, client=client,
                     refusal=refusal, carry=carry, check=check, observe=observe)
    decided = pending if isinstance(pending, Decided) else await pending
    if decided.round is not None:
        return ask(decided.round)
    decision = decided.decision
    if not decision.allowed:
        shaped = recipient(guard, decided, credentials, arguments, url_elicitation)
        denied = deny(decision, shaped if isinstance(shaped, Recipient) else await shaped)
        return denied if not isinstance(denied, Awaitable) else await denied
    try:
        return await run(decided)
    finally:
        finish(decided, True)  # (once: a `run` that finished it already is not told again)
