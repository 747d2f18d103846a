"""Policy hot reload with real files: explicit and polled reloads, broken files, change callbacks.

A broken or unreadable file keeps the old snapshot, says why in `last_error` and in the log (once),
and a good file afterwards clears it. Polls are awaited on the change they make (a callback's event);
the settle time is crossed on a fake clock (tests/fixtures/clock.py), and a writer holding the file
open is a descriptor of this process (the reloader's lease probe answers for any process's).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from pathlib import Path

import pytest

from mcp_preconditions import Decision, Guard, Identity, load_policy
from mcp_preconditions.drivers import reload as reload_module
from mcp_preconditions.drivers.reload import PolicyChange, PolicyReloader
from mcp_preconditions.files import read_bounded
from mcp_preconditions.policy.load import revision_of
from tests.fixtures.clock import FakeClock
from tests.fixtures.flagd import FlagFile

NOBODY = Identity()
WAIT_SECONDS = 10.0  # the safety net of a wait for a poll's change
OPEN = b'environment = ["production"]\n[tools.launch]\nrequirements = ["env:production"]\n'
CLOSED = b'environment = ["staging"]\n[tools.launch]\nrequirements = ["env:production"]\n'
BROKEN = b'environment = "production"\n[tools.launch]\nrequirementz = ["env:production"]\n'


@pytest.fixture(autouse=True)
def _no_environment_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.toml"
    path.write_bytes(OPEN)
    return path


def launch_allowed(guard: Guard) -> bool:
    return guard.decide("launch", NOBODY).allowed


def test_explicit_reload_swaps_in_the_new_revision(policy_file: Path) -> None:
    guard = Guard(load_policy(policy_file), entry_points=False)
    reloader = PolicyReloader(guard, policy_file)
    assert reloader.reload() is None  # unchanged content: nothing to do
    policy_file.write_bytes(CLOSED)
    change = reloader.reload()
    assert change == PolicyChange(str(policy_file), revision_of(OPEN), revision_of(CLOSED))
    assert guard.revision == revision_of(CLOSED) and not launch_allowed(guard)
    assert reloader.reload() is None
    forced = reloader.reload(force=True)
    assert forced == PolicyChange(str(policy_file), revision_of(CLOSED), revision_of(CLOSED))


def test_a_broken_file_keeps_the_old_snapshot_and_says_why(
        policy_file: Path, caplog: pytest.LogCaptureFixture) -> None:
    guard = Guard(load_policy(policy_file), entry_points=False)
    reloader = PolicyReloader(guard, policy_file)
    policy_file.write_bytes(BROKEN)
    with caplog.at_level(logging.ERROR, logger="mcp_preconditions.policy"):
        for _ in range(3):
            assert reloader.reload() is None
    expected = (f"{policy_file}: invalid policy (2 problem(s)):\n"
                "  environment: Input should be a valid list\n"
                "  tools.launch.requirementz: unknown key (a typo here would silently weaken the policy)")
    assert reloader.last_error == expected
    assert [r.getMessage() for r in caplog.records] == [
        f"policy reload failed, keeping revision {revision_of(OPEN)}: {expected}"]  # once, not per poll
    assert guard.revision == revision_of(OPEN) and launch_allowed(guard)
    policy_file.write_bytes(CLOSED)
    assert reloader.reload() is not None
    assert reloader.last_error is None and not launch_allowed(guard)


def test_requirements_that_do_not_compile_keep_the_old_snapshot(policy_file: Path) -> None:
    guard = Guard(load_policy(policy_file), entry_points=False)
    reloader = PolicyReloader(guard, policy_file)
    policy_file.write_bytes(b'[tools.launch]\nrequirements = ["weather:clear"]\n')
    assert reloader.reload() is None
    assert reloader.last_error is not None
    assert reloader.last_error.startswith(
        f"{policy_file}: tool 'launch': requirement 'weather:clear': unknown namespace 'weather' "
        "(known namespaces: ")
    assert guard.revision == revision_of(OPEN)


def test_an_unreadable_file_keeps_the_old_snapshot(policy_file: Path) -> None:
    guard = Guard(load_policy(policy_file), entry_points=False)
    reloader = PolicyReloader(guard, policy_file)
    policy_file.unlink()
    assert reloader.reload() is None
    assert reloader.last_error == f"{policy_file}: cannot read: No such file or directory"
    assert guard.revision == revision_of(OPEN) and launch_allowed(guard)


def test_polling_on_a_thread_outside_an_event_loop(policy_file: Path) -> None:
    guard = Guard(load_policy(policy_file), entry_points=False)
    changes: list[PolicyChange] = []
    changed = threading.Event()
    reloader = PolicyReloader(guard, policy_file, interval=0.02, on_change=changes.append)
    reloader.add_listener(lambda _change: changed.set())
    reloader.start()
    try:
        policy_file.write_bytes(CLOSED)
        assert changed.wait(WAIT_SECONDS), "the poller never swapped the new file in"
    finally:
        reloader.stop()
    assert guard.revision == revision_of(CLOSED)
    assert not launch_allowed(guard)
    assert changes == [PolicyChange(str(policy_file), revision_of(OPEN), revision_of(CLOSED))]


async def test_polling_as_a_task_awaits_async_callbacks(policy_file: Path) -> None:
    guard = Guard(load_policy(policy_file), entry_points=False)
    notified = asyncio.Event()
    seen: list[str] = []

    async def tools_list_changed(change: PolicyChange) -> None:
        await asyncio.sleep(0)
        seen.append(change.new_revision)
        notified.set()

    reloader = PolicyReloader(guard, policy_file, interval=0.02)
    reloader.add_listener(tools_list_changed)
    reloader.start()
    try:
        policy_file.write_bytes(CLOSED)
        await asyncio.wait_for(notified.wait(), WAIT_SECONDS)
    finally:
        reloader.stop()
    assert seen == [revision_of(CLOSED)]
    assert not (await guard.check_identity("launch", NOBODY)).allowed


async def test_reload_from_another_thread_schedules_async_callbacks_on_the_loop(
        policy_file: Path) -> None:
    guard = Guard(load_policy(policy_file), entry_points=False)
    loop_threads: list[int] = []
    called = asyncio.Event()

    async def callback(change: PolicyChange) -> None:
        loop_threads.append(threading.get_ident())
        called.set()

    reloader = PolicyReloader(guard, policy_file, interval=3600, on_change=callback)
    reloader.start()  # inside this loop: async callbacks are scheduled here
    try:
        policy_file.write_bytes(CLOSED)
        change = await asyncio.to_thread(reloader.reload)
        assert change is not None
        await asyncio.wait_for(called.wait(), WAIT_SECONDS)
    finally:
        reloader.stop()
    assert loop_threads == [threading.get_ident()]


def test_a_failing_callback_does_not_undo_the_swap(policy_file: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    guard = Guard(load_policy(policy_file), entry_points=False)

    def broken(change: PolicyChange) -> None:
        raise RuntimeError("listener bug")

    reloader = PolicyReloader(guard, policy_file, on_change=broken)
    policy_file.write_bytes(CLOSED)
    with caplog.at_level(logging.ERROR, logger="mcp_preconditions.policy"):
        assert reloader.reload() is not None
    assert guard.revision == revision_of(CLOSED)
    assert any("on_change callback" in r.getMessage() for r in caplog.records)


def test_every_decision_record_carries_the_revision_in_force(policy_file: Path) -> None:
    decisions: list[Decision] = []

    class Keep:
        def record(self, decision: Decision) -> None:
            decisions.append(decision)

    guard = Guard(load_policy(policy_file), entry_points=False, recorder=Keep())
    reloader = PolicyReloader(guard, policy_file)
    guard.decide("launch", NOBODY)
    policy_file.write_bytes(CLOSED)
    reloader.reload()
    guard.decide("launch", NOBODY)
    guard.decide("unguarded", NOBODY)
    assert [(d.tool, d.allowed, d.revision) for d in decisions] == [
        ("launch", True, revision_of(OPEN)), ("launch", False, revision_of(CLOSED)),
        ("unguarded", True, revision_of(CLOSED))]


def test_a_version_broken_by_a_missing_flag_file_is_retried_until_it_appears(
        policy_file: Path, flag_file: FlagFile, caplog: pytest.LogCaptureFixture) -> None:
    guard = Guard(load_policy(policy_file), entry_points=False)
    reloader = PolicyReloader(guard, policy_file)
    flags = flag_file.path.parent / "later.json"
    policy_file.write_bytes(OPEN + f'[features.openfeature]\npath = "{flags}"\n'.encode())
    with caplog.at_level(logging.ERROR, logger="mcp_preconditions.policy"):
        assert reloader.reload() is None and reloader.reload() is None
    assert reloader.last_error == (f"{policy_file}: invalid policy (1 problem(s)):\n"
                                   f"  features.openfeature.path: flag file '{flags}' does not exist")
    assert len(caplog.records) == 1
    flags.write_text('{"flags": {}}')
    assert reloader.reload() is not None  # the policy file did not change; its dependency did
    assert reloader.last_error is None and guard.revision == revision_of(policy_file.read_bytes())


def test_a_poll_waits_until_the_file_has_settled(policy_file: Path) -> None:
    guard = Guard(load_policy(policy_file), entry_points=False)
    clock = FakeClock()
    reloader = PolicyReloader(guard, policy_file, clock=clock)
    assert reloader.settle == 0.1
    policy_file.write_bytes(CLOSED)
    clock.now = policy_file.stat().st_ctime  # the moment it was written
    assert reloader.reload(settle=60) is None  # changed moments ago: perhaps still being written
    assert reloader.last_error is None and launch_allowed(guard)
    clock.advance(59.9)
    assert reloader.reload(settle=60) is None  # still within the settle time
    clock.advance(0.2)  # the file is now older than that
    assert reloader.reload(settle=60) is not None
    assert guard.revision == revision_of(CLOSED) and not launch_allowed(guard)


def test_a_writer_stalled_after_truncating_is_waited_for_however_long(policy_file: Path) -> None:
    """The torn reload a loaded CI run showed (1,133 calls allowed): `cat new > policy` truncates
    the file when the shell opens it, and `cat` may start writing more than `settle` seconds later.
    The empty file (valid TOML, no [tools]) is not applied while its writer holds it open, however
    long (an hour on the fake clock); once the writer has written and closed it, its content is.
    The writer is a descriptor of this process opened as `>` opens it: the lease probe
    (drivers/writers.py) asks the kernel whether any process has the file open for writing."""
    clock = FakeClock()
    guard = Guard(load_policy(policy_file), entry_points=False)
    reloader = PolicyReloader(guard, policy_file, clock=clock)
    writer = os.open(policy_file, os.O_WRONLY | os.O_TRUNC)  # what `>` does before `cat` runs
    try:
        assert policy_file.stat().st_size == 0  # truncated, not written
        clock.now = policy_file.stat().st_ctime + 3600  # left alone far longer than `settle`
        assert reloader.reload(settle=reloader.settle) is None
        assert guard.revision == revision_of(OPEN) and launch_allowed(guard)
        assert reloader.last_error is None  # a file being written is not a failure
        assert os.write(writer, CLOSED) == len(CLOSED)
    finally:
        os.close(writer)
    clock.now = policy_file.stat().st_ctime + 2 * reloader.settle  # written, closed, settled
    assert reloader.reload(settle=reloader.settle) is not None
    assert guard.revision == revision_of(CLOSED) and not launch_allowed(guard)


def test_a_write_during_the_read_is_not_applied(policy_file: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    guard = Guard(load_policy(policy_file), entry_points=False)
    reloader = PolicyReloader(guard, policy_file)
    policy_file.write_bytes(b"")  # truncated by a writer that has not written yet
    real_read = read_bounded  # what reload_module calls, imported there from files

    def read_then_finish_writing(path: Path) -> bytes:
        data = real_read(path)
        policy_file.write_bytes(CLOSED)  # the writer finishes while we hold the empty read
        return data

    monkeypatch.setattr(reload_module, "read_bounded", read_then_finish_writing)
    assert reloader.reload() is None  # the empty prefix (valid TOML: no [tools]) is never applied
    assert guard.revision == revision_of(OPEN) and reloader.last_error is None
    monkeypatch.setattr(reload_module, "read_bounded", real_read)
    assert reloader.reload() is not None
    assert guard.revision == revision_of(CLOSED)


def test_an_oversized_policy_is_refused_and_the_old_one_kept(policy_file: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    guard = Guard(load_policy(policy_file), entry_points=False)
    reloader = PolicyReloader(guard, policy_file)
    monkeypatch.setenv("MCP_PRECONDITIONS_MAX_FILE_BYTES", "10")
    policy_file.write_bytes(CLOSED)
    assert reloader.reload() is None
    assert reloader.last_error == (f"{policy_file}: larger than 10 bytes, the input size bound (set "
                                   "$MCP_PRECONDITIONS_MAX_FILE_BYTES to raise it)")
    assert guard.revision == revision_of(OPEN)
