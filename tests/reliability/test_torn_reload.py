"""Torn hot reloads: a writer rewrites the policy in place (`cat new.toml > policy.toml`, which
truncates first) every 20 ms while the reloader polls every 5 ms. Every complete version of the
file denies `launch_rocket`; an empty or cut-short file (valid TOML, without its `[tools]` entry at
the end) would allow it. Not one call may be allowed, and the last version is applied once the
writer stops.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

from mcp_preconditions import Guard, Identity, load_policy
from mcp_preconditions.drivers.reload import PolicyReloader
from mcp_preconditions.policy.load import revision_of

from .tally import TALLY

NOBODY = Identity()
WRITE_EVERY, POLL_EVERY, DURATION = 0.02, 0.005, 3.0
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
    stop = threading.Event()
    writes: list[Path] = []

    def writer() -> None:
        while not stop.is_set():
            source = sources[len(writes) % 2]
            subprocess.run(["sh", "-c", f'cat "{source}" > "{policy}"'], check=True)
            writes.append(source)
            time.sleep(WRITE_EVERY)

    thread = threading.Thread(target=writer)
    calls = allowed = torn_seen = 0
    reloader.start()
    thread.start()
    try:
        deadline = time.monotonic() + DURATION
        while time.monotonic() < deadline:
            calls += 1
            allowed += guard.decide("launch_rocket", NOBODY, record=False).allowed
            torn_seen += b"[tools.launch_rocket]" not in policy.read_bytes()
            time.sleep(0.001)
    finally:
        stop.set()
        thread.join()
    try:
        # Once the writer stops, the file settles and its last version is applied.
        last = revision_of(writes[-1].read_bytes())
        deadline = time.monotonic() + 10
        while guard.revision != last and time.monotonic() < deadline:
            time.sleep(POLL_EVERY)
        assert guard.revision == last
    finally:
        reloader.stop()
    TALLY.add("torn reload", cases=len(writes), calls=calls, wrongly_allowed=allowed)
    assert torn_seen > 0, "the writer never exposed a torn file: the test proved nothing"
    assert len(writes) > 10 and calls > 100
    assert allowed == 0
    assert reloader.last_error is None
