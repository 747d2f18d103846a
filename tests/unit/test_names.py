"""Policy tool names that nearly match a host's tool (a diagnostic; decisions stay exact)."""

from __future__ import annotations

import logging

import pytest

from mcp_preconditions.errors import PolicyError
from mcp_preconditions.guard import Guard
from mcp_preconditions.names import (
    EDIT_MIN_LENGTH,
    NameFindings,
    check_tool_names,
    one_edit_apart,
    skeleton,
    squashed,
)
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


# --- separators and one edit (issue 22, item 7) ----------------------------------------------------
HOST = ["write_file", "read_text_file", "list_directory", "get_user", "report_v1", "head", "move"]


@pytest.mark.parametrize("near", ["write-file", "writefile", "write.file", "Write_File", "write file",
                                  "WRITE-FILE", "write__file", "write_.file"])
def test_a_name_differing_only_in_separators_is_a_near_miss(near: str) -> None:
    assert check_tool_names([near], HOST).near_misses == ((near, "write_file"),)


@pytest.mark.parametrize(("near", "edit"), [
    ("write_fle", "deletion"), ("write_fiile", "insertion"), ("write_fike", "substitution"),
    ("wirte_file", "transposition"), ("write_files", "insertion at the end"),
    ("rite_file", "deletion at the start"), ("write-fle", "separator and a deletion"),
    ("read_text_fiel", "transposition at the end"), ("list_directroy", "transposition"),
    ("Get_Users", "case and an insertion"), ("write_f\u0456le", "look-alike letter"),
])
def test_a_name_one_edit_away_is_a_near_miss(near: str, edit: str) -> None:
    found = check_tool_names([near], HOST)
    assert len(found.near_misses) == 1, edit
    assert found.near_misses[0][0] == near
    assert found.unmatched == ()


@pytest.mark.parametrize(("name", "why"), [
    ("wrote_fyle", "two substitutions"), ("write_filesx", "two insertions"),
    ("wirte_fiel", "two transpositions"), ("report_v2", "a digit for a digit is a different version"),
    ("read", "short names: no edit rule (head)"), ("mode", "short names: no edit rule (move)"),
    ("delete_file", "unrelated"),
])
def test_names_two_edits_away_short_or_versioned_are_not_near_misses(name: str, why: str) -> None:
    assert check_tool_names([name], HOST) == NameFindings((), (name,)), why


def test_a_name_that_is_exactly_one_tool_is_never_a_near_miss_of_another() -> None:
    found = check_tool_names(["write_file", "write_files"], ["write_file", "write_files", "write-file"])
    assert found == NameFindings((), ())


def test_a_near_miss_of_two_tools_names_both() -> None:
    found = check_tool_names(["write-files"], ["write_file", "write_files"])
    assert found.near_misses == (("write-files", "write_files"), ("write-files", "write_file"))


@pytest.mark.parametrize(("a", "b", "expected"), [
    ("abcde", "abcde", False), ("abcde", "abcdef", True), ("abcde", "bcde", True),
    ("abcde", "abxde", True), ("abcde", "bacde", True), ("abcde", "abced", True),
    ("abcde", "acbed", False), ("ab1de", "ab2de", False), ("ab1de", "abxde", True),
    ("abcde", "abcdefg", False), ("", "a", True),
])
def test_one_edit_apart(a: str, b: str, expected: bool) -> None:
    assert one_edit_apart(a, b) is expected
    assert one_edit_apart(b, a) is expected


def test_squashed_removes_separators_after_the_skeleton() -> None:
    assert squashed("Write\u2010File") == squashed("write.file") == squashed("write file") == "writefile"
    assert EDIT_MIN_LENGTH == 5


def test_know_tools_refuses_a_separator_near_miss_naming_both() -> None:
    guard = Guard(parse_policy(b'[tools.write-file]\nrequirements = ["env:x"]\n', "p.toml"),
                  entry_points=False)
    with pytest.raises(PolicyError) as err:
        guard.know_tools(HOST)
    assert err.value.lines() == [
        'p.toml: tools."write-file": names no tool, but nearly matches the tool "write_file" (names '
        "are compared exactly; a typo here would leave that tool less guarded than the policy says)"]
