"""A server the gateway reaches over streamable HTTP: each message POSTed on a pool of keep-alive
connections, its answer read as JSON or from an SSE stream (handed on the moment it arrives, the rest
of the stream drained unread, to keep its connection), the session's GET stream for what the server
sends unasked (2025-11-25), the routing and `Mcp-Param-*` headers of 2026-07-28, and DELETE when the
gateway stops.

What comes back on a request's POST must be that request's answer: anything else fails that request,
not the session. An answer is handed on only on the POST (connection) of the request it answers,
to this link's session, with that request's id; a second one, one with another id, and any on
the GET stream are dropped and counted (`dropped`). What else comes on a request's stream is
handed on with that request's id (`via`: whose it is). The session is lost only for real: a 404
for its id, or connections refused CONNECT_FAILURES times in a row. A 401 or 403 with
`WWW-Authenticate` is the server refusing the credential a request carried (`UpstreamChallenged`):
its body is never read as an answer.

A 2025-11-25 server may close a request's event stream before its answer, after an event with an
id, for its client to poll (SEP-1699): the gateway reconnects with a GET and `Last-Event-ID` after the
server's `retry` (at most RETRY_MAX_SECONDS) and reads on, as a client does; the request itself is
never sent again, and RESUMES reconnections in a row that bring nothing new fail it.

A request may carry headers of its own in place of the link's (a caller's credential, SPEC §14);
links may share one pool of connections (every caller's session with one server), where each
request counts against its owner's share (`Pool.share`): the link's own (a caller's session), or
the one a request names (a caller's request on the gateway's 2026-07-28 link). What lasts (the GET
stream, a `subscriptions/listen` request) goes on a pool of its own (`streams`), so streams never
hold the connections requests need.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from mcp_types.version import LATEST_MODERN_VERSION

from .. import jsonrpc
from ..errors import (
    UpstreamChallenged,
    UpstreamClosed,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamRefused,
    UpstreamSessionGone,
    UpstreamUnavailable,
)
from ..inbound import (
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    NAME_BEARING_METHODS,
    encode_header_value,
    find_invalid_x_mcp_header,
    mcp_param_headers,
    x_mcp_header_map,
)
from ..jsonrpc import Message
from .client import DEFAULT_BOUNDS, Bounds, Pool, Response, field_problem
from .peer import Dropped, Polled, ignored
from .sse import Decoder, events

log = logging.getLogger("mcp_preconditions.gateway")

ACCEPT = "application/json, text/event-stream"
GET_RETRY_SECONDS = 1.0
GET_ATTEMPTS = 3  # consecutive failed GET streams before the gateway stops asking for one
CONNECT_FAILURES = 3  # consecutive refused connections before the session counts as lost
MAX_STREAMS = 1000  # per server: long-lived streams (GET, listen) open at once, beside requests
RESUMES = 3  # reconnections in a row to a request's stream that bring no new event: it fails
RETRY_SECONDS = 1.0  # before reconnecting to a request's stream, when the server named no delay
RETRY_MAX_SECONDS = 10.0  # a server's `retry` beyond this is cut to it
_SESSION_ID = re.compile(r"[\x21-\x7e]+")  # visible ASCII, as the transport requires
_BASE = {"accept": ACCEPT, "content-type": "application/json"}


class HttpLink:
    """One session (2025-11-25) or one series of self-contained requests (2026-07-28) with a server."""

    def __init__(self, url: str, headers: Mapping[str, str],
                 received: Callable[[Any, jsonrpc.RequestId | None], None],
                 label: str, bounds: Bounds = DEFAULT_BOUNDS, pool: Pool | None = None,
                 owner: Hashable | None = None, streams: Pool | None = None, *,
                 refused: Callable[[str], None] | None = None) -> None:
        for name, value in headers.items():
            problem = field_problem(name, value)
            if problem is not None:
                raise ValueError(f"header {name!r}: {problem}")
        self._own_pool = pool is None  # a shared pool is closed by its owner
        self._pool = pool if pool is not None else Pool(url, bounds=bounds)
        self._own_streams = streams is None
        self._streams_pool = streams if streams is not None else Pool(url, bounds=bounds,
                                                                      limit=MAX_STREAMS)
        self.url = url
        self.bounds = bounds
        self.owner = owner  # whose session this is (None: the gateway's own)
        self.dropped: Callable[[Dropped], None] = ignored
        self._headers = {**_BASE, **headers}
        self._challenged = refused  # told when the server refuses the link's own headers
        self._received = received
        self._label = label
        self.session_id: str | None = None
        self.protocol_version: str | None = None  # sent as a header once negotiated
        self.modern = False  # 2026-07-28: no session, every request names itself in headers
        self.lost = asyncio.Event()
        self._streams: dict[jsonrpc.RequestId, Response] = {}
        self._listening: asyncio.Task[None] | None = None
        self._refused = 0  # connections refused in a row
        self._param_maps: dict[str, dict[tuple[str, ...], str]] = {}  # tool -> its Mcp-Param-* map

    def _with_session(self, own: Mapping[str, str] | None = None) -> dict[str, str]:
        """The link's headers, or the base ones and `own` (a caller's credential instead of the
        link's static headers: never both), plus the session's."""
        headers = dict(self._headers) if own is None else {**_BASE, **own}
        if self.session_id is not None:
            headers["mcp-session-id"] = self.session_id
        if self.protocol_version is not None:
            headers[MCP_PROTOCOL_VERSION_HEADER] = self.protocol_version
        return headers

    def _headers_of(self, message: Message, modern: bool, own: Mapping[str, str] | None = None
                    ) -> dict[str, str]:
        headers = self._with_session(own)
        method = message.get("method")
        params = message.get("params") or {}
        if modern and isinstance(method, str):
            headers[MCP_PROTOCOL_VERSION_HEADER] = LATEST_MODERN_VERSION
            headers[MCP_METHOD_HEADER] = method
            named = params.get(NAME_BEARING_METHODS.get(method, ""))
            if isinstance(named, str):
                headers[MCP_NAME_HEADER] = encode_header_value(named)
            if method == "tools/call":
                headers.update(self._param_headers(params))
        elif method == "initialize" and isinstance(version := params.get("protocolVersion"), str):
            # the opening says its version and method as a 2026-07-28 request does (handshake.py)
            headers[MCP_PROTOCOL_VERSION_HEADER] = version
            headers[MCP_METHOD_HEADER] = method
        meta = params.get("_meta")
        if isinstance(meta, dict) and "traceparent" in meta:  # the trace context in a header too,
            from ...telemetry.gateway import carrier  # as HTTP servers and proxies read it

            headers.update(carrier({"_meta": meta}))
        return headers

    async def _request(self, method: str, headers: Mapping[str, str], body: bytes = b"",
                       owner: Hashable | None = None, lasting: bool = False) -> Response:
        pool = self._streams_pool if lasting else self._pool
        try:
            response = await pool.request(method, headers, body,
                                          self.owner if owner is None else owner)
        except UpstreamUnavailable:
            self._refused += 1
            if self._refused >= CONNECT_FAILURES:
                self.lost.set()  # the server is gone: the session is started again, with backoff
            raise
        except ValueError as exc:  # a header that cannot be written: refused, nothing is sent
            raise UpstreamError(str(exc)) from None
        self._refused = 0
        return response

    async def send(self, message: Message, *, modern: bool = False,
                   headers: Mapping[str, str] | None = None, owner: Hashable | None = None
                   ) -> None:
        """POST one message (with `headers` in place of the link's own, when given; of `owner`'s,
        when it is a caller's request on the gateway's link). A request's answer goes to
        `received` as soon as it arrives; an UpstreamError fails this request alone (the session
        stays unless it is lost for real)."""
        method = message.get("method")
        response = await self._request("POST", self._headers_of(message, modern, headers),
                                       jsonrpc.dumps(message), owner,
                                       method == "subscriptions/listen")
        try:
            if method == "initialize" and "mcp-session-id" in response.headers:
                self.session_id = _session_id(response.headers["mcp-session-id"])
            if response.status == 404 and self.session_id is not None and not modern:
                self.lost.set()  # the server ended the session (restarted, expired)
                raise UpstreamSessionGone("the server ended the session")
            rid = message.get("id") if isinstance(method, str) else None
            if rid is None:  # a notification, or an answer to the server: nothing comes back
                await response.read()
                return
            await self._answer(response, rid, message, headers, owner)
        except UpstreamChallenged as exc:
            if headers is None and self._challenged is not None and exc.challenge is not None:
                self._challenged(exc.challenge)  # the link's own credential, not a caller's
            raise
        finally:
            response.close()

    async def _answer(self, response: Response, rid: jsonrpc.RequestId, message: Message,
                      headers: Mapping[str, str] | None, owner: Hashable | None) -> None:
        status = response.status
        if status in (401, 403) and "www-authenticate" in response.headers:
            # the credential refused: nothing ran, nothing to read
            raise UpstreamChallenged(status, response.headers["www-authenticate"])
        kind = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if status in (202, 204):
            raise UpstreamProtocolError(f"the server answered a request with HTTP {status} and no "
                                        "message")
        if kind == "text/event-stream" and status < 300:
            decoder = Decoder(self.bounds.event, self.bounds.line)
            if not await self._events(response, decoder, rid, message):
                await self._resume(decoder, rid, message, headers, owner)
            return
        body = await response.read()
        if kind == "application/json" and body and self._deliver(body, rid, message, strict=True):
            return
        if status >= 400:
            raise UpstreamRefused(status)
        raise UpstreamProtocolError("the server's answer was not a JSON-RPC answer to the request")

    async def _events(self, response: Response, decoder: Decoder, rid: jsonrpc.RequestId,
                      message: Message) -> bool:
        """Read a request's event stream, each event handed on as it arrives; whether it held the
        answer (then the rest of the stream is not waited for: it is drained unread, to keep the
        connection). A stream already whole (the usual answer to a call) is read without waiting."""
        if response.complete:  # the server answered and ended the stream in what has come
            for piece in response.pieces():
                for data in decoder.feed(piece):
                    if self._deliver(data, rid, message):
                        return True
            return False
        self._streams[rid] = response
        try:
            async with contextlib.aclosing(events(response.stream(), decoder)) as stream:
                async for data in stream:
                    if self._deliver(data, rid, message):
                        response.drain()
                        return True
        finally:
            self._streams.pop(rid, None)
        return False

    async def _resume(self, decoder: Decoder, rid: jsonrpc.RequestId, message: Message,
                      headers: Mapping[str, str] | None, owner: Hashable | None) -> None:
        """A request's event stream ended without its answer: on a 2025-11-25 session, after an
        event with an id, it is resumed (GET, `Last-Event-ID`) once the server's delay has passed,
        and read on (whoever the request was made for hears of it first: `Polled`); else, or
        after RESUMES fruitless reconnections in a row, the request fails (UpstreamClosed)."""
        fruitless = 0
        while decoder.last_id is not None and self.session_id is not None and not self.modern \
                and fruitless < RESUMES:
            retry = min(RETRY_SECONDS if decoder.retry is None else decoder.retry, RETRY_MAX_SECONDS)
            self._received(Polled(retry), rid)
            await asyncio.sleep(retry)
            seen = decoder.last_id
            asked = self._with_session(headers)
            asked.pop("content-type", None)
            asked.update({"accept": "text/event-stream", "last-event-id": seen})
            response = await self._request("GET", asked, owner=owner)
            try:
                kind = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
                if response.status != 200 or kind != "text/event-stream":
                    raise UpstreamClosed("the server did not resume the event stream (HTTP "
                                         f"{response.status})")
                decoder.restart()
                if await self._events(response, decoder, rid, message):
                    return
            finally:
                response.close()
            fruitless = fruitless + 1 if decoder.last_id == seen else 0
        raise UpstreamClosed("the server ended the event stream without an answer")

    def _deliver(self, data: bytes, rid: jsonrpc.RequestId | None, asked: Message | None = None, *,
                 strict: bool = False) -> bool:
        """Hand what the server sent on to the session; whether it held the answer to `rid`. An
        answer to anything else is dropped: each request gets its own answer, or none."""
        try:
            message = jsonrpc.loads(data)
        except ValueError as exc:
            if strict:
                raise UpstreamProtocolError(f"unreadable message: {str(exc)[:200]}") from None
            log.warning("upstream %s: unreadable message: %s", self._label, str(exc)[:200])
            return False
        answered = False
        for one in message if isinstance(message, list) else [message]:
            what = jsonrpc.kind(one)
            if what in ("response", "error"):
                if rid is None or answered or one.get("id") != rid:
                    reason: Dropped = "duplicate" if answered and one.get("id") == rid \
                        else "unmatched"
                    log.warning("upstream %s: an answer to a request it was not asked here: "
                                "dropped (%s)", self._label, reason)
                    self.dropped(reason)
                    continue
                if asked is not None and asked.get("method") == "tools/list" and what == "response":
                    self._absorb_tools(asked, one["result"])
                answered = True
            self._received(one, rid)
        return answered

    # -- 2026-07-28: the Mcp-Param-* headers a server's tools declare ------------------------------
    def _absorb_tools(self, asked: Message, result: dict[str, Any]) -> None:
        """Remember each listed tool's `x-mcp-header` map (as the SDK's client does); a tool whose
        annotations are unusable gets no headers."""
        if not self.modern:
            return
        tools = [t for t in result.get("tools") or () if isinstance(t, dict)
                 and isinstance(t.get("name"), str)]
        for tool in tools:
            schema = tool.get("inputSchema")
            if find_invalid_x_mcp_header(schema) is None and (found := x_mcp_header_map(schema)):
                self._param_maps[tool["name"]] = found
            else:
                self._param_maps.pop(tool["name"], None)
        whole = not (asked.get("params") or {}).get("cursor") and not result.get("nextCursor")
        if whole:  # the whole listing: tools it no longer has lose their maps
            names = {t["name"] for t in tools}
            self._param_maps = {k: v for k, v in self._param_maps.items() if k in names}

    def _param_headers(self, params: Mapping[str, Any]) -> dict[str, str]:
        found = self._param_maps.get(params.get("name"))  # type: ignore[arg-type]
        arguments = params.get("arguments")
        if found is None or not isinstance(arguments, Mapping):
            return {}
        return mcp_param_headers(found, arguments)

    def abandon(self, request_id: jsonrpc.RequestId) -> bool:
        """A 2026-07-28 request is cancelled by closing its stream (its POST's task ends, which
        closes the connection); a 2025-11-25 server is told with a notification instead."""
        return self.modern

    # -- the session's GET stream ------------------------------------------------------------------
    def listen(self, answered: Callable[[], None] | None = None) -> None:
        """Open the session's GET stream (what the server sends outside any request). `answered`
        is called once, when the server has answered the first GET (its event stream begun, or a
        refusal) or that attempt has failed: from then on what the server sends unasked reaches
        the gateway, or does not come on this stream at all."""
        if self._listening is None:
            self._listening = asyncio.get_running_loop().create_task(self._get_stream(answered))
        elif answered is not None:  # already asked for: nothing more to wait for
            answered()

    async def _get_stream(self, answered: Callable[[], None] | None = None) -> None:
        def settle() -> None:
            nonlocal answered
            if answered is not None:
                call, answered = answered, None
                call()

        failures = 0
        try:
            while failures < GET_ATTEMPTS and not self.lost.is_set():
                headers = self._with_session()
                headers["accept"] = "text/event-stream"
                try:
                    response = await self._request("GET", headers, lasting=True)
                    settle()  # the server has answered: a 200 stream is open on its side too
                    try:
                        kind = response.headers.get("content-type", "").split(";", 1)[0]
                        if response.status == 405:  # the server offers no GET stream
                            return
                        if response.status == 404:  # its session gone; none: no GET stream
                            if self.session_id is not None:
                                self.lost.set()
                            return
                        if response.status != 200 or kind.strip().lower() != "text/event-stream":
                            failures += 1
                        else:
                            failures = 0
                            async with contextlib.aclosing(events(response.stream(), Decoder(
                                    self.bounds.event, self.bounds.line))) as stream:
                                async for data in stream:
                                    self._deliver(data, None)
                    finally:
                        response.close()
                except UpstreamError as exc:  # refused, malformed, past a bound: asked again later
                    settle()
                    failures += 1
                    log.debug("upstream %s: GET stream: %s", self._label, exc)
                await asyncio.sleep(GET_RETRY_SECONDS)
        finally:
            settle()  # given up, cancelled or failed: nobody waits for it any longer

    async def close(self) -> None:
        """End the session (DELETE) and every connection."""
        if self._listening is not None:
            self._listening.cancel()
        if self.session_id is not None and not self.lost.is_set():
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    response = await self._pool.request("DELETE", self._with_session())
                    await response.read()
        for response in list(self._streams.values()):
            response.close()
        if self._own_pool:
            self._pool.close()
        if self._own_streams:
            self._streams_pool.close()


def _session_id(value: str) -> str:
    if not _SESSION_ID.fullmatch(value):
        raise UpstreamProtocolError("the server's Mcp-Session-Id is not visible ASCII")
    return value
