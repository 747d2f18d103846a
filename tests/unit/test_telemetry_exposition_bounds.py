"""`--metrics-listen`'s own listener (telemetry/exposition.py) bounds slow clients: a connection that
sends nothing for the scrape timeout is closed, and beyond MAX_SCRAPES connections at once a new one
is answered 503 and closed at once, so slow clients hold a bounded number of threads. Real sockets
against the real listener, its bounds made small.
"""

from __future__ import annotations

import socket

import httpx
import pytest

from mcp_preconditions.telemetry import MetricsListener, exposition
from mcp_preconditions.telemetry.metrics import Metrics


def read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(1024):
        data += chunk
    return data


def test_slow_clients_are_timed_out_and_bounded(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(exposition._Quiet, "timeout", 0.2)
    monkeypatch.setattr(exposition, "MAX_SCRAPES", 3)
    listener = MetricsListener(Metrics(), "127.0.0.1", 0)
    try:
        slow = [socket.create_connection(("127.0.0.1", listener.port), timeout=10) for _ in range(3)]
        for sock in slow:
            sock.sendall(b"GET /metr")  # half a request line, and then nothing
        over = socket.create_connection(("127.0.0.1", listener.port), timeout=10)
        busy = read_all(over)
        over.close()
        for sock in slow:  # each is closed by the listener: the read ends instead of hanging
            assert read_all(sock) == b""
            sock.close()
        for _ in range(100):  # a slot is free again once its thread has ended
            page = httpx.get(listener.url, timeout=10)
            if page.status_code == 200:
                break
    finally:
        listener.close()
    assert busy.startswith(b"HTTP/1.0 503 Service Unavailable\r\n")
    assert busy.endswith(b"\r\n\r\nService Unavailable\n")
    assert page.status_code == 200 and "# HELP" in page.text
    assert "Traceback" not in capsys.readouterr().err  # a timed-out client is not an error
