"""Streamable HTTP at `/mcp`, framed by the gateway itself (no SDK transport, no starlette): POST a
message and read its answer (JSON, or SSE when something comes first), GET a session's stream,
DELETE it (a 2025-11-25 call's stream begins with a priming event, and a GET with `Last-Event-ID`
resumes one that was closed for polling, SEP-1699: `sse.Polled`); 2025-11-25 sessions by id,
2026-07-28 requests that stand alone; the Accept and protocol-version header checks, 404 for
another's session, each principal's sessions and streams bounded (the Host/Origin checks, on every
path, are the app's); a call that more scopes alone would allow is answered 403
`insufficient_scope` (SPEC §15, `denials.step_up`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from ...denials import send_step_up
from ...owner import Owner
from ...telemetry.metrics import RefusalReason
from .. import jsonrpc
from ..clients import Call, answered
from ..decide import STEP_UP
from ..dispatch import Dispatch, envelope
from ..errors import OverCap
from ..inbound import (
    ERROR_CODE_HTTP_STATUS,
    InboundLadderRejection,
    find_duplicated_routing_header,
    unsupported_protocol_version_rejection,
    without_ows,
)
from ..jsonrpc import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    REQUEST_CANCELLED,
    RpcError,
)
from .exchange import accepts, empty, read_body, read_headers, rpc_error, text
from .sessions import HttpSession, Sessions
from .sse import SSE_HEADERS, Receive, Reply, Send, Stream, Unanswered

POLLING_SINCE = "2025-11-25"  # the first version with SSE polling (SEP-1699)
WATCH_AFTER_SECONDS = 1.0  # a 2026-07-28 call running this long is cancelled if its client leaves
_STATUS = ERROR_CODE_HTTP_STATUS


class Streamable:
    """The `/mcp` endpoint of one gateway."""

    def __init__(self, dispatch: Dispatch, sessions: Sessions,
                 refused: Callable[[RefusalReason], None] = lambda _reason: None) -> None:
        self.dispatch = dispatch
        self.sessions = sessions
        self.refused = refused  # counts a refusal made before any decision, by reason (SPEC §13)
        self.unanswered = Unanswered(sessions.poll_seconds)
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send,
                       owner: Owner | None) -> None:
        headers = read_headers(scope["headers"])
        body = await read_body(receive, headers, send)
        if body is None:
            return
        version = headers.get("mcp-protocol-version")
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            await self._modern(scope, headers, body, receive, send, owner)
            return
        session_id = headers.get("mcp-session-id")
        if session_id is not None:
            session = self.sessions.get(session_id)
            if session is None or session.owner != owner:  # another's session does not exist
                self.refused("session")
                await rpc_error(send, 404, RpcError(INVALID_REQUEST, "Session not found"))
                return
            await self._in_session(session, scope, headers, body, receive, send, opening=False)
            return
        try:
            session = self.sessions.open(owner)
        except OverCap as over:
            await self._over_cap(send, over)
            return
        status = await self._in_session(session, scope, headers, body, receive, send, opening=True)
        if status is None or status >= 400:  # nothing was established: no session kept
            self.sessions.end(session)

    # -- 2025-11-25: sessions --------------------------------------------------------------------
    async def _in_session(self, session: HttpSession, scope: dict[str, Any],
                          headers: dict[str, str], body: bytes, receive: Receive, send: Send, *,
                          opening: bool) -> int | None:
        """Serve one request of a session; the HTTP status it was answered with."""
        mine = [(b"mcp-session-id", session.id.encode())]
        method = scope["method"]
        refused = self._refused(method, headers)
        if refused is not None:
            await text(send, *refused)
            return refused[0]
        if session.ended:
            self.refused("session")
            return await rpc_error(send, 404, RpcError(
                INVALID_REQUEST, "Not Found: Session has been terminated"), mine)
        if method not in ("POST", "GET", "DELETE"):
            return await rpc_error(send, 405, RpcError(INVALID_REQUEST, "Method Not Allowed"),
                                    [*mine, (b"allow", b"GET, POST, DELETE")])
        has_json, has_sse = accepts(headers)
        if method == "GET" and not has_sse:
            return await rpc_error(send, 406, RpcError(
                INVALID_REQUEST, "Not Acceptable: Client must accept text/event-stream"), mine)
        if method == "POST" and not (has_json and has_sse):
            return await rpc_error(send, 406, RpcError(
                INVALID_REQUEST, "Not Acceptable: Client must accept both application/json and "
                                 "text/event-stream"), mine)
        message: Any = None
        if method == "POST":
            message, status = await _message(headers, body, send, mine)
            if status is not None:
                return status
        if opening and not (method == "POST" and message.get("method") == "initialize"):
            return await rpc_error(send, 400, RpcError(INVALID_REQUEST,
                                                        "Bad Request: Missing session ID"), mine)
        session.begin()
        try:
            if method == "DELETE":
                self.sessions.end(session)
                await empty(send, 200, mine)
                return 200
            if method == "GET":
                resumed = headers.get("last-event-id")
                if resumed is not None:
                    return await self._resume(session, resumed, receive, send, mine)
                return await self._get(session, receive, send, mine)
            return await self._post(session, message, headers, send, mine)
        finally:
            session.done()

    def _refused(self, method: str, headers: Mapping[str, str]) -> tuple[int, bytes] | None:
        if method == "POST" and not headers.get("content-type", "").lower().startswith(
                "application/json"):
            return 400, b"Invalid Content-Type header"
        return None

    async def _over_cap(self, send: Send, over: OverCap, rid: jsonrpc.RequestId | None = None,
                        headers: list[tuple[bytes, bytes]] | None = None) -> None:
        self.refused("over_cap")
        await rpc_error(send, over.status, RpcError(INTERNAL_ERROR, over.message), headers, rid=rid)

    async def _get(self, session: HttpSession, receive: Receive, send: Send,
                   mine: list[tuple[bytes, bytes]]) -> int:
        if session.stream is not None and session.stream.open:
            return await rpc_error(send, 409, RpcError(
                INVALID_REQUEST, "Conflict: Only one SSE stream is allowed per session"), mine)
        try:
            self.sessions.hold_stream(session.owner)
        except OverCap as over:
            await self._over_cap(send, over, headers=mine)
            return over.status
        stream = session.stream = Stream(send)
        session.client.standalone = stream
        try:
            await stream.serve(receive, mine)
        finally:
            self.sessions.release_stream(session.owner)
            if session.stream is stream:
                session.stream = None
                session.client.standalone = None
        return 200

    async def _resume(self, session: HttpSession, last_event_id: str, receive: Receive,
                      send: Send, mine: list[tuple[bytes, bytes]]) -> int:
        """A GET with `Last-Event-ID`: the session's stream it names, from the event after it
        (one of this session's alone: its principal's). A stream not (or no longer) kept ends at
        once, as the MCP SDK's servers answer one they have no events of. It counts as one of the
        principal's long-lived streams while it is open."""
        try:
            self.sessions.hold_stream(session.owner)
        except OverCap as over:
            await self._over_cap(send, over, headers=mine)
            return over.status
        try:
            found = session.polled.find(last_event_id)
            if found is None:
                await send({"type": "http.response.start", "status": 200,
                            "headers": [*SSE_HEADERS[:3], *mine]})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            else:
                backlog, after = found
                await backlog.serve(after, receive, send, mine)
        finally:
            self.sessions.release_stream(session.owner)
        return 200

    async def _post(self, session: HttpSession, message: dict[str, Any], headers: dict[str, str],
                    send: Send, mine: list[tuple[bytes, bytes]]) -> int:
        connection = session.connection
        if jsonrpc.kind(message) != "request":
            await empty(send, 202, mine)
            await connection.received(message, self.dispatch.notified, headers)
            return 202
        # SSE polling (SEP-1699) is 2025-11-25's: an older client, or one not yet initialized,
        # gets no priming event and no stream closed for polling.
        polls = session.client.params is not None and session.client.version >= POLLING_SINCE
        reply = Reply(send, mine, self.unanswered, self.loop, sse=True,
                      polled=session.polled if polls else None)
        call = Call(message["method"], message.get("params"), message["id"], session.client.version,
                    reply, session.client, headers)
        try:
            answer = await connection.serve(call, self.dispatch.answer)
            if answer is None:  # the client cancelled it: its stream ends with that
                answer = jsonrpc.error(call.id, RpcError(REQUEST_CANCELLED, "Request cancelled"))
            elif await _stepped_up(call, reply, send, mine):
                return 403
            await reply.finish(answer)
            return 200
        finally:
            reply.abandon()  # (answered: nothing; else its timer and its place are let go)

    # -- 2026-07-28: requests that stand alone ---------------------------------------------------
    async def _modern(self, scope: dict[str, Any], headers: dict[str, str], body: bytes,
                      receive: Receive, send: Send, owner: Owner | None) -> None:
        refused = self._refused(scope["method"], headers)
        if refused is not None:
            await text(send, *refused)
            return
        if scope["method"] != "POST":
            await empty(send, 405, [(b"allow", b"POST")], json=False)
            return
        has_json, has_sse = accepts(headers)
        if not (has_json and has_sse):
            await empty(send, 406, [], json=False)
            return
        try:
            message = jsonrpc.loads(body)
        except ValueError:
            await rpc_error(send, 400, RpcError(PARSE_ERROR, "Parse error"))
            return
        if isinstance(message, dict) and "id" not in message:
            if jsonrpc.kind(message) != "notification":
                await rpc_error(send, 400, _INVALID_BODY)
            elif (unserved := unsupported_protocol_version_rejection(
                    headers.get("mcp-protocol-version", ""))) is not None:
                await rpc_error(send, 400, unserved.error())
            else:
                await empty(send, 202, [], json=False)  # no client notification acts here
            return
        if jsonrpc.kind(message) != "request":
            await rpc_error(send, 400, _INVALID_BODY)
            return
        rid = message["id"]
        try:
            version = self._checked(message, headers, scope["headers"])
        except RpcError as exc:
            await rpc_error(send, _STATUS.get(exc.code, 200), exc, rid=rid)
            return
        reply = Reply(send, [], self.unanswered, self.loop)
        call = Call(message["method"], message.get("params"), rid, version, reply, None, headers)
        try:
            answer = await self._watched(call, receive, owner)
        except OverCap as over:
            await self._over_cap(send, over, rid)
            return
        call.closed = True
        if answer is None:
            reply.abandon()
            return
        if await _stepped_up(call, reply, send, []):
            return
        error = answer.get("error")
        await reply.finish(answer, _STATUS.get(error["code"], 200) if error else 200)

    def _checked(self, message: dict[str, Any], headers: dict[str, str],
                 raw: list[tuple[bytes, bytes]]) -> str:
        """The request's version once its envelope and headers pass their checks (RpcError when
        they do not). A field value is read without the optional whitespace around it (RFC 9110
        §5.5): a request refused for a header is checked again with its values so read, and one
        without such whitespace pays nothing for it."""
        try:
            return self._envelope(message, headers, raw)
        except RpcError as exc:
            trimmed = without_ows(raw) if exc.code == HEADER_MISMATCH else None
            if trimmed is None:
                raise
        return self._envelope(message, read_headers(trimmed), trimmed)

    def _envelope(self, message: dict[str, Any], headers: dict[str, str],
                  raw: list[tuple[bytes, bytes]]) -> str:
        _once(raw)
        version = envelope(message, headers)
        mismatch = self.dispatch.param_refusal(message, raw)
        if mismatch is not None:
            raise mismatch
        return version

    async def _watched(self, call: Call, receive: Receive, owner: Owner | None
                       ) -> dict[str, Any] | None:
        """The call's answer, or None when its client went away first (which cancels it: at
        2026-07-28 closing the stream is how a client cancels). A listen stream is one of its
        principal's long-lived streams: OverCap, before it runs, beyond their bound."""
        listening = call.method == "subscriptions/listen"
        if listening:
            self.sessions.hold_stream(owner)
        loop = self.loop
        task = asyncio.current_task(loop)
        assert task is not None
        watcher: list[asyncio.Task[None]] = []

        def watch() -> None:
            watcher.append(loop.create_task(_gone(receive, task, call)))

        timer = (loop.call_soon(watch) if listening else loop.call_later(WATCH_AFTER_SECONDS, watch))
        try:
            return await answered(call, self.dispatch.answer)
        finally:
            timer.cancel()
            for each in watcher:
                each.cancel()
            if listening:
                self.sessions.release_stream(owner)


def _once(raw: list[tuple[bytes, bytes]]) -> None:
    """A routing header given twice is refused: readers of the first and the last would differ."""
    twice = find_duplicated_routing_header((n.decode("latin-1"), "") for n, _ in raw)
    if twice is not None:
        raise InboundLadderRejection(HEADER_MISMATCH, f"{twice} header appears more than once").error()


_INVALID_BODY = RpcError(INVALID_REQUEST, "Body must be a single JSON-RPC request or notification object")


async def _stepped_up(call: Call, reply: Reply, send: Send, headers: list[tuple[bytes, bytes]]
                      ) -> bool:
    """Answer the 403 step-up the pipeline marked the call for (`decide.STEP_UP`), unless its
    response already began as a stream: then its in-band denial (with the envelope) stands."""
    answer = call.extra.get(STEP_UP)
    if answer is None or reply.streaming:
        return False
    reply.abandon()
    await send_step_up(send, answer, headers)
    return True


async def _gone(receive: Receive, task: asyncio.Task[Any], call: Call) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    call.extra["cancelled"] = True  # at 2026-07-28 closing the stream is the cancellation
    task.cancel()


async def _message(headers: Mapping[str, str], body: bytes, send: Send,
                   mine: list[tuple[bytes, bytes]]) -> tuple[Any, int | None]:
    """The POSTed JSON-RPC message, or the status it was refused with."""
    kinds = [p.strip() for p in headers.get("content-type", "").split(";")[0].split(",")]
    if "application/json" not in kinds:
        return None, await rpc_error(send, 415, RpcError(
            INVALID_REQUEST, "Unsupported Media Type: Content-Type must be application/json"), mine)
    try:
        message = jsonrpc.loads(body)
    except ValueError as exc:
        return None, await rpc_error(send, 400, RpcError(PARSE_ERROR, f"Parse error: {exc}"), mine)
    if jsonrpc.kind(message) is None:
        return None, await rpc_error(send, 400, RpcError(
            INVALID_PARAMS, "Validation error: not a single JSON-RPC 2.0 message"), mine)
    return message, None


