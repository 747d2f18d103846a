"""`state:KEY` from Redis, shared by every replica: GET PREFIX+KEY is true iff the value is `true` or `1`.

Timeouts are explicit and redis-py's retries are off, so a down or stopped server fails inside the
guard's lookup timeout; every redis error is mapped to BackendError (the guard makes it `error`).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from ..errors import BackendError, RequirementError
from ..policy.model import Redis as RedisSettings

TRUE_VALUES = (b"true", b"1")  # exact bytes: `True`, ` 1` or `yes` are false (SPEC §2)
DEFAULT_MAX_CONNECTIONS = 32


class RedisStateSource:
    """A StateSource reading `PREFIX + KEY` from one Redis server.

    redis.asyncio clients belong to one event loop, so one client (and pool) is kept per running
    loop; the source itself can be shared by snapshots, guards and loops. Concurrent lookups of one
    key share one GET in flight (single flight): a burst of calls costs one round trip per key, and
    a joined result is never older than that round trip.
    """

    name = "redis"

    def __init__(self, url: str, *, prefix: str = "mcp-preconditions:state:",
                 connect_timeout: float = 0.25, read_timeout: float = 0.25,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS) -> None:
        self.prefix = prefix
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._url = url  # may hold a password: never put it in a message or a repr
        self._max_connections = max_connections
        self._loops: dict[asyncio.AbstractEventLoop, _LoopState] = {}
        self._lock = threading.Lock()
        self._client_for_loop(None)  # a malformed URL fails here, at start-up, not per call

    @classmethod
    def from_policy(cls, settings: RedisSettings) -> RedisStateSource:
        """The source a policy's `[state.redis]` asks for; shared by every snapshot with the same
        settings, so that reloads and tool registrations do not open a pool each."""
        url = _url_of(settings)
        key = (url, settings.prefix, settings.connect_timeout_seconds, settings.read_timeout_seconds)
        with _SHARED_LOCK:
            source = _SHARED.get(key)
            if source is None:
                source = cls(url, prefix=settings.prefix,
                             connect_timeout=settings.connect_timeout_seconds,
                             read_timeout=settings.read_timeout_seconds)
                _SHARED[key] = source
        return source

    def __repr__(self) -> str:
        return f"RedisStateSource(prefix={self.prefix!r})"

    def _client_for_loop(self, loop: asyncio.AbstractEventLoop | None) -> Redis:
        try:
            pool = BlockingConnectionPool.from_url(
                self._url, max_connections=self._max_connections,
                # Waiting for a free pooled connection is bounded too (1,000 concurrent calls).
                timeout=self.connect_timeout + self.read_timeout,
                socket_connect_timeout=self.connect_timeout, socket_timeout=self.read_timeout,
                # redis-py retries 3 times with backoff by default: ~2.6 s for a down server. One
                # immediate retry on a connection error only: a pooled connection to a restarted
                # server is stale once; a timeout (a slow server) is never retried.
                retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
                health_check_interval=0)
        except (ValueError, TypeError) as exc:
            raise RequirementError([f"state.redis.url: not a usable Redis URL ({exc})"]) from None
        client = Redis.from_pool(pool)
        if loop is not None:
            self._loops[loop] = _LoopState(client)
        return client

    def _state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        with self._lock:
            state = self._loops.get(loop)
            if state is None:
                # Closed loops (asyncio.run per call) are dropped here, their sockets with them.
                for closed in [other for other in self._loops if other.is_closed()]:
                    del self._loops[closed]
                self._client_for_loop(loop)
                state = self._loops[loop]
            return state

    async def call(self, what: str, op: Callable[[Redis], Awaitable[Any]]) -> Any:
        """Run `op` on this event loop's client; any redis or socket failure is BackendError naming
        `what` (the quota store runs its script through this too)."""
        try:
            return await op(self._state().client)
        except RedisError as exc:
            raise BackendError(f"redis {what} failed: {type(exc).__name__}: {exc}") from None
        except OSError as exc:
            raise BackendError(f"redis {what} failed: {type(exc).__name__}: {exc.strerror or exc}"
                               ) from None

    async def ping(self) -> None:
        """Raise BackendError unless the server answers PING (for readiness probes)."""
        await self.call("PING", lambda client: client.ping())

    async def get(self, key: str) -> bool:
        """True iff the key's value is exactly `true` or `1`; raises BackendError on any failure."""
        inflight = self._state().inflight
        task = inflight.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._read(key))
            inflight[key] = task
            task.add_done_callback(partial(_landed, inflight, key))
        # shield: a caller that gives up (lookup timeout) must not cancel the read for the others
        return await asyncio.shield(task)

    async def _read(self, key: str) -> bool:
        name = self.prefix + key
        value = await self.call("GET", lambda r: r.get(name))
        return value in TRUE_VALUES

    async def set(self, key: str, value: bool | str, *, ttl_seconds: int | None = None) -> None:
        """Set a state key (for operations and tests): booleans are stored as `true`/`false`."""
        text = ("true" if value else "false") if isinstance(value, bool) else value
        name = self.prefix + key
        await self.call("SET", lambda r: r.set(name, text, ex=ttl_seconds))

    async def delete(self, key: str) -> None:
        name = self.prefix + key
        await self.call("DEL", lambda r: r.delete(name))

    async def aclose(self) -> None:
        """Close this loop's client and pool (other loops' clients close with their loop)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            state = self._loops.pop(loop, None)
        if state is not None:
            await state.client.aclose()


@dataclass
class _LoopState:
    """One event loop's client and its reads in flight."""

    client: Redis
    inflight: dict[str, asyncio.Task[bool]] = field(default_factory=dict)


def _landed(inflight: dict[str, asyncio.Task[bool]], key: str, task: asyncio.Task[bool]) -> None:
    if inflight.get(key) is task:
        del inflight[key]
    if not task.cancelled():
        task.exception()  # retrieved here, so a read nobody waits for any more is not reported


def _url_of(settings: RedisSettings) -> str:
    if settings.url is not None:
        return settings.url
    assert settings.url_env is not None  # the model requires exactly one of url / url_env
    url = os.environ.get(settings.url_env)
    if not url:
        raise RequirementError([f"state.redis.url_env: environment variable {settings.url_env!r} "
                                "is not set"])
    return url


_SHARED: dict[tuple[str, str, float, float], RedisStateSource] = {}
_SHARED_LOCK = threading.Lock()
