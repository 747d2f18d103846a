"""Torn hot reloads: a writer rewrites the policy in place as `cat new.toml > policy.toml` does (it
opens the file with O_TRUNC, then writes the bytes in 64 KiB pieces) while the reloader polls it.
Every complete version of the file denies `launch_rocket`; an empty or cut-short file (valid TOML,
without its `[tools]` entry at the end) would allow it. Not one call may be allowed, and the last
version is applied once the writer stops.

The writer is a thread of this process (it was a `sh -c 'cat ...'` process per write; the reloader's
checks look at the file, and the kernel's lease sees a writer thread of this process as it sees any
other). After each step (truncated, each piece, closed) it waits until the reloader has polled the
file twice (one whole poll after the step), so every torn state is shown to a poll, then asks the
guard. Twice: on the wall clock, where a file written under `settle` seconds ago is held back, and
on a clock an hour ahead, where only the other two checks stand (no write overlapped the read,
nobody has the file open for writing) and each complete version is applied as it is closed. The end
is decided by the clock too: once the writer stops, the clock moves past `settle`, not the test.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcp_preconditions import Guard, Identity, load_policy
from mcp_preconditions.drivers.reload import PolicyReloader
from mcp_preconditions.policy.load import revision_of

from .tally import TALLY

NOBODY = Identity()
WRITES, PIECE, WAIT_SECONDS = 20, 64 * 1024, 10.0
AHEAD = 3600.0  # seconds: a clock this far ahead finds every write older than `settle`
# Big enough that it is written in several pieces, with the guarded entry last: most prefixes are
# valid TOML that simply lacks it.
PADDING = "".join(f"# line {i:06d} of the comments that come before the tools table\n"
                  for i in range(4000))


def version(label: str) -> bytes:
    return (f'environment = ["staging"]\n# version {label}\n{PADDING}'
            '[tools.launch_rocket]\nrequirements = ["env:production"]\n').encode()


@pytest.fixture(autouse=True)
def _no_environment_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)


class Poller:
    """The reloader's poll (`reload(settle=its settle)`, what its own thread runs) in a loop on a
    thread of its own, counted, so that a step can wait for a whole poll after it."""

    def __init__(self, reloader: PolicyReloader) -> None:
        self.reloader = reloader
        self.polls = 0
        self._done = threading.Event()
        self._polled = threading.Condition()

    def run(self) -> None:
        while not self._done.is_set():
            self.reloader.reload(settle=self.reloader.settle)
            with self._polled:
                self.polls += 1
                self._polled.notify_all()

    def whole_poll(self) -> None:
        """Until a poll that started after this call has ended."""
        with self._polled:
            after = self.polls + 2
            assert self._polled.wait_for(lambda: self.polls >= after, WAIT_SECONDS)

    @staticmethod
    @contextlib.contextmanager
    def running(reloader: PolicyReloader) -> Iterator[Poller]:
        poller = Poller(reloader)
        thread = threading.Thread(target=poller.run, name="poller")
        thread.start()
        try:
            yield poller
        finally:
            poller._done.set()
            thread.join()


def write_in_place(path: Path, data: bytes) -> Iterator[bytes]:
    """Write `data` over `path` as `cat > path` does, yielding what the file holds after each step
    (truncated, each piece written) while it is still open, and once closed."""
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        yield b""
        for start in range(0, len(data), PIECE):
            os.write(fd, data[start:start + PIECE])
            yield data[:start + PIECE]
    finally:
        os.close(fd)
    yield data


@pytest.mark.parametrize("ahead", [False, True], ids=["wall-clock", "settled"])
def test_a_policy_rewritten_in_place_is_never_applied_half_written(tmp_path: Path,
                                                                   ahead: bool) -> None:
    versions = [version(label) for label in "ab"]
    policy = tmp_path / "policy.toml"
    policy.write_bytes(versions[0])
    guard = Guard(load_policy(policy), {"launch_rocket": None}, entry_points=False)
    assert not guard.decide("launch_rocket", NOBODY).allowed
    offset = [AHEAD if ahead else 0.0]
    reloader = PolicyReloader(guard, policy, clock=lambda: time.time() + offset[0])
    calls = allowed = torn = 0
    with Poller.running(reloader) as poller:
        for n in range(WRITES):
            data = versions[n % 2]
            for held in write_in_place(policy, data):
                poller.whole_poll()
                calls += 1
                allowed += guard.decide("launch_rocket", NOBODY, record=False).allowed
                torn += held != data
            if ahead:  # nothing held it back: the version just closed is in force
                assert guard.revision == revision_of(data)
        offset[0] = AHEAD  # the writer stopped: the clock passes `settle`
        poller.whole_poll()
    assert guard.revision == revision_of(versions[(WRITES - 1) % 2])
    TALLY.add("torn reload", cases=WRITES, calls=calls, wrongly_allowed=allowed)
    assert torn == WRITES * len(range(0, len(versions[0]), PIECE))  # empty, then short of a piece
    assert allowed == 0
    assert reloader.last_error is None
