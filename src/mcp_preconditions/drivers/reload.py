"""Policy hot reload: re-read a policy file (polled, or on `reload()`), compile, swap atomically.

A file whose content hash is unchanged costs a read and a hash. A broken file keeps the old snapshot,
is logged once with every problem, and stays in `last_error` until a reload succeeds. A file still
being written is never applied (see `PolicyReloader`); publish a policy by atomic rename.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import FileReadError, PreconditionsError
from ..files import read_bounded
from ..policy.load import PolicySource, parse_policy, revision_of
from .writers import open_for_writing

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
OnFailure = Callable[[str], None]  # the problem, on every failed attempt (see add_failure_listener)
# Whether the process can put a policy in force (see add_check): raises PreconditionsError if not.
Check = Callable[[PolicySource], None]
DEFAULT_SETTLE_SECONDS = 0.1


def _signature(info: os.stat_result) -> tuple[int, ...]:
    # ctime too: a user can set mtime back (touch -d, cp -p) but never ctime.
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


class PolicyReloader:
    """Keeps a Guard on the current content of one policy file.

    `reload()` checks once; `start()` polls every `interval` seconds, as an asyncio task when called
    inside a running event loop, else on a daemon thread. `on_change` callbacks run after each swap;
    one that returns an awaitable (e.g. sending `notifications/tools/list_changed`) is scheduled on
    the event loop the reloader was started in.

    A torn file is never applied: an empty or cut-short TOML file is often valid, and would drop
    `[tools.X]` requirements until the next poll. Every read must see the same inode, size, mtime
    and ctime before and after it; a poll also waits until the file has been left alone for
    `settle` seconds (by its ctime, which no tool can set back) and, where Linux can tell
    (`writers.open_for_writing`), until no process has it open for writing: a writer stalled
    between truncating and writing for longer than `settle` is waited for. Publishing by atomic rename
    (write `policy.toml.tmp`, then `mv` it over `policy.toml`) never shows a torn file at all.
    """

    def __init__(self, guard: Guard, path: str | Path, *, interval: float = 1.0,
                 on_change: OnChange | None = None,
                 settle: float = DEFAULT_SETTLE_SECONDS,
                 clock: Callable[[], float] = time.time) -> None:
        self.guard = guard
        self.path = Path(path)
        self.interval = interval
        self.settle = settle
        self._clock = clock  # the wall clock, like the file's ctime it is compared with
        self.last_error: str | None = None
        self._listeners: list[OnChange] = [on_change] if on_change is not None else []
        self._failure_listeners: list[OnFailure] = []
        self._checks: list[Check] = []
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

    def add_failure_listener(self, callback: OnFailure) -> None:
        """Call `callback(problem)` on every attempt that keeps the old policy (a broken file is
        retried, and so reported, at every poll; a file being written is not a failure). It runs
        under the reloader's lock: keep it quick (a counter)."""
        self._failure_listeners.append(callback)

    def add_check(self, check: Check) -> None:
        """Run `check(source)` on every new policy before it is swapped in: one that raises
        PreconditionsError (what this process cannot serve, e.g. approval pages a stdio gateway
        has nowhere to show) refuses the reload like an invalid file: the old policy stays, the
        reason is logged and the failure listeners told."""
        self._checks.append(check)

    def _apply(self, source: PolicySource) -> None:
        for check in self._checks:
            check(source)
        self.guard.reload(source)

    # -- one check -------------------------------------------------------------------------------
    def reload(self, *, force: bool = False, settle: float = 0.0) -> PolicyChange | None:
        """Re-read the file; compile and swap when its content changed (or `force`). Returns the
        change, or None when nothing was swapped (unchanged, being written, changed less than
        `settle` seconds ago, unreadable or invalid: see last_error). An explicit call is for a
        file known to be complete (after an atomic rename, on SIGHUP); polls pass `self.settle`."""
        with self._lock:
            data = self._read_whole(settle)
            if data is None:
                return None
            revision = revision_of(data)
            # A broken version is retried on every poll: what broke it may lie outside the file
            # (a flag file, an environment variable). Its error is logged once all the same.
            if not force and revision == self._tried and self.last_error is None:
                return None
            old = self.guard.revision
            try:
                self._apply(parse_policy(data, str(self.path), self.path.parent))
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

    def _read_whole(self, settle: float) -> bytes | None:
        """The file's bytes when no write overlapped the read and none came in the last `settle`
        seconds; None otherwise (a failure to read is recorded in last_error)."""
        try:
            before = os.stat(self.path)
            if settle > 0 and (self._clock() - before.st_ctime < settle or self._writer_has_it()):
                return None  # written moments ago, or still open for writing: perhaps unfinished
            data = read_bounded(self.path)
            after = os.stat(self.path)
        except (OSError, ValueError, FileReadError) as exc:  # ValueError: a NUL in the path
            problem = exc.problem if isinstance(exc, FileReadError) else \
                f"cannot read: {getattr(exc, 'strerror', None) or exc}"
            why = f"{self.path}: {problem}"
            self._failed(f"unreadable: {why}", why)
            return None
        if _signature(before) != _signature(after) or (
                stat.S_ISREG(after.st_mode) and len(data) != after.st_size):
            return None  # a write overlapped the read: the next poll sees the finished file
        return data

    def _writer_has_it(self) -> bool:
        """Whether some process has the file open for writing (`open_for_writing`): a writer that
        truncated it and stalls for longer than `settle` (a loaded machine) leaves it open. Unknown
        counts as no: the other checks still apply."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return False  # the read that follows reports it
        try:
            return open_for_writing(fd) is True
        finally:
            os.close(fd)

    def _failed(self, tried: str, message: str) -> None:
        if (tried, message) != (self._tried, self.last_error):  # each new problem is logged once
            log.error("policy reload failed, keeping revision %s: %s", self.guard.revision, message)
        self._tried = tried
        self.last_error = message
        for callback in list(self._failure_listeners):
            try:
                callback(message)
            except Exception:
                log.exception("policy failure callback %r failed", callback)

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
            self.reload(settle=self.settle)

    def _poll_thread(self) -> None:
        while not self._stop.wait(self.interval):
            self.reload(settle=self.settle)

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
