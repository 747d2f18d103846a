"""Policy tool names that nearly match a host's tool (a diagnostic; decisions stay exact)."""

from __future__ import annotations

import logging

import pytest

from mcp_preconditions.errors import PolicyError
from mcp_preconditions.guard import Guard
from mcp_preconditions.names import check_tool_names, skeleton
from mcp_preconditions.policy.load import parse_policy


@pytest.mark.parametrize("near", ["Launch_Rocket", "launch_rocket ", "launch_r\u043ecket",
                                  "launch\u200b_rocket", "LAUNCH_ROCKET", "launch_ro\u0441ket"])
def test_a_near_miss_has_the_same_skeleton(near: str) -> None:
    assert near != "launch_rocket"
    assert skeleton(near) == skeleton("launch_rocket")
    found = check_tool_names([near], ["launch_rocket", "get_weather"])
    assert found.near_misses == ((near, "launch_rocket"),)
    assert found.unmatched == ()


def test_nfc_and_nfd_spellings_are_near_misses() -> None:
    found = check_tool_names(["caf\u0065\u0301"], ["caf\u00e9"])
    assert found.near_misses == (("caf\u0065\u0301", "caf\u00e9"),)


def test_exact_and_unrelated_names() -> None:
    found = check_tool_names(["launch_rocket", "nothing_like_it"], ["launch_rocket"])
    assert found == type(found)((), ("nothing_like_it",))


def test_know_tools_refuses_a_near_miss_naming_both() -> None:
    guard = Guard(parse_policy(b'[tools."launch_r\xd0\xbecket"]\nrequirements = ["env:x"]\n', "p.toml"),
                  entry_points=False)
    with pytest.raises(PolicyError) as err:
        guard.know_tools(["launch_rocket"])
    assert err.value.problems == [
        'tools."launch_r\\u043ecket": names no tool, but nearly matches the tool "launch_rocket" '
        "(names are compared exactly; a typo here would leave that tool less guarded than the "
        "policy says)"]


def test_a_reload_with_a_near_miss_keeps_the_old_snapshot() -> None:
    good = parse_policy(b'[tools.launch_rocket]\nrequirements = ["env:production"]\n', "p.toml")
    guard = Guard(good, entry_points=False)
    guard.know_tools(["launch_rocket"])
    bad = parse_policy(b'[tools.Launch_Rocket]\nrequirements = ["env:production"]\n', "p.toml")
    with pytest.raises(PolicyError):
        guard.reload(bad)
    assert guard.revision == good.revision
    assert guard.requirements_for("launch_rocket") == ("env:production",)


def test_a_name_matching_nothing_is_a_logged_warning(caplog: pytest.LogCaptureFixture) -> None:
    guard = Guard(parse_policy(b'[tools.ghost]\nrequirements = ["env:x"]\n', "p.toml"),
                  entry_points=False)
    with caplog.at_level(logging.WARNING, logger="mcp_preconditions.policy"):
        guard.know_tools(["launch_rocket"])
    assert [r.getMessage() for r in caplog.records] == ["p.toml: tools.ghost: names no tool of this server"]
