"""The gateway's session to one server it guards: a stdio command that it starts, watches and
restarts with backoff, or a streamable-HTTP URL. Requests go out through the MCP SDK's own `Client`,
and results come back as the wire dicts the server sent (validated, never re-modelled).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TextIO, cast

import anyio
import httpx2
import mcp_types as types
from anyio.abc import TaskGroup
from mcp import Client
from mcp.client._transport import Transport, TransportStreams
from mcp.client.session import ClientRequestContext, IncomingMessage
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.methods import MONOLITH_NOTIFICATIONS, MONOLITH_REQUESTS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, TypeAdapter, ValidationError

from .. import __version__
from ..telemetry.gateway import GatewayTelemetry
from ..telemetry.propagation import message_headers
from ._streams import WatchedReadStream

log = logging.getLogger("mcp_preconditions.gateway")

CLIENT_INFO = types.Implementation(name="mcp-preconditions-gateway", version=__version__)
_RAW: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])
_LIST_PAGES = 100  # a paginator that never ends cannot hang a listing
BACKOFF_FIRST, BACKOFF_MAX = 0.1, 5.0
# Notifications the upstream session sends that are its own business, not every client's: progress
# reaches the one caller through the request's own progress callback (the SDK also tees it here,
# where broadcasting it would show one client's call to all the others).
_SESSION_ONLY = frozenset({"notifications/cancelled", "notifications/subscriptions/acknowledged",
                           "notifications/progress"})

# Raw (method, params) -> raw result: how the gateway answers requests the upstream sends.
RequestHook = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
NotificationHook = Callable[[str, dict[str, Any]], Awaitable[None]]
ProgressHook = Callable[[float, float | None, str | None], Awaitable[None]]


class UpstreamUnavailable(Exception):
    """The upstream is not connected (starting, restarting, or unreachable)."""


@dataclass(frozen=True)
class StdioTarget:
    """A command to run; `env` is the whole environment it gets (secrets already removed)."""

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return " ".join((self.command, *self.args))


@dataclass(frozen=True)
class HttpTarget:
    """A streamable-HTTP endpoint; `headers` carry the upstream's own credentials."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.url


Target = StdioTarget | HttpTarget


@dataclass
class Connected:
    """What the upstream said about itself when this connection was made."""

    client: Client
    protocol_version: str
    capabilities: dict[str, Any]
    server_info: dict[str, Any] | None
    instructions: str | None
    lost: anyio.Event


class Upstream:
    """One supervised session to the upstream, shared by every downstream client.

    `run()` keeps it connected: it connects, and when the stdio process exits (or an HTTP session
    is lost) it reconnects after a backoff that doubles up to 5 s. `request()` forwards one request
    and returns the raw result; with no live session it raises UpstreamUnavailable at once, and a
    request in flight when the process exits fails as soon as the exit is seen.
    """

    def __init__(self, target: Target, *, key: str = "upstream", errlog: TextIO = sys.stderr,
                 connect_timeout: Callable[[], float] | None = None,
                 telemetry: GatewayTelemetry | None = None) -> None:
        self.target = target
        self.telemetry = telemetry if telemetry is not None else GatewayTelemetry()
        self.key = key  # the server's name in the gateway's config: all a caller is ever told
        # How long the handshake may take (None: forever). A server that never answers it is
        # dropped and started again with backoff, like one that exits.
        self._connect_timeout = connect_timeout
        self.label = f"{key} ({target.label})"  # for the gateway's own log
        # Set by the gateway that serves this upstream's clients.
        self.on_request: RequestHook = _no_client
        self.on_notification: NotificationHook = _ignore
        self.on_connect: Callable[[], Awaitable[None]] = _nothing
        self._errlog = errlog
        self.current: Connected | None = None
        self.changed = anyio.Event()  # set (and replaced) whenever a session comes or goes
        self.attempts = 0
        self.last_error: str | None = None
        self._background: TaskGroup | None = None

    # -- supervision -----------------------------------------------------------------------------
    async def run(self) -> None:
        """Connect, and reconnect with backoff whenever the session is lost; runs until cancelled.
        Requests that outlive the client request that started them (`spawn`) run here too."""
        async with anyio.create_task_group() as background:
            self._background = background
            try:
                await self._supervise()
            finally:
                self._background = None

    def spawn(self, task: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run `task` for as long as the gateway runs (it must end by itself)."""
        if self._background is None:
            raise UpstreamUnavailable("the gateway is not running")
        self._background.start_soon(task)

    async def _supervise(self) -> None:
        delay = BACKOFF_FIRST
        while True:
            self.attempts += 1
            if self.attempts > 1:
                self.telemetry.restarting(self.key)
            try:
                async with AsyncExitStack() as stack:
                    connected = await self._connect(stack)
                    delay = BACKOFF_FIRST
                    await self._serve(connected)
            except Exception as exc:  # whatever the upstream or its transport does: retry later
                error = _describe(exc)
                if error != self.last_error:  # once per failure, not once per retry
                    log.warning("upstream %s: %s (retrying with backoff)", self.label, error)
                self.last_error = error
            await anyio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX)

    async def _serve(self, connected: Connected) -> None:
        self.current = connected
        self.last_error = None
        self.telemetry.connected(self.key, True)
        self._signal()
        try:
            await self.on_connect()
            async with anyio.create_task_group() as tg:
                if connected.protocol_version in MODERN_PROTOCOL_VERSIONS:
                    tg.start_soon(self._listen, connected)
                await connected.lost.wait()
                tg.cancel_scope.cancel()
            log.warning("upstream %s: session lost; reconnecting", self.label)
        finally:
            self.current = None
            self.telemetry.connected(self.key, False)
            self._signal()

    def _signal(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    async def wait_connected(self, timeout: float) -> Connected | None:
        """The live session, waiting up to `timeout` seconds for one."""
        with anyio.move_on_after(timeout):
            while self.current is None:
                await self.changed.wait()
        return self.current

    async def _connect(self, stack: AsyncExitStack) -> Connected:
        # The handshake era (2025-11-25) is asked for first: it carries everything clients of
        # either version may need (subscriptions, server-to-client requests, logging). A server
        # that refuses the handshake is reached with the SDK's own negotiation (2026-07-28).
        try:
            client, lost = await self._open(stack, "legacy")
        except Exception as exc:
            refused = _innermost(exc)
            if not isinstance(refused, MCPError) or refused.error.code == types.REQUEST_TIMEOUT:
                raise  # a server that does not answer at all is not asked again another way
            client, lost = await self._open(stack, "auto")
        session = client.session
        init = session.initialize_result
        caps = init.capabilities if init is not None else session.server_capabilities
        info = session.server_info
        return Connected(
            client=client, protocol_version=client.protocol_version,
            capabilities=caps.model_dump(by_alias=True, mode="json", exclude_none=True)
            if caps is not None else {},
            server_info=info.model_dump(by_alias=True, mode="json", exclude_none=True)
            if info is not None else None,
            instructions=session.instructions, lost=lost)

    async def _open(self, stack: AsyncExitStack, mode: str) -> tuple[Client, anyio.Event]:
        lost = anyio.Event()  # one per attempt: a refused handshake's exit is not this session's
        callbacks: dict[str, Any] = {  # typed by the SDK as Protocols; these match them
            "sampling_callback": self._sampling, "elicitation_callback": self._elicitation,
            "list_roots_callback": self._roots}
        timeout = None if self._connect_timeout is None else self._connect_timeout()
        client = Client(self._transport(lost), mode=mode, cache=None, client_info=CLIENT_INFO,
                        read_timeout_seconds=timeout,  # the handshake's; each request sets its own
                        message_handler=cast(Any, self._message(lost)), **callbacks)
        return await stack.enter_async_context(client), lost

    async def _listen(self, connected: Connected) -> None:
        """At 2026-07-28 an upstream's change notifications ride a listen stream only: keep one
        open (its events reach `on_notification` through the message handler, like any other)."""
        try:
            async with connected.client.listen(tools_list_changed=True, prompts_list_changed=True,
                                               resources_list_changed=True) as subscription:
                async for _event in subscription:
                    pass
        except Exception as exc:  # the session goes on; changes are just not heard
            log.warning("upstream %s: no change notifications: %s", self.label, _describe(exc))

    def _transport(self, lost: anyio.Event) -> Transport:
        target = self.target
        if isinstance(target, StdioTarget):
            params = StdioServerParameters(command=target.command, args=list(target.args),
                                           env=dict(target.env))
            return cast(Transport, _watched(stdio_client(params, errlog=self._errlog), lost))
        http = httpx2.AsyncClient(headers=dict(target.headers),
                                  timeout=httpx2.Timeout(30.0, read=300.0),
                                  event_hooks={"request": [_trace_headers]})
        return cast(Transport, _watched(streamable_http_client(target.url, http_client=http), lost,
                                        http))

    # -- requests to the upstream ----------------------------------------------------------------
    async def request(self, method: str, params: Mapping[str, Any] | None, *, timeout: float,
                      on_progress: ProgressHook | None = None) -> dict[str, Any]:
        """Forward one request; the upstream's raw result. Raises MCPError (the upstream's error,
        a timeout, a lost connection), UpstreamUnavailable, or ValidationError (a malformed
        request or result)."""
        connected = self.current
        if connected is None:
            raise UpstreamUnavailable(self.last_error or "not connected")
        request = MONOLITH_REQUESTS[method].model_validate(
            {"method": method, **({"params": params} if params is not None else {})}, by_name=False)
        try:
            result: dict[str, Any] = await connected.client.session.send_request(
                request, cast(Any, _RAW), request_read_timeout_seconds=timeout,
                progress_callback=cast(Any, on_progress))
            return result
        except MCPError as exc:
            if exc.error.code == types.CONNECTION_CLOSED:
                connected.lost.set()
            raise

    @property
    def modern(self) -> bool:
        """Whether the live session speaks 2026-07-28 (the upstream refused the handshake era)."""
        connected = self.current
        return connected is not None and connected.protocol_version in MODERN_PROTOCOL_VERSIONS

    async def reachable(self, timeout: float) -> bool:
        """Whether the upstream answers a ping now (a 2026-07-28-only upstream: whether a session
        is up). A failed ping on a lost connection starts the reconnect."""
        connected = self.current
        if connected is None:
            return False
        if connected.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return True  # no ping at that version; the session's requests tell
        try:
            await self.request("ping", None, timeout=timeout)
        except MCPError as exc:
            if exc.error.code == types.REQUEST_TIMEOUT:
                return False
            connected.lost.set()
            return False
        except Exception:
            connected.lost.set()
            return False
        return True

    async def notify(self, method: str, params: Mapping[str, Any] | None) -> None:
        """Pass a client notification on (progress, roots list_changed); dropped when down."""
        connected = self.current
        if connected is None:
            return
        model = MONOLITH_NOTIFICATIONS.get(method)
        if model is None:
            return
        try:
            notification = model.model_validate(
                {"method": method, **({"params": params} if params is not None else {})})
        except ValidationError:
            return
        await connected.client.session.send_notification(cast(Any, notification))

    async def list_all(self, method: str, field: str, timeout: float) -> list[dict[str, Any]]:
        """Every item of a listing (`tools/list` -> `tools`, ...), all pages, as raw dicts."""
        items: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(_LIST_PAGES):
            result = await self.request(method, {"cursor": cursor} if cursor else None,
                                        timeout=timeout)
            page = result.get(field)
            if isinstance(page, list):
                items.extend(i for i in page if isinstance(i, dict))
            cursor = result.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                break
        return items

    # -- requests and notifications from the upstream --------------------------------------------
    async def _sampling(self, _ctx: ClientRequestContext, params: types.CreateMessageRequestParams
                        ) -> Any:
        return await self._ask("sampling/createMessage", params, types.CreateMessageResult)

    async def _elicitation(self, _ctx: ClientRequestContext, params: types.ElicitRequestParams) -> Any:
        return await self._ask("elicitation/create", params, types.ElicitResult)

    async def _roots(self, _ctx: ClientRequestContext) -> Any:
        return await self._ask("roots/list", None, types.ListRootsResult)

    async def _ask(self, method: str, params: BaseModel | None, result: type[BaseModel]) -> Any:
        raw = params.model_dump(by_alias=True, mode="json", exclude_none=True) if params else {}
        try:
            return result.model_validate(await self.on_request(method, raw), by_name=False)
        except MCPError as exc:
            return exc.error
        except (ValidationError, Exception) as exc:  # the client's answer is not the upstream's fault
            return types.ErrorData(code=types.INTERNAL_ERROR, message=f"gateway: {_describe(exc)}")

    def _message(self, lost: anyio.Event) -> Callable[[IncomingMessage], Awaitable[None]]:
        async def handle(message: IncomingMessage) -> None:
            if isinstance(message, Exception):  # a garbage line: logged, the session goes on
                log.warning("upstream %s: unreadable message: %s", self.label, _describe(message))
                return
            data = message.model_dump(by_alias=True, mode="json", exclude_none=True)
            method = data.get("method")
            if isinstance(method, str) and method not in _SESSION_ONLY:
                await self.on_notification(method, data.get("params") or {})
        return handle


@asynccontextmanager  # a transport whose read stream sets `lost` when it ends
async def _watched(transport: Transport, lost: anyio.Event,
                   http: httpx2.AsyncClient | None = None) -> AsyncIterator[TransportStreams]:
    async with AsyncExitStack() as stack:
        if http is not None:
            await stack.enter_async_context(http)
        read, write = await stack.enter_async_context(transport)
        yield WatchedReadStream(read, lost), write


async def _trace_headers(request: httpx2.Request) -> None:
    """A message's trace context in a `traceparent` header too, as HTTP servers and proxies read
    it: copied from the `_meta` the gateway wrote (the SDK's client takes no per-request headers)."""
    if request.method == "POST":
        request.headers.update(message_headers(request.content))


async def _no_client(method: str, _params: dict[str, Any]) -> dict[str, Any]:
    raise MCPError(types.INVALID_REQUEST, f"no client can answer {method}")


async def _ignore(_method: str, _params: dict[str, Any]) -> None:
    return None


async def _nothing() -> None:
    return None


def _innermost(exc: BaseException) -> BaseException:
    """The one exception a chain of single-member exception groups (task groups) carries."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    exc = _innermost(exc)
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 300 else text[:299] + "…"

