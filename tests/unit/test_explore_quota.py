"""The explorer and quotas: a call the other requirements refuse asks no quota store, so its
decision has no quota outcome. The page still lists the quota, as `not_asked`, and says what an edit
added or removed from the tools' requirement lists, never from the outcomes: a policy edit that
flips a metered tool between allowed and denied removes and adds nothing. Over HTTP (Starlette's
test client), the page's JSON endpoints.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from mcp_preconditions.explore import Inputs, Workbench, build_app

QUOTA = '[quotas.hourly]\ncalls = 3\nper_seconds = 3600\n'
POLICY = QUOTA + '[tools.launch]\nrequirements = ["auth:oauth2", "quota:hourly"]\n'
# The same tool, now also for a role the caller lacks: denied, and its quota not asked.
ROLE = POLICY.replace('"quota:hourly"]', '"quota:hourly", "auth:claim:role:pilot"]')
UNMETERED = ROLE.replace('"quota:hourly", ', "")
ALICE = '{"sub": "alice"}'
NOT_ASKED = {"requirement": "quota:hourly", "status": "not_asked",
             "reason": "not asked: the call is refused for another requirement",
             "confidential": False, "from": "policy", "what_if": False}
OAUTH = {"requirement": "auth:oauth2", "status": "satisfied",
         "reason": "access token verified (claims)", "confidential": False, "from": "policy",
         "what_if": False}
ROLE_UNMET = {"requirement": "auth:claim:role:pilot", "status": "unsatisfied",
              "reason": "token has no claim 'role'", "confidential": False, "from": "policy",
              "what_if": False}


@pytest.fixture
def explore(tmp_path: Path) -> Iterator[Any]:
    """Ask the page's endpoints about an edit of a file read as `file`."""
    clients: list[TestClient] = []

    def ask(file: str, edited: str, path: str = "/api/decisions", **extra: str) -> dict[str, Any]:
        bench = Workbench(Inputs(str(tmp_path / "policy.toml"), file, [{"name": "launch"}],
                                 "tools.json"))
        client = TestClient(build_app(bench, "t0ken", ["testserver"]))
        clients.append(client)
        response = client.post(path, json={"policy": edited, "claims": ALICE, **extra},
                               headers={"x-explore-token": "t0ken"})
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        decision: dict[str, Any] = (answer["tools"][0] if path == "/api/decisions"
                                    else answer["call"]["decision"])
        return decision

    yield ask
    for client in clients:
        client.close()


def test_an_edit_that_denies_a_metered_tool_removes_nothing(explore: Any) -> None:
    tool = explore(POLICY, ROLE)
    assert (tool["allowed"], tool["was_allowed"], tool["changed"]) == (False, True, True)
    assert tool["removed"] == []  # the quota is still required: only not asked
    assert tool["unmet"] == ["auth:claim:role:pilot"]  # a quota not asked is not unmet
    assert tool["outcomes"] == [{**OAUTH, "was": None}, {**NOT_ASKED, "was": None},
                                {**ROLE_UNMET, "was": "new"}]


def test_an_edit_that_allows_a_metered_tool_adds_nothing(explore: Any) -> None:
    tool = explore(ROLE, POLICY)
    assert (tool["allowed"], tool["was_allowed"], tool["changed"]) == (True, False, True)
    assert tool["removed"] == ["auth:claim:role:pilot"]
    assert [(o["requirement"], o["status"], o["was"]) for o in tool["outcomes"]] == [
        ("auth:oauth2", "satisfied", None), ("quota:hourly", "satisfied", None)]


def test_a_quota_added_to_or_removed_from_a_denied_tool_is_new_or_removed(explore: Any) -> None:
    added = explore(UNMETERED, ROLE)
    assert (added["allowed"], added["was_allowed"], added["removed"]) == (False, False, [])
    assert added["outcomes"] == [{**OAUTH, "was": None}, {**NOT_ASKED, "was": "new"},
                                 {**ROLE_UNMET, "was": None}]
    assert added["changed"]
    removed = explore(ROLE, UNMETERED)
    assert removed["removed"] == ["quota:hourly"] and removed["changed"]
    assert [o["was"] for o in removed["outcomes"]] == [None, None]


def test_an_unedited_denied_tool_shows_its_quota_as_not_asked(explore: Any) -> None:
    tool = explore(ROLE, ROLE)
    assert "removed" not in tool and "was" not in tool["outcomes"][1]
    assert tool["outcomes"] == [OAUTH, NOT_ASKED, ROLE_UNMET]
    call = explore(ROLE, ROLE, "/api/call", tool="launch", arguments="")
    assert call["outcomes"] == tool["outcomes"] and call["unmet"] == ["auth:claim:role:pilot"]
