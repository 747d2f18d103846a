"""Forwarding one client request to one server: the server's faults become JSON-RPC errors that name
the server and nothing else, progress goes back to the caller, and input rounds are carried between
protocol versions (a 2026-07-28 client in front of a 2025-11-25 server, and the reverse).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.methods import INPUT_REQUIRED_METHODS, is_input_required
from pydantic import ValidationError

from ..principal import Credentials, Identity
from ..telemetry.gateway import GatewayTelemetry
from . import bridge, rounds
from .fleet import Member
from .rounds import PendingCall, Rounds
from .server import UpstreamUnavailable
from .session import Downstream, client_capabilities, http_headers

log = logging.getLogger("mcp_preconditions.gateway")

# A 2026-07-28 server's input rounds answered for a 2025-11-25 client (the SDK client's own cap is
# 10); a state-only round is retried after a short pause.
MAX_INPUT_ROUNDS = 8
STATE_ONLY_PAUSE = 0.05

Authenticate = Callable[[Credentials], Awaitable[Identity]]


class Forward:
    """Sends client requests on to the servers, for one gateway."""

    def __init__(self, downstream: Downstream, rounds: Rounds, timeout: Callable[[], float],
                 credentials: Callable[[ServerRequestContext[Any, Any]], Credentials],
                 authenticate: Authenticate, telemetry: GatewayTelemetry) -> None:
        self._downstream = downstream
        self._rounds = rounds
        self._timeout = timeout
        self._credentials = credentials
        self._authenticate = authenticate
        self._telemetry = telemetry

    async def __call__(self, ctx: ServerRequestContext[Any, Any], member: Member, method: str,
                       params: Mapping[str, Any] | None) -> dict[str, Any]:
        """Forward one request to `member`, and carry the server's requests for client input
        between the two protocol versions (see `rounds.py` and `_answer_rounds`)."""
        timeout = self._timeout()
        upstream = member.upstream
        if (bridge.is_modern(ctx.protocol_version) and method in INPUT_REQUIRED_METHODS
                and not upstream.modern):
            return await self._in_rounds(ctx, member, method, params, timeout)
        with self._downstream.in_flight(ctx, member.key):
            result = await self.send(ctx, member, method, params, timeout)
            if not bridge.is_modern(ctx.protocol_version) and is_input_required(result):
                result = await self._answer_rounds(ctx, member, method, params, result, timeout)
        return result

    async def send(self, ctx: ServerRequestContext[Any, Any] | None, member: Member, method: str,
                   params: Mapping[str, Any] | None, timeout: float) -> dict[str, Any]:
        """One request to the server, progress mapped back to the caller; the server's faults
        become JSON-RPC errors (never a crash, never a result the server did not send). What the
        caller is told names the server's key only; the details go to the log."""
        token = bridge.progress_token(params)
        on_progress = None
        if token is not None and ctx is not None:
            session, request_id = ctx.session, ctx.request_id

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                with contextlib.suppress(Exception):  # the caller's request may be answered already
                    await session.send_progress_notification(
                        token, progress, total, message, related_request_id=cast(Any, request_id))
        upstream = member.upstream
        try:
            with self._telemetry.upstream(member.key, method,
                                          bridge.upstream_params(params, modern=upstream.modern),
                                          http_headers(ctx) if ctx is not None else None) as sent:
                return await upstream.request(method, sent, timeout=timeout, on_progress=on_progress)
        except UpstreamUnavailable as exc:
            log.warning("server %s unavailable for %s: %s", upstream.label, method, exc)
            raise MCPError(types.INTERNAL_ERROR, f"server {member.key} is unavailable") from None
        except ValidationError:
            raise MCPError(types.INTERNAL_ERROR, f"server {member.key} sent an invalid result") from None

    async def _in_rounds(self, ctx: ServerRequestContext[Any, Any], member: Member, method: str,
                         params: Mapping[str, Any] | None, timeout: float) -> dict[str, Any]:
        """A 2026-07-28 client's call to a 2025-11-25 server: the server's requests come back as
        `input_required`, and the retry carrying the answers continues the same call there (the
        retry was decided by the guard again before it got here). A round belongs to its caller's
        principal, not its token: a client that refreshes its token mid-round continues."""
        credentials = self._credentials(ctx)
        identity = await self._authenticate(credentials) if credentials.token is not None else None
        caller = rounds.caller_key(credentials, identity)
        about = rounds.binding(method, params)
        p = dict(params or {})
        if p.get("requestState") is not None:
            return await self._rounds.resume(ctx, p["requestState"], caller, about,
                                             p.get("inputResponses"))
        p.pop("inputResponses", None)  # answers to nothing this server asked
        p.pop("requestState", None)

        def spawn(call: PendingCall) -> None:
            member.upstream.spawn(lambda: call.run(lambda: self.send(ctx, member, method, p, timeout)))
        return await self._rounds.start(ctx, caller, about, timeout, client_capabilities(ctx), spawn,
                                        member.key)

    async def _answer_rounds(self, ctx: ServerRequestContext[Any, Any], member: Member, method: str,
                             params: Mapping[str, Any] | None, result: dict[str, Any],
                             timeout: float) -> dict[str, Any]:
        """A 2026-07-28 server's `input_required` for a 2025-11-25 client: each input request is
        put to the caller on its request's stream, and the call retried with the answers."""
        for _ in range(MAX_INPUT_ROUNDS):
            if not is_input_required(result):
                return result
            asks = result.get("inputRequests")
            if asks is not None and not isinstance(asks, dict):
                raise MCPError(types.INTERNAL_ERROR, f"server {member.key} sent an invalid result")
            answers: dict[str, Any] = {}
            for key, ask in (asks or {}).items():
                if not isinstance(ask, dict) or not isinstance(ask.get("method"), str):
                    raise MCPError(types.INTERNAL_ERROR, f"server {member.key} sent an invalid result")
                answers[key] = await self._downstream.ask_caller(
                    ctx, ask["method"], dict(ask.get("params") or {}), timeout)
            if not answers:
                await anyio.sleep(STATE_ONLY_PAUSE)  # the server is working: ask again shortly
            retry = {k: v for k, v in (params or {}).items()
                     if k not in ("inputResponses", "requestState")}
            retry["inputResponses"] = answers
            if result.get("requestState") is not None:
                retry["requestState"] = result["requestState"]
            result = await self.send(ctx, member, method, retry, timeout)
        raise MCPError(types.INTERNAL_ERROR,
                       f"server {member.key} asked for input more than {MAX_INPUT_ROUNDS} times")
