"""The extension point for requirements decided after every other requirement of a call (SPEC §13
quotas, §14 credentials, §15 approvals, §16 a PDP, or a third party's budget or sign-off): a
resolver that declares `order` and `stage(requirements)` has a tool's requirements of its
namespace compiled into one `LateStage`; the snapshot decides a call's stages in `order`, each only
once every other requirement and every earlier stage held (a call refused for another reason never
costs an exchange, never takes a quota unit). docs/library.md walks through writing one.

How a stage plugs in: its resolver declares `order` (the built-ins': namespaces.py),
`not_a_condition` (the error when a capability grant names one) and `stage(requirements) ->
LateStage`. Its stage's `decide(call)` gives one outcome per requirement, at once or awaited (under
`timeout`, the snapshot's lookup timeout when None); `release(call)` gives back what `decide` took
when a later stage refuses the call. A stage may also offer `quick` (`Quick`): the answer `decide`
would give at once, for the common call it knows already, or None for `decide` to give; a tool
whose only late stage it is asks it first (no `LateCall` is built); `asks`: how many questions
it may put to the caller of one call (a tool whose stages may ask is in `Snapshot.asking`); and
`carries`: True when it must leave something for every call, whatever the adapter (what to do
once the call finished, say): every adapter then carries a sidecar for the tool
(`Snapshot.carrying`), which it would otherwise make only to forward a call or ask its caller.

What a stage leaves for the rest of the call is one small answer, `Held` (Envoy ext_authz's
`CheckResponse`: the proxy never knows which callout answered), put in the call's `Sidecar` under
each requirement it decided: its outcomes; a question for the caller (the adapter asks it, the
stage keeps the answer, and the call is decided again); whom the request to the server goes as and
with which headers (`Outbound`, renewed once when the server refuses it with a 401/403 challenge);
what to do once the call finished (allowed or not, ran or not); and the remedy it offers a denial.
Adapters read only that, through one orchestration (calls.py).

A question for the caller (`Question`; the `self` approval's is approvals/lifecycle.py) goes as an
`elicitation/create` in form mode at 2025-11-25 and as an input round of ours at 2026-07-28
(`input_round`, its retry read by `answering` and `input_answer`); the caller's answer is read
strictly (`answer_of`: anything but a clean accept is no), and `asks_forms` says whether a client
can be asked at all. (They were asking.py.)
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from typing import Any, Literal, NamedTuple, Protocol

from .offers import Offer, OfferCall
from .outcomes import Outcome
from .principal import Identity

log = logging.getLogger("mcp_preconditions.guard")

Found = tuple[Outcome, ...]  # one stage's outcomes, one per requirement, in its order


# -- asking the caller in flight (SPEC §15) ------------------------------------------------------
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


class Outbound(Protocol):
    """Whom a call's request to its server goes as (Envoy's headers to add upstream): `owner`, whose
    request it is (the server's session is theirs: issuer and subject, never a token's bytes), and
    `headers()`, what it carries in place of the server's static headers."""

    @property
    def owner(self) -> Hashable: ...

    def headers(self) -> Mapping[str, str]: ...

    async def challenged(self, token: str | None, challenge: str | None) -> Outbound | Outcome:
        """The server refused these headers with a 401/403 and `challenge` (its
        `WWW-Authenticate`: a step-up's scope), having run nothing: what to send the request with
        once more, or the unmet outcome the call ends with. The request is sent at most twice in
        all (the gateway never asks the one it returns); that one answers a challenge with the
        outcome: renewed once. `token`: the caller's own (`Sidecar.token`). Never raises."""
        ...


class Held(Protocol):
    """What a late stage leaves for one call once it decided (late.py's docstring): kept in the
    call's `Sidecar.held` under each of `requirements`, and read by the adapters, the forwarding and
    the denial through calls.py, never by its class."""

    @property
    def requirements(self) -> tuple[str, ...]: ...

    @property
    def outcomes(self) -> tuple[Outcome, ...]:
        """Allowed (every one satisfied) or refused, one outcome per requirement."""
        ...

    @property
    def question(self) -> Question | None:
        """A question to ask the caller before the call is decided again (None: nothing to ask)."""
        ...

    async def answer(self, answer: Answer | None) -> bool:
        """The caller's answer to `question` (None: none in time, or garbage), kept; whether it was
        an accept that was kept. The call is then decided again with `Sidecar(answered=
        question.request_id, accepted=that)`. Raises when it cannot be kept (a store is down)."""
        ...

    @property
    def outbound(self) -> Outbound | None:
        """Whom the request to the server goes as; None: as the server's own (its static headers)."""
        ...

    def finished(self, allowed: bool, ran: bool) -> None:
        """Told once the call is over, when the stage asked to be (`Sidecar.told`): whether it was
        allowed, and whether it ran (an allowed call a server refused did not). Never raises."""
        ...

    def offer(self, requirement: str, call: OfferCall) -> Awaitable[Offer | None]:
        """The remedy of this unmet requirement in the call's denial (offers.Remedial)."""
        ...


class Sidecar:
    """What one call carries beside its decision. `token`: the caller's raw bearer token (set by
    `Guard.check` from the call's credentials), read by a stage that must present it somewhere
    (token exchange) and by nothing else. `held`: by requirement, what a stage left (`Held`).
    `notes`: fields the decision record adds (`{"credential": {"kind", "cached"}}`): never a
    secret. `can_ask`: the adapter can ask the caller in flight (its client declared form
    elicitation); `answered`: the question this very call continues or just answered, and
    `accepted` whether its caller's accept of it was kept (None: not answered yet). `told`: the
    held answers to tell how the call ended (`Held.finished`): by the adapter once it ran or not
    when it `reports` (calls.py), else by the Guard as it decides (an allowed call taken as run)."""

    __slots__ = ("accepted", "answered", "can_ask", "held", "notes", "reports", "token", "told")

    def __init__(self, *, can_ask: bool = False, answered: str | None = None,
                 accepted: bool | None = None, reports: bool = False) -> None:
        self.token: str | None = None
        self.held: dict[str, Held] = {}
        self.notes: dict[str, Any] = {}
        self.can_ask = can_ask
        self.answered = answered
        self.accepted = accepted
        self.reports = reports
        self.told: list[Held] = []

    def question(self) -> tuple[Held, Question] | None:
        """The first question a held answer asks, with that answer (None: none asks)."""
        for held in self.held.values():
            question = held.question
            if question is not None:
                return held, question
        return None

    def finish(self, allowed: bool, ran: bool) -> None:
        """Tell each held answer that asked how the call ended, once (`Held.finished`)."""
        told, self.told = self.told, []
        for held in told:
            try:
                held.finished(allowed, ran)
            except Exception:  # telling must not change how the call ended
                log.exception("a late stage failed to hear how a call ended")

    def __repr__(self) -> str:  # never the token
        return f"Sidecar(held={sorted(self.held)}, notes={self.notes})"

    def __reduce__(self) -> str | tuple[object, ...]:
        raise TypeError("a Sidecar holds a caller's token: it is not pickled or copied")


class LateCall(NamedTuple):
    """One call as a late stage sees it: the tool's name, the caller, the arguments, the policy
    revision deciding it, and its sidecar (None: the adapter forwards nothing beside the decision,
    so a stage that must leave something there refuses)."""

    tool: str
    identity: Identity
    arguments: Mapping[str, Any] | None
    revision: str
    sidecar: Sidecar | None


class LateStage(Protocol):
    """One tool's requirements of one late namespace, compiled once per snapshot. (Optional, read
    by the snapshot when present: `quick`, a `Quick`; `asks`, an int; `carries`, a bool.)"""

    namespace: str
    requirements: tuple[str, ...]
    timeout: float | None  # for an awaited decision; None: the snapshot's lookup timeout

    def decide(self, call: LateCall) -> Found | Awaitable[Found]:
        """One outcome per requirement (their order). Raising is an `error` for every one."""
        ...

    def release(self, call: LateCall) -> Awaitable[None] | None:
        """A later stage refused the call that `decide` allowed: give back what it took."""
        ...


# A tool's only late stage's answer for (caller, sidecar) when it has one at once, with the same
# effects as `decide` (what it leaves in the sidecar, what it counts); None: `decide` decides. It
# never raises for a call it cannot decide (a raise is taken as None).
Quick = Callable[[Identity, "Sidecar | None"], "Found | None"]


class LateResolver(Protocol):
    """A resolver whose requirements are decided late: in `order`, by the stage it compiles."""

    namespace: str
    order: int
    not_a_condition: str  # why a capability grant cannot name one (it only looks)

    def stage(self, requirements: Sequence[str]) -> LateStage: ...


def late_resolver(resolver: object) -> LateResolver | None:
    """The resolver as a late one, or None when it decides with the others."""
    if isinstance(getattr(resolver, "order", None), int) and callable(getattr(resolver, "stage", None)):
        return resolver  # type: ignore[return-value]
    return None
