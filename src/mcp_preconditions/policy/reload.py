"""Policy hot reload: re-read a policy file (polled, or on `reload()`), compile, swap atomically.

A file whose content hash is unchanged costs a read and a hash. A broken file keeps the old snapshot,
is logged once with every problem, and stays in `last_error` until a reload succeeds.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import PreconditionsError
from .load import parse_policy, revision_of

if TYPE_CHECKING:
    from ..guard import Guard

log = logging.getLogger("mcp_preconditions.policy")


@dataclass(frozen=True, slots=True)
class PolicyChange:
    """A successful reload: the file, the revision before and the revision now in force."""

    source: str
    old_revision: str
    new_revision: str


OnChange = Callable[[PolicyChange], Any]  # may return an awaitable (see PolicyReloader)


class PolicyReloader:
    """Keeps a Guard on the current content of one policy file.

    `reload()` checks once; `start()` polls every `interval` seconds, as an asyncio task when called
    inside a running event loop, else on a daemon thread. `on_change` callbacks run after each swap;
    one that returns an awaitable (e.g. sending `notifications/tools/list_changed`) is scheduled on
    the event loop the reloader was started in.
    """

    def __init__(self, guard: Guard, path: str | Path, *, interval: float = 1.0,
                 on_change: OnChange | None = None) -> None:
        self.guard = guard
        self.path = Path(path)
        self.interval = interval
        self.last_error: str | None = None
        self._listeners: list[OnChange] = [on_change] if on_change is not None else []
        self._tried = guard.revision  # content hash of the last file tried, good or bad
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._pending: set[Any] = set()  # running callback futures: keep a reference

    @property
    def revision(self) -> str:
        return self.guard.revision

    def add_listener(self, callback: OnChange) -> None:
        self._listeners.append(callback)

    # -- one check -------------------------------------------------------------------------------
    def reload(self, *, force: bool = False) -> PolicyChange | None:
        """Re-read the file; compile and swap when its content changed (or `force`). Returns the
        change, or None when nothing was swapped (unchanged, unreadable or invalid: see last_error)."""
        with self._lock:
            try:
                data = self.path.read_bytes()
            except OSError as exc:
                why = f"{self.path}: cannot read: {exc.strerror or exc}"
                self._failed(f"unreadable: {why}", why)
                return None
            revision = revision_of(data)
            # A broken version is retried on every poll: what broke it may lie outside the file
            # (a flag file, an environment variable). Its error is logged once all the same.
            if not force and revision == self._tried and self.last_error is None:
                return None
            old = self.guard.revision
            try:
                self.guard.reload(parse_policy(data, str(self.path), self.path.parent))
            except PreconditionsError as exc:
                self._failed(revision, str(exc))
                return None
            except Exception as exc:  # a resolver's constructor: still never lose the old snapshot
                self._failed(revision, f"{self.path}: {type(exc).__name__}: {exc}")
                return None
            self._tried = revision
            self.last_error = None
            change = PolicyChange(str(self.path), old, self.guard.revision)
        log.info("policy %s reloaded: revision %s -> %s", change.source, old, change.new_revision)
        self._notify(change)
        return change

    def _failed(self, tried: str, message: str) -> None:
        if (tried, message) != (self._tried, self.last_error):  # each new problem is logged once
            log.error("policy reload failed, keeping revision %s: %s", self.guard.revision, message)
        self._tried = tried
        self.last_error = message

    def _notify(self, change: PolicyChange) -> None:
        for callback in list(self._listeners):
            try:
                result = callback(change)
            except Exception:
                log.exception("policy on_change callback %r failed", callback)
                continue
            if inspect.isawaitable(result):
                self._schedule(callback, result)

    def _schedule(self, callback: OnChange, awaitable: Any) -> None:
        loop = self._loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        future: Any
        if running is not None:
            future = asyncio.ensure_future(awaitable)
        elif loop is not None and not loop.is_closed():  # reload() called from another thread
            future = asyncio.run_coroutine_threadsafe(awaitable, loop)
        else:
            log.error("policy on_change callback %r returned an awaitable but no event loop runs; "
                      "start the reloader inside the loop", callback)
            if inspect.iscoroutine(awaitable):
                awaitable.close()
            return
        self._pending.add(future)
        future.add_done_callback(self._callback_done)

    def _callback_done(self, future: Any) -> None:
        self._pending.discard(future)
        if not future.cancelled() and future.exception() is not None:
            log.error("policy on_change callback failed: %r", future.exception())

    # -- polling ---------------------------------------------------------------------------------
    def start(self) -> None:
        """Poll the file: an asyncio task inside a running loop, else a daemon thread."""
        if self._task is not None or self._thread is not None:
            return
        self._stop.clear()
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            self._thread = threading.Thread(target=self._poll_thread, daemon=True,
                                            name=f"policy-reloader:{self.path.name}")
            self._thread.start()
        else:
            self._task = self._loop.create_task(self._poll_task())

    async def _poll_task(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.reload()

    def _poll_thread(self) -> None:
        while not self._stop.wait(self.interval):
            self.reload()

    def stop(self) -> None:
        """Stop polling (idempotent)."""
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self._thread is not None:
            if self._thread is not threading.current_thread():
                self._thread.join()
            self._thread = None
