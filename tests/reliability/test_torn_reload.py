"""Torn hot reloads: a writer rewrites the policy in place (as `cat new.toml > policy.toml` does:
truncate, then write in chunks) every 20 ms while the reloader polls every 5 ms, and now and then
stalls between truncating and writing for longer than the reloader's settle time (as `cat` did on a
loaded CI run, 1,133 calls allowed). Every complete version of the file denies `launch_rocket`; an
empty or cut-short file (valid TOML, without its `[tools]` entry at the end) would allow it. Not one
call may be allowed, and the last version is applied once the writer stops.

The writer is a thread of this process: the reloader tells a file being written by the kernel's
answers alone (its inode, size, times, and a lease refused while any process has it open for
writing), which are the same for this process's descriptor as for a shell's. Its stalls are made on
purpose, not left to the machine's load, so each run crosses the settle time.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from mcp_preconditions import Guard, Identity, load_policy
from mcp_preconditions.drivers.reload import PolicyReloader
from mcp_preconditions.policy.load import revision_of

from .tally import TALLY

NOBODY = Identity()
WRITE_EVERY, POLL_EVERY, WRITES = 0.02, 0.005, 60
CHUNK = 64 * 1024  # `cat` writes in blocks: the file grows a block at a time
STALL_EVERY, STALL = 15, 0.2  # every 15th write stalls after truncating: beyond the settle time
WAIT_SECONDS = 10.0  # the safety net of the run, and of the last version's poll
# Big enough that `cat` writes it in several chunks, with the guarded entry last: most prefixes are
# valid TOML that simply lacks it.
PADDING = "".join(f"# line {i:06d} of the comments that come before the tools table\n"
                  for i in range(4000))


def version(label: str) -> bytes:
    return (f'environment = ["staging"]\n# version {label}\n{PADDING}'
            '[tools.launch_rocket]\nrequirements = ["env:production"]\n').encode()


@pytest.fixture(autouse=True)
def _no_environment_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)


def test_a_policy_rewritten_in_place_is_never_applied_half_written(tmp_path: Path) -> None:
    sources = [tmp_path / "a.toml", tmp_path / "b.toml"]
    for path, label in zip(sources, "ab", strict=True):
        path.write_bytes(version(label))
    policy = tmp_path / "policy.toml"
    policy.write_bytes(version("a"))
    guard = Guard(load_policy(policy), {"launch_rocket": None}, entry_points=False)
    assert not guard.decide("launch_rocket", NOBODY).allowed
    reloader = PolicyReloader(guard, policy, interval=POLL_EVERY)
    assert reloader.settle < STALL
    stop = threading.Event()
    writes: list[Path] = []
    last = revision_of(sources[(WRITES - 1) % 2].read_bytes())
    applied = threading.Event()
    reloader.add_listener(lambda change: applied.set() if change.new_revision == last else None)

    def writer() -> None:
        for n in range(WRITES):
            if stop.is_set():
                return
            source = sources[n % 2]
            body = source.read_bytes()
            with policy.open("wb", buffering=0) as out:  # truncated now, as the shell's `>` does
                if n % STALL_EVERY == STALL_EVERY - 1:
                    time.sleep(STALL)  # the writer stalls, empty file open, past the settle time
                for start in range(0, len(body), CHUNK):
                    out.write(body[start:start + CHUNK])
            writes.append(source)
            time.sleep(WRITE_EVERY)  # the writer's pace, by design

    thread = threading.Thread(target=writer)
    calls = allowed = torn_seen = 0
    reloader.start()
    thread.start()
    try:
        deadline = time.monotonic() + WAIT_SECONDS  # the run's safety net: WRITES writes end it
        while thread.is_alive() and time.monotonic() < deadline:
            calls += 1
            allowed += guard.decide("launch_rocket", NOBODY, record=False).allowed
            torn_seen += b"[tools.launch_rocket]" not in policy.read_bytes()
            time.sleep(0.001)  # the reader's pace, within the run
    finally:
        stop.set()
        thread.join()
    try:
        # Once the writer stops, the file settles and its last version is applied.
        assert len(writes) == WRITES, "the writer did not finish within the safety net"
        applied.clear()  # `last` was in force before, between writes: now it must be again
        if guard.revision != last:
            assert applied.wait(WAIT_SECONDS), "the last version was never applied"
        assert guard.revision == last
    finally:
        reloader.stop()
    TALLY.add("torn reload", cases=len(writes), calls=calls, wrongly_allowed=allowed)
    assert torn_seen > 0, "the writer never exposed a torn file: the test proved nothing"
    assert calls > 100
    assert allowed == 0
    assert reloader.last_error is None
