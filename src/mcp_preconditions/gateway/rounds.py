"""Input rounds for 2026-07-28 clients in front of a 2025-11-25 upstream: the upstream asks for
sampling, elicitation or roots with a request of its own, the client expects an `input_required`
result and retries the call with its answers. The upstream's call waits here between the rounds.

A round holds every question the server has out when it is returned (questions arriving together
are gathered first), each under a key named from what it asks (`round_state.question_key`), and a
new `requestState` per round, signed and bound to the caller, the request and the server
(`round_state.Sealer`). Answers are matched by key: a retry's for its round, and answers a client
gives before the question comes (a first call that carries `inputResponses`) wait for it. A
question the client never declared it can answer is refused; a call that then fails is the
client's missing capability (-32021), not the tool's error.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Any

import anyio

from ..principal import Credentials, Identity
from .clients import Call
from .errors import PeerFailed
from .inbound import MISSING_REQUIRED_CLIENT_CAPABILITY
from .jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, REQUEST_TIMEOUT, RpcError
from .round_state import Round, Sealer, answers_question, question_key

log = logging.getLogger("mcp_preconditions.gateway")

# Calls waiting for a client's retry at once: beyond this the upstream's next request is refused
# (bounded memory, whatever clients do); one caller's beyond theirs lose their own oldest.
MAX_WAITING = 256
MAX_WAITING_PER_CALLER = 16
MAX_OFFERED = 32  # answers kept for questions not asked yet, per call
_TOKEN_PREFIX = "mcp-preconditions-gateway:"  # a call's id (its round states name it, signed)
# Questions a server sends together arrive one by one: a round is returned once none has come
# for GATHER_QUIET seconds (at most GATHER_MAX after the first), so it holds all of them.
GATHER_QUIET = 0.05
GATHER_MAX = 0.5
# The SDK's own wording for a state it cannot honour (mcp.server.request_state), so clients see one
# message whoever refused it, and whatever was wrong with the state.
INVALID_STATE = "Invalid or expired requestState"
_LATE = "gateway: the client did not answer in time"
_ENDED = "gateway: the call this request belongs to has ended"
_CAPABILITY = {"sampling/createMessage": "sampling", "elicitation/create": "elicitation",
               "roots/list": "roots"}

Send = Callable[[], Awaitable[dict[str, Any]]]


def caller_key(credentials: Credentials, identity: Identity | None = None) -> str:
    """Who a call came from, as a digest: a retry must come from the same caller as the call it
    continues. A verified caller is its principal (issuer, subject, client), so a client that
    refreshes its token between rounds continues; claims given over stdio are the caller; else
    anonymous. A token is never kept, and a token that did not verify binds nobody else's round."""
    principal = identity.principal if identity is not None else credentials.principal
    if principal is not None:
        claims = principal.claims
        who = [str(claims.get(k)) if claims.get(k) is not None else None
               for k in ("iss", "sub", "client_id", "azp")]
        raw = "principal:" + json.dumps(who) if any(who) else \
            "claims:" + json.dumps(dict(claims), sort_keys=True, default=str)
    elif credentials.token is not None:  # not verified (no [auth]): the token is all there is
        raw = "token:" + credentials.token
    else:
        raw = "anonymous"
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()


def binding(method: str, params: Mapping[str, Any] | None) -> str:
    """What the request is about (the tool or prompt and its arguments, or the URI) as the client
    named it: a retry must name the same. The client's params, with the names it sees: two servers'
    `ask` tools (`a__ask`, `b__ask`) are two bindings."""
    p = params or {}
    about = {"method": method, "name": p.get("name"), "uri": p.get("uri"),
             "arguments": p.get("arguments") or {}}
    return json.dumps(about, sort_keys=True, default=str)


class _Ask:
    """One request from the upstream, waiting for the client's answer."""

    def __init__(self, method: str, params: dict[str, Any]) -> None:
        self.method = method
        self.params = params
        self.answered = anyio.Event()
        self.answer: dict[str, Any] | RpcError | None = None

    def settle(self, answer: dict[str, Any] | RpcError) -> None:
        if not self.answered.is_set():
            self.answer = answer
            self.answered.set()


class PendingCall:
    """One client call forwarded upstream, across as many input rounds as the upstream needs."""

    def __init__(self, rounds: Rounds, caller: str, about: str, timeout: float,
                 capabilities: Mapping[str, Any], server: str) -> None:
        self.token = _TOKEN_PREFIX + secrets.token_urlsafe(24)
        self.server = server  # the server the call went to: only its requests belong to it
        self.owner: Hashable | None = None  # whose it is, when it went as a caller (SPEC §14)
        self.capabilities = capabilities  # what the client declared it can answer
        self.caller = caller
        self.about = about
        self.timeout = timeout
        self.round = 0  # the rounds returned so far; only the last one's state is good
        self._rounds = rounds
        self._asks: dict[str, _Ask] = {}  # the questions out, by key
        self._offered: dict[str, Any] = {}  # answers given before their question came, by key
        self._refused: set[str] = set()  # capabilities the server asked for and the client lacks
        self._outcome: dict[str, Any] | BaseException | None = None
        self._changed = anyio.Event()
        self._attached = 0
        self._idle_since: float | None = None  # set while no client request waits on this call
        self._expired = False
        self.current: Call | None = None  # the client request waiting
        self.scope = anyio.CancelScope()

    @property
    def waiting(self) -> bool:
        return self._attached == 0 and self._outcome is None

    @property
    def attached(self) -> bool:
        """Whether a client request waits on it now (else it waits for its client's retry)."""
        return self._attached > 0

    @property
    def running(self) -> bool:
        """Whether its call to the server is still going (it may still ask)."""
        return self._outcome is None

    @property
    def idle_since(self) -> float:
        return self._idle_since if self._idle_since is not None else float("inf")

    def _signal(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    # -- the upstream's side ---------------------------------------------------------------------
    async def ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The upstream's request, answered by the client's next retry (or refused on expiry). A
        question the client did not declare it can answer is refused at once (and remembered)."""
        if self._expired or self._outcome is not None or self.scope.cancel_called:
            raise PeerFailed(REQUEST_TIMEOUT, _ENDED)
        capability = _CAPABILITY.get(method)
        if capability is not None and capability not in self.capabilities:
            self._refused.add(capability)
            raise RpcError(METHOD_NOT_FOUND, f"gateway: the calling client cannot answer {method}")
        key = question_key(method, params, self._asks.__contains__)
        offered = self._offered.pop(key, None)
        if offered is not None and answers_question(method, offered):
            return dict(offered)
        if self._rounds.waiting() >= MAX_WAITING:
            raise RpcError(INTERNAL_ERROR, "gateway: too many calls wait for client input")
        ask = self._asks[key] = _Ask(method, params)
        self._signal()
        try:
            await ask.answered.wait()
        finally:
            self._asks.pop(key, None)
        if isinstance(ask.answer, RpcError):
            raise ask.answer
        assert ask.answer is not None
        return ask.answer

    async def run(self, send: Send) -> None:
        """Forward the call and keep its outcome (result or error) for the client, until the
        client takes it or the call is abandoned (`close()` ends this task either way)."""
        with self.scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._expire_when_abandoned)
                try:
                    self._outcome = self._missing(await send())
                except Exception as exc:
                    self._outcome = self._missing(exc)
                finally:  # the upstream's call is over: nothing it asked can matter now
                    self.fail(PeerFailed(REQUEST_TIMEOUT, _ENDED))
                self._signal()

    def _missing(self, outcome: dict[str, Any] | Exception) -> dict[str, Any] | Exception:
        """A call that failed after the server was refused a capability the client never
        declared failed for want of it: the client is told which (-32021), as a 2026-07-28
        server tells it, rather than handed the tool's error."""
        failed = isinstance(outcome, Exception) or outcome.get("isError") is True
        if not (failed and self._refused):
            return outcome
        return RpcError(MISSING_REQUIRED_CLIENT_CAPABILITY, "Missing required client capability",
                        {"requiredCapabilities": {c: {} for c in sorted(self._refused)}})

    def close(self) -> None:
        """The call is over for the client: forgotten, and the upstream call (and whatever it
        still asks) ended."""
        self._rounds.forget(self)
        self.fail(PeerFailed(REQUEST_TIMEOUT, _ENDED))
        self.scope.cancel()

    async def _expire_when_abandoned(self) -> None:
        """A client that never retries: after the call timeout (counted from its last request)
        the call is forgotten and the upstream's requests get an error."""
        while True:
            idle = self._idle_since
            now = anyio.current_time()
            if idle is not None and now - idle >= self.timeout:
                break
            await anyio.sleep(self.timeout if idle is None else idle + self.timeout - now)
        # The upstream's requests get an error; its call goes on to its own end (it is bounded by
        # the same timeout), so the upstream sees the error rather than a cancellation.
        log.warning("a client did not answer the upstream's request within %s s", self.timeout)
        self._expired = True
        self._rounds.forget(self)
        self.fail(PeerFailed(REQUEST_TIMEOUT, _LATE))

    def fail(self, error: RpcError) -> None:
        for ask in list(self._asks.values()):
            ask.settle(error)

    # -- the client's side -----------------------------------------------------------------------
    def answer(self, responses: Any) -> None:
        """The client's answers, by key: each to the question out under it (an answer that does
        not answer it leaves it open); an answer to no question yet waits for one."""
        if not isinstance(responses, Mapping):
            return
        for key, response in responses.items():
            ask = self._asks.get(key) if isinstance(key, str) else None
            if ask is not None:
                if answers_question(ask.method, response):
                    ask.settle(dict(response))
            elif isinstance(key, str) and len(self._offered) < MAX_OFFERED:
                self._offered[key] = response

    async def next(self, ctx: Call) -> dict[str, Any]:
        """Wait for the upstream's result (returned, or raised) or for requests the client must
        answer first (an `input_required` result); `ctx` is the client request that waits."""
        self._attached += 1
        self._idle_since = None
        self.current = ctx
        try:
            while True:
                if isinstance(self._outcome, BaseException):
                    self.close()
                    raise self._outcome
                if self._outcome is not None:
                    self.close()
                    return self._outcome
                if self._open():
                    await self._gathered()
                    asks = self._open()
                    if asks and self._outcome is None:
                        return self._round(asks)
                    continue
                await self._changed.wait()
        except anyio.get_cancelled_exc_class():
            self.close()  # the client gave up on its call: so does the gateway
            raise
        finally:
            self._attached -= 1
            if self.current is ctx:
                self.current = None
            if self._attached == 0:
                self._idle_since = anyio.current_time()

    def _open(self) -> dict[str, _Ask]:
        return {k: a for k, a in self._asks.items() if not a.answered.is_set()}

    async def _gathered(self) -> None:
        """Until the server has sent no question (nor ended) for GATHER_QUIET seconds, or
        GATHER_MAX has passed."""
        deadline = anyio.current_time() + GATHER_MAX
        while self._outcome is None:
            left = deadline - anyio.current_time()
            if left <= 0:
                return
            changed = self._changed
            with anyio.move_on_after(min(GATHER_QUIET, left)) as quiet:
                await changed.wait()
            if quiet.cancelled_caught:
                return

    def _round(self, asks: Mapping[str, _Ask]) -> dict[str, Any]:
        self.round += 1
        return {"resultType": "input_required", "requestState": self._rounds.seal(self),
                "inputRequests": {k: {"method": a.method, "params": a.params}
                                  for k, a in asks.items()}}


class Rounds:
    """The calls of 2026-07-28 clients that are forwarded to a 2025-11-25 upstream."""

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self._calls: dict[str, PendingCall] = {}
        self._sealer = Sealer(clock)

    def calls(self) -> list[PendingCall]:
        return list(self._calls.values())

    def waiting(self) -> int:
        return sum(1 for call in self._calls.values() if call.waiting)

    def forget(self, call: PendingCall) -> None:
        self._calls.pop(call.token, None)

    def seal(self, call: PendingCall) -> str:
        """The state of `call`'s current round, good for a call timeout."""
        return self._sealer.issue(Round(call.token, call.round), call.timeout,
                                  (call.caller, call.about, call.server))

    async def start(self, ctx: Call, caller: str, about: str,
                    timeout: float, capabilities: Mapping[str, Any],
                    spawn: Callable[[PendingCall], None], server: str) -> dict[str, Any]:
        """A new call to `server`: `spawn` starts its request there in the background. Answers
        the call carries already (`inputResponses` without a state) wait for their questions."""
        self._bound(caller)
        call = PendingCall(self, caller, about, timeout, capabilities, server)
        call.answer((ctx.params or {}).get("inputResponses"))
        self._calls[call.token] = call
        try:
            spawn(call)
        except BaseException:
            self.forget(call)
            raise
        return await call.next(ctx)

    def _bound(self, caller: str) -> None:
        """A caller with MAX_WAITING_PER_CALLER calls waiting for their retry loses the oldest
        (never another caller's)."""
        waiting = [c for c in self._calls.values() if c.caller == caller and c.waiting]
        excess = len(waiting) - MAX_WAITING_PER_CALLER + 1
        if excess > 0:
            log.warning("a caller has %d calls waiting for their input: the oldest is ended",
                        len(waiting))
            for call in sorted(waiting, key=lambda c: c.idle_since)[:excess]:
                call.close()

    async def resume(self, ctx: Call, state: Any, caller: str, about: str, server: str,
                     responses: Mapping[str, Any] | None) -> dict[str, Any]:
        """A retry: the client's answers go to the upstream's waiting requests, if its state is the
        one this gateway issued for the call's last round, to the same caller, for the same
        request and server, and has not expired."""
        found = self._sealer.check(state, (caller, about, server))
        call = self._calls.get(found.call) if found is not None else None
        if call is None or found is None or found.number != call.round:
            raise RpcError(INVALID_PARAMS, INVALID_STATE, {"reason": "invalid_request_state"})
        call.answer(responses)
        return await call.next(ctx)
