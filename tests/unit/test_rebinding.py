"""The Host/Origin check of a loopback listener (rebinding.py): loopback names with or without a
port are answered; any other name, as a rebound web page sends it, is refused."""

from __future__ import annotations

import pytest

from mcp_preconditions.rebinding import Security

SECURITY = Security.for_host("127.0.0.1")


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.1:8080", "localhost", "localhost:80",
                                  "[::1]", "[::1]:9000"])
def test_loopback_hosts_with_or_without_a_port_are_answered(host: str) -> None:
    assert SECURITY is not None
    assert SECURITY.refuse(host, None) is None
    assert SECURITY.refuse(host, "http://" + host) is None


@pytest.mark.parametrize("host", ["rebound.attacker.test", "rebound.attacker.test:8080",
                                  "127.0.0.1.attacker.test", "localhost.attacker.test:80",
                                  "127.0.0.10:80", "", "LOCALHOST:80"])
def test_any_other_host_is_refused_421(host: str) -> None:
    assert SECURITY is not None
    assert SECURITY.refuse(host, None) == (421, b"Invalid Host header")


def test_a_foreign_origin_is_refused_403() -> None:
    assert SECURITY is not None
    assert SECURITY.refuse("127.0.0.1:80", "http://rebound.attacker.test") == (
        403, b"Invalid Origin header")


def test_no_host_is_refused_unless_the_path_answers_health_checkers() -> None:
    assert SECURITY is not None
    assert SECURITY.refuse(None, None) == (421, b"Invalid Host header")
    assert SECURITY.refuse(None, None, hostless=True) is None


def test_a_listener_on_another_address_has_no_host_check() -> None:
    assert Security.for_host("0.0.0.0") is None
