"""The replica id in decision records: hostname:pid by default, the environment variable verbatim,
and the labels a Guard writes into every record."""

from __future__ import annotations

import json
import logging
import os
import socket

import pytest

from mcp_preconditions import Guard, Identity
from mcp_preconditions.decisions import LoggingRecorder
from mcp_preconditions.replica import REPLICA_ID_ENV, default_replica_id, replica_labels


def test_the_default_is_hostname_and_pid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REPLICA_ID_ENV, raising=False)
    assert default_replica_id() == f"{socket.gethostname()}:{os.getpid()}"


def test_the_environment_overrides_it_verbatim(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REPLICA_ID_ENV, " gateway-7 ")
    assert default_replica_id() == " gateway-7 "  # exact: no trimming
    assert default_replica_id({REPLICA_ID_ENV: "pod-a"}) == "pod-a"


def test_an_empty_value_falls_back_to_hostname_and_pid() -> None:
    assert default_replica_id({REPLICA_ID_ENV: ""}) == f"{socket.gethostname()}:{os.getpid()}"


def test_labels_reach_every_decision_record(caplog: pytest.LogCaptureFixture) -> None:
    labels = replica_labels(upstream="weather", replica="r1")
    assert labels == {"replica": "r1", "upstream": "weather"}
    assert replica_labels(replica="r2") == {"replica": "r2"}
    guard = Guard(None, {"launch": ["env:production"]}, entry_points=False,
                  recorder=LoggingRecorder("test.replica", labels))
    with caplog.at_level(logging.INFO, logger="test.replica"):
        guard.decide("launch", Identity())
    record = json.loads(caplog.records[-1].getMessage())
    assert (record["replica"], record["upstream"], record["tool"]) == ("r1", "weather", "launch")
