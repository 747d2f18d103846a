"""`drivers/writers.open_for_writing`: whether a file is open for writing, by a Linux read lease
that is released at once. Real processes hold the file; the probe never signals this process.

Interop: what the probe is for is another process writing the policy (an editor, a deploy), and a
lease's break is signalled to the holding process, the one thing the racing-writer test checks
never ends it; so the holders and the writer are `sh` processes, as in use (each is milliseconds:
no gateway or server starts)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from mcp_preconditions.drivers.writers import open_for_writing

pytestmark = pytest.mark.interop


@contextmanager
def held(path: Path, redirect: str) -> Iterator[None]:
    """Another process holding `path` open (`>`: for writing, `<`: for reading) until the block ends."""
    child = subprocess.Popen(["sh", "-c", f'exec 3{redirect}"{path}"; echo open; read _'],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"open\n"
        yield
    finally:
        child.kill()
        child.wait()


def probe(path: Path) -> bool | None:
    fd = os.open(path, os.O_RDONLY)
    try:
        return open_for_writing(fd)
    finally:
        os.close(fd)


def test_a_file_no_one_writes_is_not_open_for_writing(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_bytes(b"x = 1\n")
    assert probe(path) is False
    with held(path, "<"):  # a reader is no writer
        assert probe(path) is False


def test_a_file_another_process_holds_open_for_writing_is(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_bytes(b"x = 1\n")
    with held(path, ">>"):
        assert probe(path) is True
    assert probe(path) is False  # it closed


def test_a_writer_opening_while_the_probe_runs_is_delayed_not_signalled(tmp_path: Path) -> None:
    """The lease is released before the probe returns, so a writer racing it waits microseconds;
    the kernel's notice to the lease holder comes as SIGURG (ignored), never SIGIO (which would end
    this process)."""
    path = tmp_path / "policy.toml"
    path.write_bytes(b"x = 1\n")
    rounds = tmp_path / "rounds"
    writer = subprocess.Popen(["sh", "-c", f'while :; do echo y > "{path}"; echo >> "{rounds}"; done'])
    try:
        seen = {probe(path) for _ in range(2000)}
    finally:
        writer.kill()
        writer.wait()
    assert seen and seen <= {True, False}  # asked every time, and this process still runs
    assert rounds.read_bytes().count(b"\n") > 0  # the writer went on writing all along


def test_unknown_where_a_sigurg_handler_is_installed_or_the_file_is_no_regular_file(
        tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_bytes(b"x = 1\n")
    previous = signal.signal(signal.SIGURG, lambda *_: None)
    try:
        assert probe(path) is None  # the probe's signal would reach that handler: not asked
    finally:
        signal.signal(signal.SIGURG, previous)
    assert probe(tmp_path) is None  # a directory: no lease, no answer
