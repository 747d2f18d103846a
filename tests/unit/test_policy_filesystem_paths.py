"""policies/filesystem-paths.toml: writes only to the paths it lists, exactly; no prefix matching."""

from __future__ import annotations

import pytest

from mcp_preconditions import Guard, Identity, Principal, load_policy

WRITER = Identity(principal=Principal.from_claims({"sub": "erin", "scope": "files:write"}))


@pytest.fixture
def guard() -> Guard:
    return Guard(load_policy("policies/filesystem-paths.toml"), entry_points=False)


@pytest.mark.parametrize(("path", "allowed"), [
    ("/srv/mission/notes.md", True),
    ("/srv/mission/checklist.md", True),
    ("/srv/mission/../../etc/passwd", False),      # a prefix match would have let this through
    ("/srv/mission-old/notes.md", False),
    ("/srv/mission//notes.md", False),
    ("/srv/mission/Notes.md", False),
    ("/srv/mission/notes.md ", False),
])
def test_only_the_listed_paths_may_be_written(guard: Guard, path: str, allowed: bool) -> None:
    decision = guard.decide("write_file", WRITER, {"path": path, "content": "x"})
    assert decision.allowed is allowed
    if not allowed:
        assert decision.argument_dependent == {"capability:files.write"}


def test_a_move_needs_both_ends_listed(guard: Guard) -> None:
    ok = {"source": "/srv/mission/notes.md", "destination": "/srv/mission/notes.old.md"}
    assert guard.decide("move_file", WRITER, ok).allowed
    assert not guard.decide("move_file", WRITER, {**ok, "destination": "/tmp/x"}).allowed


def test_without_the_scope_no_path_helps(guard: Guard) -> None:
    reader = Identity(principal=Principal.from_claims({"sub": "bob"}))
    denied = guard.decide("write_file", reader, {"path": "/srv/mission/notes.md"})
    assert denied.unmet == ("capability:files.write",)
    assert denied.argument_dependent == frozenset()  # no arguments would help: a client may learn it
