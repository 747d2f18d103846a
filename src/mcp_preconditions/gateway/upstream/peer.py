"""The gateway's JSON-RPC session with one server, over one link (a stdio process or streamable HTTP):
request ids and their answers, timeouts and cancellation told to the server, progress mapped back,
the server's own requests (at most MAX_SERVING at once) and notifications handed to the gateway.
What the link or the server fails with is an UpstreamError (`errors.py`); a server's JSON-RPC
error answer is typed here (`errors.answered`): PeerFailed for its -32603, else PeerAnswered. A
notification the server does not accept within NOTIFY_SECONDS is given up.

An answer is delivered only to the request that sent it: matched by its id on this session (an
HTTP link hands on only the answer to the request whose POST carried it); a second answer, a late
one (a request given up) and one to an id nobody here sent are dropped and counted (`dropped`).
What the server sends on a caller's session, or on a caller's request's stream, is that caller's:
it goes to the `OwnerHooks` with their owner, never to the gateway's own hooks (SPEC §14). What it
asks on one request's own stream is for whoever that request was made for (its `origin`, a client's
call: `OriginHooks`), never a guess among the calls in flight.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable, Hashable, Iterator, Mapping
from typing import Any, NamedTuple, Protocol

from ...telemetry.metrics import DropReason
from .. import jsonrpc
from ..errors import UpstreamClosed, UpstreamError, UpstreamTimeout, answered
from ..jsonrpc import METHOD_NOT_FOUND, Message, RpcError

log = logging.getLogger("mcp_preconditions.gateway")

NOTIFY_SECONDS = 5.0  # for a server to accept a notification (or the gateway's answer to it)
MAX_SERVING = 64  # a server's requests answered at once; more are dropped (it times them out)

SUBSCRIPTION_ID_META_KEY = "io.modelcontextprotocol/subscriptionId"

# Raw (method, params) -> raw result: how the gateway answers requests the server sends.
RequestHook = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
# A server's notification, handled at once (in the order the server sent them).
NotificationHook = Callable[[str, dict[str, Any]], None]
# Progress of one request (its caller is told at once, before the request's answer).
ProgressHook = Callable[[float, float | None, str | None], None]
# Why an answer from the server was dropped (the label of upstream_dropped_total{reason}).
Dropped = DropReason


class OriginHooks(NamedTuple):
    """Where what comes on one request's own stream goes: to whoever the request was made for (its
    `origin`: opaque here, a client's call). The server's requests (sampling, elicitation, roots),
    and the server closing the stream mid-call for its client to poll (SEP-1699), with the seconds
    it asked the client to wait before reconnecting."""

    request: Callable[[object, str, dict[str, Any]], Awaitable[dict[str, Any]]]
    polled: Callable[[object, float], None]


class OwnerHooks(NamedTuple):
    """Where what a server sends for one caller goes: its requests (sampling, elicitation, roots)
    and notifications, with whose they are (the caller's owner key, as their session's); and what
    comes on a request's own stream, to that request's origin (whoever's session it came on)."""

    request: Callable[[Hashable, str, dict[str, Any]], Awaitable[dict[str, Any]]]
    notification: Callable[[Hashable, str, dict[str, Any]], None]
    origin: OriginHooks | None = None


class Polled(NamedTuple):
    """What a link hands on in place of a message when the server closed a request's event stream
    before its answer, for its client to poll it (SEP-1699): the link reconnects after `retry`
    seconds; the request's origin is told, so that its own client may poll too."""

    retry: float
# Notifications that are this session's own business, never the clients': progress reaches its
# caller through the request's hook, cancellations and acknowledgements are answered here.
_SESSION_ONLY = frozenset({"notifications/cancelled", "notifications/subscriptions/acknowledged",
                           "notifications/progress"})


class Link(Protocol):
    """A connection to a server that carries JSON-RPC messages both ways."""

    async def send(self, message: Message, *, modern: bool,
                   headers: Mapping[str, str] | None = None, owner: Hashable | None = None
                   ) -> None:
        """Deliver one message (an HTTP link: with `headers` in place of its own, when given, for
        `owner`, a caller); a request's answer comes back through the session's `received`.
        Raises UpstreamError (or OSError) when it cannot."""
        ...

    def abandon(self, request_id: jsonrpc.RequestId) -> bool:
        """Stop waiting for a request's answer where the link can say so itself (a 2026-07-28
        HTTP request is cancelled by closing its stream); False: tell the server instead."""
        ...


class Peer:
    """One JSON-RPC session over one link. `envelope` (2026-07-28 servers) is stamped into every
    request's `_meta`; `received` takes every message the link reads. `owner`: whose session it
    is (a caller's: everything the server sends on it goes to `for_owner`), None for the gateway's
    own, where a caller's request (2026-07-28: no sessions) names its owner and what comes on its
    stream goes to `for_owner` likewise. `ids`: where request ids come from (sessions that share
    connections share one, so no two callers' requests on one connection have one id)."""

    def __init__(self, link: Link, label: str, on_request: RequestHook,
                 on_notification: NotificationHook, envelope: dict[str, Any] | None = None, *,
                 owner: Hashable | None = None, for_owner: OwnerHooks | None = None,
                 ids: Iterator[int] | None = None) -> None:
        self.link = link
        self.label = label
        self.envelope = envelope
        self.owner = owner
        self._on_request = on_request
        self._on_notification = on_notification
        self._for_owner = for_owner
        self._ids = ids if ids is not None else itertools.count(1)
        self._next = 0  # the last id this session sent
        # A caller's requests on a session that is not theirs alone (2026-07-28), by request id.
        self._owners: dict[jsonrpc.RequestId, Hashable] = {}
        # Whom each request was made for (`origin`), by request id: what its stream carries is theirs.
        self._origins: dict[jsonrpc.RequestId, object] = {}
        self.dropped: Callable[[Dropped], None] = ignored
        self._pending: dict[jsonrpc.RequestId, asyncio.Future[dict[str, Any]]] = {}
        self._progress: dict[jsonrpc.RequestId, ProgressHook] = {}
        self._serving: dict[jsonrpc.RequestId, asyncio.Task[None]] = {}
        # Listen streams (2026-07-28) waiting for the server's acknowledgement, by request id.
        self.acks: dict[jsonrpc.RequestId, Callable[[], None]] = {}
        self.closed = False
        self.idle = asyncio.Event()  # set while no request is pending (a test's event: `busy` ended)
        self.idle.set()

    @property
    def busy(self) -> bool:
        """Whether a request is pending on it (from before it is sent until it ends)."""
        return bool(self._pending)

    # -- out ---------------------------------------------------------------------------------------
    def next_id(self) -> int:
        self._next = rid = next(self._ids)
        return rid

    async def request(self, method: str, params: Mapping[str, Any] | None, *, timeout: float | None,
                      on_progress: ProgressHook | None = None,
                      request_id: jsonrpc.RequestId | None = None,
                      headers: Mapping[str, str] | None = None,
                      owner: Hashable | None = None, origin: object | None = None
                      ) -> dict[str, Any]:
        """Send one request and wait for its result (the server's raw dict). PeerAnswered or
        PeerFailed: the server's own error answer (`errors.answered`); UpstreamTimeout,
        UpstreamClosed (the link is lost meanwhile) or whatever else the link failed it with.
        `headers`: the request's own, in place of the link's (a caller's credential); `owner`:
        that caller, on a session that is not theirs alone; `origin`: whom it is made for (what
        the server asks on its stream goes to them)."""
        if self.closed:
            raise UpstreamClosed("Connection closed")
        rid = self.next_id() if request_id is None else request_id
        out = dict(params) if params is not None else {}
        if on_progress is not None or self.envelope is not None:
            meta = dict(out.get("_meta") or {})
            if on_progress is not None:  # the request id doubles as the progress token
                meta["progressToken"] = rid
                self._progress[rid] = on_progress
            if self.envelope is not None:
                meta.update(self.envelope)
            out["_meta"] = meta
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        self.idle.clear()
        if owner is not None:
            self._owners[rid] = owner
        if origin is not None:
            self._origins[rid] = origin
        sent = False
        try:
            async with asyncio.timeout(timeout):
                sent = True
                await self.link.send(jsonrpc.request(rid, method, out or None),
                                     modern=self.envelope is not None, headers=headers,
                                     owner=owner)
                return await future
        except TimeoutError:  # (the wait was cancelled: a future cancelled is not an answer)
            if not future.done() or future.cancelled():
                await self._cancel(rid, f"timed out after {timeout}s")
            raise UpstreamTimeout(f"Request {method!r} timed out") from None
        except asyncio.CancelledError:
            if sent and (not future.done() or future.cancelled()):
                await asyncio.shield(self._cancel(rid, "caller cancelled"))
            raise
        except OSError:
            raise UpstreamClosed("Connection closed") from None
        finally:
            self._pending.pop(rid, None)
            if not self._pending:
                self.idle.set()
            self._progress.pop(rid, None)
            if owner is not None:
                self._owners.pop(rid, None)
            if origin is not None:
                self._origins.pop(rid, None)

    async def notify(self, method: str, params: Mapping[str, Any] | None) -> None:
        """Send a notification; one the server does not accept in NOTIFY_SECONDS is given up
        (logged: the session carries on). The link's loss is seen by its reader."""
        if not self.closed:
            await self._post(jsonrpc.notification(method, dict(params) if params is not None
                                                  else None), method)

    async def _post(self, message: Message, what: str) -> None:
        try:
            async with asyncio.timeout(NOTIFY_SECONDS):
                await self.link.send(message, modern=self.envelope is not None)
        except TimeoutError:
            log.warning("upstream %s: %s not accepted within %g s; given up", self.label, what,
                        NOTIFY_SECONDS)
        except (OSError, UpstreamError) as exc:
            log.debug("upstream %s: %s not sent: %s", self.label, what, describe(exc))

    async def _cancel(self, rid: jsonrpc.RequestId, reason: str) -> None:
        """Tell the server a request is abandoned (courtesy; it may have finished already)."""
        if self.closed or self.link.abandon(rid):
            return
        await self._post(jsonrpc.notification("notifications/cancelled",
                                              {"requestId": rid, "reason": reason}),
                         "notifications/cancelled")

    def close(self) -> None:
        """The link is gone: every request waiting on it fails at once."""
        self.closed = True
        for future in self._pending.values():
            if not future.done():
                future.set_exception(UpstreamClosed("Connection closed"))
        for task in self._serving.values():
            task.cancel()

    # -- in ----------------------------------------------------------------------------------------
    def received(self, message: Any, via: jsonrpc.RequestId | None = None) -> None:
        """One message from the server, handled in the order it came; `via`: the request whose
        stream carried it (an HTTP link), whose caller it belongs to."""
        what = jsonrpc.kind(message)
        if what in ("response", "error"):
            rid = message.get("id")
            future = self._pending.get(rid)
            if future is None or future.done():
                self._drop(rid, future)
                return
            if what == "response":
                future.set_result(message["result"])
            else:
                future.set_exception(answered(message["error"]))
            return
        owner = self.owner if via is None or not self._owners else self._owners.get(via, self.owner)
        if what == "notification":
            self._notification(message["method"], message.get("params") or {}, owner)
        elif what == "request":
            rid = message["id"]
            if len(self._serving) >= MAX_SERVING or rid in self._serving:
                log.warning("upstream %s: request %s dropped (%d of its requests in progress, or "
                            "its id is)", self.label, message["method"], len(self._serving))
                return
            origin = self._origins.get(via) if via is not None else None
            task = asyncio.get_running_loop().create_task(
                self._serve(rid, message["method"], message.get("params") or {}, owner, origin))
            self._serving[rid] = task
        elif isinstance(message, Polled):
            self._polled(via, message.retry)
        else:
            log.warning("upstream %s: unreadable message: not a JSON-RPC 2.0 message", self.label)

    def _polled(self, via: jsonrpc.RequestId | None, retry: float) -> None:
        """The server closed `via`'s stream mid-call, for polling: its origin hears of it."""
        origin = self._origins.get(via) if via is not None else None
        hooks = self._for_owner.origin if self._for_owner is not None else None
        if origin is not None and hooks is not None:
            hooks.polled(origin, retry)

    def _drop(self, rid: Any, future: asyncio.Future[dict[str, Any]] | None) -> None:
        """An answer nothing here waits for: a second one (duplicate), one to a request given up
        or answered on its own stream meanwhile (late: an id this session sent), or one to an id
        it never sent (unmatched). Counted, never delivered to anyone."""
        if future is not None:
            reason: Dropped = "duplicate"
        elif (isinstance(rid, int) and not isinstance(rid, bool) and 0 < rid <= self._next) \
                or (isinstance(rid, str) and rid.startswith("listen-")):
            reason = "late"
        else:
            reason = "unmatched"
        log.debug("upstream %s: an answer dropped (%s)", self.label, reason)
        self.dropped(reason)

    def _notification(self, method: str, params: dict[str, Any], owner: Hashable | None) -> None:
        if method == "notifications/progress":
            hook = self._progress.get(params.get("progressToken"))  # type: ignore[arg-type]
            progress, total, text = params.get("progress"), params.get("total"), params.get("message")
            if hook is not None and isinstance(progress, int | float) and not isinstance(progress, bool):
                hook(float(progress), float(total) if isinstance(total, int | float) else None,
                     text if isinstance(text, str) else None)
        elif method == "notifications/subscriptions/acknowledged":
            meta = params.get("_meta")
            sid = meta.get(SUBSCRIPTION_ID_META_KEY) if isinstance(meta, dict) else None
            ack = self.acks.get(sid) if jsonrpc.is_id(sid) else None
            if ack is not None:
                ack()
        elif method == "notifications/cancelled":
            task = self._serving.get(params.get("requestId"))  # type: ignore[arg-type]
            if task is not None:
                task.cancel()
        if method in _SESSION_ONLY:
            return
        if owner is None:
            self._on_notification(method, params)
        elif self._for_owner is not None:  # a caller's: to them alone (never the gateway's hook)
            self._for_owner.notification(owner, method, params)

    async def _serve(self, rid: jsonrpc.RequestId, method: str, params: dict[str, Any],
                     owner: Hashable | None, origin: object | None = None) -> None:
        """Answer one request of the server's (sampling, elicitation, roots; ping here): on a
        request's own stream, whoever that request was made for answers it (`origin`); else the
        gateway's hook, or, on a caller's session or stream, the caller's."""
        hooks = self._for_owner.origin if self._for_owner is not None else None
        try:
            if method == "ping":
                answer = jsonrpc.response(rid, {})
            elif origin is not None and hooks is not None:
                answer = jsonrpc.response(rid, await hooks.request(origin, method, params))
            elif owner is None:
                answer = jsonrpc.response(rid, await self._on_request(method, params))
            elif self._for_owner is not None:
                answer = jsonrpc.response(rid, await self._for_owner.request(owner, method, params))
            else:
                raise unknown_method(method)
        except RpcError as exc:
            answer = jsonrpc.error(rid, exc)
        except asyncio.CancelledError:
            return  # the server cancelled it (or the link is gone): nothing is answered
        except Exception as exc:  # the client's failure is not the server's: it gets an error
            answer = jsonrpc.error(rid, RpcError(jsonrpc.INTERNAL_ERROR, f"gateway: {describe(exc)}"))
        finally:
            self._serving.pop(rid, None)
        await self._post(answer, f"the answer to {method}")


async def nobody_answers(*args: Any) -> dict[str, Any]:
    """A hook's default for a server's request (its method the last argument but one): until the
    gateway sets the hook, no client can answer it."""
    raise RpcError(-32600, f"no client can answer {args[-2]}")


def ignored(*_args: Any) -> None:
    """A hook's default for what a server sends that needs no answer: nothing is done."""


async def ignored_now() -> None:
    """`on_connect`'s default: nothing to do when a session comes up."""


def unknown_method(method: str) -> RpcError:
    return RpcError(METHOD_NOT_FOUND, "Method not found", method)


def describe(exc: BaseException) -> str:
    """An exception in one line for the gateway's log (the one exception a group carries)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 300 else text[:299] + "…"
