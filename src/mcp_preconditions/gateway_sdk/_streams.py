"""A read stream that says when it has ended: how the gateway sees a stdio upstream exit (its
stdout closes) the moment it happens, not at the next call's timeout.
"""

from __future__ import annotations

from types import TracebackType
from typing import Generic, Self, TypeVar

import anyio
from mcp.shared._stream_protocols import ReadStream

T = TypeVar("T")


class WatchedReadStream(Generic[T]):
    """Delegates to `inner`; sets `ended` when the stream ends or is closed."""

    def __init__(self, inner: ReadStream[T], ended: anyio.Event) -> None:
        self._inner = inner
        self._ended = ended

    @property
    def last_context(self) -> object:  # the dispatcher reads it when the inner stream has one
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> T:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._ended.set()
            raise

    async def aclose(self) -> None:
        self._ended.set()
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc_val: BaseException | None,
                        exc_tb: TracebackType | None) -> bool | None:
        await self.aclose()
        return None
