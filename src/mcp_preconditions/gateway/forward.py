"""Forwarding one client request to one server: the server's faults become JSON-RPC errors that name
the server and nothing else, progress goes back to the caller, and input rounds are carried between
protocol versions (a 2026-07-28 client in front of a 2025-11-25 server, and the reverse).

A call to a server with `credentials` (SPEC §14) goes as its caller: as what its decision left in
the call's sidecar says (`late.Held.outbound`: whose request it is, and its headers in place of the
static ones); so does every other request for a caller (their credential obtained here:
`credentialed.py`), or it is refused and nothing is sent. Whose a request is goes with it
(`Downstream.in_flight`): what the server sends back on their session or their request's stream is
theirs alone. A server that refuses the credential (401/403 with `WWW-Authenticate`) gets it
renewed once (`Outbound.challenged`, given the challenge), and if that fails the request ends as an
unmet `credential:KEY` (`CredentialRefused`), never as a generic upstream error. A request is sent
at most twice: the second time only after an answer that proves the first did not run.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio

from ..late import Outbound, Sidecar
from ..outcomes import Outcome, Status
from ..principal import Credentials, Identity
from ..telemetry.gateway import GatewayTelemetry
from . import bridge, rounds
from .bridge import input_required_methods, is_input_required
from .callers import Downstream
from .clients import Call
from .credentialed import CallerCredentials
from .errors import (
    CredentialRefused,
    PeerFailed,
    UpstreamChallenged,
    UpstreamError,
    UpstreamSessionGone,
)
from .fleet import Member
from .jsonrpc import AUTHORIZATION_DENIED, INTERNAL_ERROR, RpcError
from .rounds import PendingCall, Rounds
from .upstream.peer import ProgressHook
from .upstream.session import Upstream

log = logging.getLogger("mcp_preconditions.gateway")

# What the gateway sends a server with credentials on its own session, for no caller: its catalog
# and pings (fleet.py, session.py). Every other request is a caller's, and goes as them.
GATEWAYS_OWN = frozenset({"tools/list", "ping"})
# A 2026-07-28 server's input rounds answered for a 2025-11-25 client (the SDK client's own cap is
# 10); a state-only round is retried after a short pause.
MAX_INPUT_ROUNDS = 8
STATE_ONLY_PAUSE = 0.05

Authenticate = Callable[[Credentials], Awaitable[Identity]]


class Forward:
    """Sends client requests on to the servers, for one gateway."""

    def __init__(self, downstream: Downstream, rounds: Rounds, timeout: Callable[[], float],
                 credentials: Callable[[Call], Credentials],
                 authenticate: Authenticate, telemetry: GatewayTelemetry,
                 callers: CallerCredentials | None = None) -> None:
        self._downstream = downstream
        self._callers = callers
        self._telemetry = telemetry
        self._rounds = rounds
        self._timeout = timeout
        self._credentials = credentials
        self._authenticate = authenticate

    async def __call__(self, ctx: Call, member: Member, method: str,
                       params: Mapping[str, Any] | None, sidecar: Sidecar | None = None
                       ) -> dict[str, Any]:
        """Forward one request to `member`, and carry the server's requests for client input
        between the two protocol versions (see `rounds.py` and `_answer_rounds`). `sidecar`: what
        the call's decision left beside it (its caller's credential for this server). A request
        no decision went before, to a server with credentials, goes as its caller with the
        credential obtained for it now, or is refused (RpcError AUTHORIZATION_DENIED)."""
        if sidecar is None and member.credential is not None:
            return await self._as_caller(ctx, member, method, params)
        timeout = self._timeout()
        upstream = member.upstream
        held = _held(member, sidecar)
        # The caller's own token, for renewing their credential (a held one keeps none).
        own = sidecar.token if held is not None and sidecar is not None else None
        if (ctx.modern and method in input_required_methods()
                and not upstream.modern):
            return await self._in_rounds(ctx, member, method, params, timeout, held, own)
        with self._downstream.in_flight(ctx, member.key, held.owner if held is not None else None):
            result = await self.send(ctx, member, method, params, timeout, held, own)
            if not ctx.modern and is_input_required(result):
                result = await self._answer_rounds(ctx, member, method, params, result, timeout,
                                                   held, own)
        return result

    async def _as_caller(self, ctx: Call, member: Member, method: str,
                         params: Mapping[str, Any] | None) -> dict[str, Any]:
        """A request no decision went before, to a server with credentials: as its caller, with
        the credential obtained for it now; RpcError AUTHORIZATION_DENIED when there is none, or
        the server refused it and renewing it gave none it accepts (nothing ran)."""
        requirement = member.credential
        assert requirement is not None
        if self._callers is None:  # (a gateway always has them; nothing goes as anyone else)
            raise RpcError(AUTHORIZATION_DENIED, f"Request {method} was not sent")
        try:
            sidecar = await self._callers.sidecar(ctx, requirement)
            return await self(ctx, member, method, params, sidecar)
        except CredentialRefused as exc:  # none to be had, or refused twice: not sent
            raise await self._callers.refusal(ctx, method, exc.outcome) from None

    async def send(self, ctx: Call | None, member: Member, method: str,
                   params: Mapping[str, Any] | None, timeout: float,
                   held: Outbound | None = None, own: str | None = None,
                   origin: PendingCall | None = None) -> dict[str, Any]:
        """One request to the server, progress mapped back to the caller; the server's faults
        become JSON-RPC errors (never a crash, never a result the server did not send). What the
        caller is told names the server's key only; the details go to the log. `held`: whom the
        request goes as (`Held.outbound`), when it goes as its caller; `own`: their token, to
        renew it. What the server asks on the request's own stream goes to `ctx` (or the bridged
        call it belongs to, `origin`)."""
        token = bridge.progress_token(params)
        on_progress = None
        if token is not None and ctx is not None:
            caller = ctx

            def on_progress(progress: float, total: float | None, message: str | None) -> None:
                params: dict[str, Any] = {"progressToken": token, "progress": progress}
                if total is not None:
                    params["total"] = total
                if message is not None:
                    params["message"] = message
                caller.notify("notifications/progress", params)  # dropped once it is answered
        upstream = member.upstream
        asker = origin if origin is not None else ctx
        if held is None and member.credential is not None and method not in GATEWAYS_OWN:
            raise CredentialRefused(Outcome(member.credential, Status.UNSATISFIED, "sent for no "
                                            "caller: the gateway's own session serves none",
                                            transient=True))
        try:
            with self._telemetry.upstream(member.key, method,
                                          bridge.upstream_params(params, modern=upstream.modern),
                                          ctx.headers if ctx is not None else None) as sent:
                if held is None:
                    return await upstream.request(method, sent, timeout=timeout,
                                                  on_progress=on_progress, origin=asker)
                try:  # as the caller (inline: every call with a credential)
                    return await upstream.request_as(held, method, sent, timeout=timeout,
                                                     on_progress=on_progress, origin=asker)
                except (UpstreamChallenged, UpstreamSessionGone) as exc:  # it did not run
                    assert member.credential is not None  # (a server the call goes as a caller to)
                    return await _once_more(upstream, member.credential, held, own, exc, method,
                                            sent, timeout, on_progress, asker)
        except UpstreamError as exc:  # the server's failure, mapped once (errors.py)
            log.warning("server %s: %s: %s", upstream.label, method, exc)
            raise exc.rpc(member.key) from None

    async def _in_rounds(self, ctx: Call, member: Member, method: str,
                         params: Mapping[str, Any] | None, timeout: float,
                         held: Outbound | None, own: str | None) -> dict[str, Any]:
        """A 2026-07-28 client's call to a 2025-11-25 server: the server's requests come back as
        `input_required`, and the retry carrying the answers continues the same call there (the
        retry was decided by the guard again before it got here). A round belongs to its caller's
        principal, not its token: a client that refreshes its token mid-round continues."""
        credentials = self._credentials(ctx)
        identity = await self._authenticate(credentials) if credentials.token is not None else None
        caller = rounds.caller_key(credentials, identity)
        about = rounds.binding(method, ctx.params)  # the visible name, not the server's own
        p = dict(params or {})
        if p.get("requestState") is not None:
            return await self._rounds.resume(ctx, p["requestState"], caller, about, member.key,
                                             p.get("inputResponses"))
        p.pop("inputResponses", None)  # answers to nothing this server asked
        p.pop("requestState", None)

        def spawn(call: PendingCall) -> None:
            call.owner = held.owner if held is not None else None  # (its server's requests)
            member.upstream.spawn(lambda: call.run(
                lambda: self.send(ctx, member, method, p, timeout, held, own, call)))
        return await self._rounds.start(ctx, caller, about, timeout, ctx.capabilities, spawn,
                                        member.key)

    async def _answer_rounds(self, ctx: Call, member: Member, method: str,
                             params: Mapping[str, Any] | None, result: dict[str, Any],
                             timeout: float, held: Outbound | None, own: str | None
                             ) -> dict[str, Any]:
        """A 2026-07-28 server's `input_required` for a 2025-11-25 client: each input request is
        put to the caller on its request's stream, and the call retried with the answers."""
        for _ in range(MAX_INPUT_ROUNDS):
            if not is_input_required(result):
                return result
            asks = result.get("inputRequests")
            if asks is not None and not isinstance(asks, dict):
                raise PeerFailed(INTERNAL_ERROR, f"server {member.key} sent an invalid result")
            answers: dict[str, Any] = {}
            for key, ask in (asks or {}).items():
                if not isinstance(ask, dict) or not isinstance(ask.get("method"), str):
                    raise PeerFailed(INTERNAL_ERROR, f"server {member.key} sent an invalid result")
                answers[key] = await ctx.ask(ask["method"], dict(ask.get("params") or {}), timeout)
            if not answers:
                await anyio.sleep(STATE_ONLY_PAUSE)  # the server is working: ask again shortly
            retry = {k: v for k, v in (params or {}).items()
                     if k not in ("inputResponses", "requestState")}
            retry["inputResponses"] = answers
            if result.get("requestState") is not None:
                retry["requestState"] = result["requestState"]
            result = await self.send(ctx, member, method, retry, timeout, held, own)
        raise PeerFailed(INTERNAL_ERROR,
                         f"server {member.key} asked for input more than {MAX_INPUT_ROUNDS} times")


def _held(member: Member, sidecar: Sidecar | None) -> Outbound | None:
    """Whom a request to `member` goes as: every request for a caller to a server with
    `credentials` goes only as them (what its decision left: `Held.outbound`). Without one it is
    refused here, never sent with the gateway's static headers."""
    requirement = member.credential
    if requirement is None:
        return None
    held = sidecar.held.get(requirement) if sidecar is not None else None
    outbound = held.outbound if held is not None else None
    if outbound is None:
        raise CredentialRefused(Outcome(requirement, Status.UNSATISFIED,
                                        "no credential was obtained for this call", transient=True))
    return outbound


async def _once_more(upstream: Upstream, requirement: str, held: Outbound, own: str | None,
                     answer: UpstreamError, method: str, params: Mapping[str, Any] | None,
                     timeout: float, on_progress: ProgressHook | None, origin: object | None
                     ) -> dict[str, Any]:
    """The request as the caller a second and last time, after an `answer` that proves the first
    did not run (`Forward.send`): a 404 for the caller's session (the server ended it: a new one
    is opened) or a 401/403 with `WWW-Authenticate` (the credential refused: renewed first). Never
    a third time, whatever this one is answered (SPEC §14): a second refusal of the credential is
    CredentialRefused, a second lost session the server's failure; a renewal that gives no
    credential ends the call as CredentialRefused, not sent again."""
    caller = held
    if isinstance(answer, UpstreamChallenged):
        log.info("server %s refused a caller's credential (HTTP %d): renewing it, and sending "
                 "once more", upstream.key, answer.status)
        renewed = await held.challenged(own, answer.challenge)  # (a step-up's scope: SPEC §17)
        if isinstance(renewed, Outcome):
            raise CredentialRefused(renewed)
        caller = renewed
    else:  # their session, ended by the server
        log.info("server %s ended a caller's session: sending on a new one, once", upstream.key)
    try:  # the second and last time
        return await upstream.request_as(caller, method, params, timeout=timeout,
                                         on_progress=on_progress, origin=origin)
    except UpstreamChallenged:
        raise CredentialRefused(Outcome(
            requirement, Status.UNSATISFIED, f"server '{upstream.key}' refused this caller's "
            "credential; the call was not sent a third time", transient=True)) from None
