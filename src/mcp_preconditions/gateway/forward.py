"""Forwarding one client request to one server: the server's faults become JSON-RPC errors that name
the server and nothing else, progress goes back to the caller, and input rounds are carried between
protocol versions (a 2026-07-28 client in front of a 2025-11-25 server, and the reverse).

A call to a server with `credentials` (SPEC §14) goes as its caller: as what its decision left in
the call's sidecar says (`late.Held.outbound`: whose request it is, and its headers in place of the
static ones); a server that refuses it (401/403 with `WWW-Authenticate`) has it renewed once
(`Outbound.challenged`), and if that fails the call ends as an unmet `credential:KEY`
(`CredentialRefused`), never as a generic upstream error.
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
from .downstream.callers import Downstream
from .downstream.clients import Call
from .errors import CredentialRefused, UpstreamChallenged, UpstreamError, UpstreamSessionGone
from .fleet import Member
from .jsonrpc import INTERNAL_ERROR, RpcError
from .rounds import PendingCall, Rounds
from .schemas import input_required_methods, is_input_required
from .upstream.peer import ProgressHook
from .upstream.session import Upstream

log = logging.getLogger("mcp_preconditions.gateway")

# A 2026-07-28 server's input rounds answered for a 2025-11-25 client (the SDK client's own cap is
# 10); a state-only round is retried after a short pause.
MAX_INPUT_ROUNDS = 8
STATE_ONLY_PAUSE = 0.05

Authenticate = Callable[[Credentials], Awaitable[Identity]]


class Forward:
    """Sends client requests on to the servers, for one gateway."""

    def __init__(self, downstream: Downstream, rounds: Rounds, timeout: Callable[[], float],
                 credentials: Callable[[Call], Credentials],
                 authenticate: Authenticate, telemetry: GatewayTelemetry) -> None:
        self._downstream = downstream
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
        the call's decision left beside it (its caller's credential for this server)."""
        timeout = self._timeout()
        upstream = member.upstream
        held = _held(member, method, sidecar)
        # The caller's own token, for renewing their credential (a held one keeps none).
        own = sidecar.token if held is not None and sidecar is not None else None
        if (ctx.modern and method in input_required_methods()
                and not upstream.modern):
            return await self._in_rounds(ctx, member, method, params, timeout, held, own)
        with self._downstream.in_flight(ctx, member.key):
            result = await self.send(ctx, member, method, params, timeout, held, own)
            if not ctx.modern and is_input_required(result):
                result = await self._answer_rounds(ctx, member, method, params, result, timeout,
                                                   held, own)
        return result

    async def send(self, ctx: Call | None, member: Member, method: str,
                   params: Mapping[str, Any] | None, timeout: float,
                   held: Outbound | None = None, own: str | None = None) -> dict[str, Any]:
        """One request to the server, progress mapped back to the caller; the server's faults
        become JSON-RPC errors (never a crash, never a result the server did not send). What the
        caller is told names the server's key only; the details go to the log. `held`: the
        caller's credential, when the request goes as them; `own`: their token, to renew it."""
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
        try:
            with self._telemetry.upstream(member.key, method,
                                          bridge.upstream_params(params, modern=upstream.modern),
                                          ctx.headers if ctx is not None else None) as sent:
                if held is None:
                    return await upstream.request(method, sent, timeout=timeout,
                                                  on_progress=on_progress)
                try:  # as the caller (`_renewed`, inline: every call with a credential)
                    return await upstream.request_as(held, method, sent, timeout=timeout,
                                                     on_progress=on_progress)
                except UpstreamChallenged as exc:
                    log.info("server %s refused a caller's credential (HTTP %d): renewing it once",
                             upstream.key, exc.status)
                except UpstreamSessionGone:  # their session, ended by the server: it ran nothing
                    log.info("server %s ended a caller's session: sending on a new one, once",
                             upstream.key)
                    return await _again(upstream, held, own, method, sent, timeout, on_progress)
                return await _renewed(upstream, held, own, method, sent, timeout, on_progress)
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
            member.upstream.spawn(lambda: call.run(
                lambda: self.send(ctx, member, method, p, timeout, held, own)))
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
                raise RpcError(INTERNAL_ERROR, f"server {member.key} sent an invalid result")
            answers: dict[str, Any] = {}
            for key, ask in (asks or {}).items():
                if not isinstance(ask, dict) or not isinstance(ask.get("method"), str):
                    raise RpcError(INTERNAL_ERROR, f"server {member.key} sent an invalid result")
                answers[key] = await ctx.ask(ask["method"], dict(ask.get("params") or {}), timeout)
            if not answers:
                await anyio.sleep(STATE_ONLY_PAUSE)  # the server is working: ask again shortly
            retry = {k: v for k, v in (params or {}).items()
                     if k not in ("inputResponses", "requestState")}
            retry["inputResponses"] = answers
            if result.get("requestState") is not None:
                retry["requestState"] = result["requestState"]
            result = await self.send(ctx, member, method, retry, timeout, held, own)
        raise RpcError(INTERNAL_ERROR,
                       f"server {member.key} asked for input more than {MAX_INPUT_ROUNDS} times")


def _held(member: Member, method: str, sidecar: Sidecar | None) -> Outbound | None:
    """Whom a call to `member` goes as: a `tools/call` to a server with `credentials` goes only as
    its caller (what its decision left: `Held.outbound`). Without one (a call no decision obtained
    a credential for) it is refused here, never sent with the gateway's static headers."""
    requirement = member.credential
    if requirement is None or method != "tools/call":
        return None
    held = sidecar.held.get(requirement) if sidecar is not None else None
    outbound = held.outbound if held is not None else None
    if outbound is None:
        raise CredentialRefused(Outcome(requirement, Status.UNSATISFIED,
                                        "no credential was obtained for this call", transient=True))
    return outbound


async def _again(upstream: Upstream, held: Outbound, own: str | None, method: str,
                 params: Mapping[str, Any] | None, timeout: float,
                 on_progress: ProgressHook | None) -> dict[str, Any]:
    """The request as the caller once more, on a new session of theirs, after the server answered
    404 for the one it went on (`Forward.send`): it ran nothing there, so this still runs it at
    most once (SPEC §10). The server refusing the credential now renews it, as on the first try."""
    try:
        return await upstream.request_as(held, method, params, timeout=timeout,
                                         on_progress=on_progress)
    except UpstreamChallenged as exc:
        log.info("server %s refused a caller's credential (HTTP %d): renewing it once",
                 upstream.key, exc.status)
    return await _renewed(upstream, held, own, method, params, timeout, on_progress)


async def _renewed(upstream: Upstream, held: Outbound, own: str | None, method: str,
                   params: Mapping[str, Any] | None, timeout: float,
                   on_progress: ProgressHook | None) -> dict[str, Any]:
    """The request as the caller again, after the server answered 401/403 with
    `WWW-Authenticate` (`Forward.send`): an answer the server gave instead of running the call,
    so sending it again once with a renewed credential still runs it at most once (SPEC §10,
    §14); a second refusal, or no renewed credential, is CredentialRefused."""
    renewed = await held.challenged(own)
    if isinstance(renewed, Outcome):
        raise CredentialRefused(renewed)
    try:
        try:
            return await upstream.request_as(renewed, method, params, timeout=timeout,
                                             on_progress=on_progress)
        except UpstreamSessionGone:  # as `Forward.send`: it ran nothing; a new session, once
            log.info("server %s ended a caller's session: sending on a new one, once",
                     upstream.key)
        return await upstream.request_as(renewed, method, params, timeout=timeout,
                                         on_progress=on_progress)
    except UpstreamChallenged:
        again = await renewed.challenged(own)  # renewed once: the unmet outcome
        if isinstance(again, Outcome):
            raise CredentialRefused(again) from None
        raise  # (a stage that renews twice: the server's refusal, as an upstream error)
