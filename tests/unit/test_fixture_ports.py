"""The ports the tests give to servers they start (tests/fixtures/ports.py): below the kernel's
ephemeral range, where no outgoing connection and no `bind(0)` can take them between the choice and
the server's bind, and in a band of each pytest-xdist worker's own."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from tests.fixtures import ports


def test_a_port_is_free_and_below_the_ephemeral_range() -> None:
    port = ports.free_port()
    assert port < ports._ephemeral_low()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # free: binds


def test_ports_are_handed_out_in_turn_and_one_in_use_is_skipped() -> None:
    band = ports._band()
    assert band is not None
    first = ports.free_port()
    after = band[(band.index(first) + 1) % len(band)]
    with socket.socket() as held:
        held.bind(("127.0.0.1", after))  # the next in turn, taken by someone else meanwhile
        following = ports.free_port()
    assert following in band and following not in (first, after)


def test_each_worker_has_a_band_of_its_own() -> None:
    probe = "from tests.fixtures.ports import _band; b = _band(); print(b.start, b.stop)"
    bands = []
    for worker in ("gw0", "gw1", "gw3", "gw7", ""):
        env = {"PYTEST_XDIST_WORKER": worker, "PATH": "/usr/bin:/bin"}
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                              env=env, check=True, cwd=Path(__file__).resolve().parents[2])
        start, stop = map(int, done.stdout.split())
        bands.append(range(start, stop))
    assert all(set(a).isdisjoint(b) for i, a in enumerate(bands) for b in bands[i + 1:])
