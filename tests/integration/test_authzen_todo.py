"""The AuthZEN interop suite's Todo scenario through the real `mcp-preconditions pdp` server (SPEC §16):
`policies/authzen-todo.toml` answers every decision of the newest Todo decision file
(tests/data/authzen/, SOURCE.md says where it comes from), as single evaluations and as batches
under each of the three `evaluations_semantic` values.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mcp_preconditions.authzen import Semantic
from mcp_preconditions.pdp.wire import decisions_of
from tests.fixtures.authzen import TODO_POLICY, PdpProcess, pdp_server, todo_decisions

pytestmark = pytest.mark.integration
DATA = todo_decisions()
SEMANTICS = ("execute_all", "deny_on_first_deny", "permit_on_first_permit")


@pytest.fixture(scope="module")
def todo() -> Iterator[PdpProcess]:
    with pdp_server() as pdp:
        yield pdp


def post(pdp: PdpProcess, path: str, body: Any) -> Any:
    response = httpx.post(f"{pdp.url}{path}", json=body, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    return response.json()


def short_circuited(expected: list[bool], semantic: str) -> list[bool]:
    """The decisions a batch answers under `semantic` (AuthZEN 1.0: up to and including the first
    deny, or the first permit)."""
    stop = {"deny_on_first_deny": False, "permit_on_first_permit": True}.get(semantic)
    if stop is None or stop not in expected:
        return expected
    return expected[:expected.index(stop) + 1]


def test_the_file_is_the_one_recorded() -> None:
    assert (len(DATA["evaluation"]), len(DATA["evaluations"])) == (40, 3)


@pytest.mark.parametrize("case", DATA["evaluation"],
                         ids=[f"{i}-{c['request']['action']['name']}" for i, c in
                              enumerate(DATA["evaluation"])])
def test_every_evaluation(todo: PdpProcess, case: dict[str, Any]) -> None:
    answer = post(todo, "/access/v1/evaluation", case["request"])
    assert answer["decision"] is case["expected"]
    if not case["expected"]:  # why, for the PEP's administrator: the unmet requirement
        assert answer["context"]["reason_admin"]["unmet"][0].startswith("capability:todo.")


@pytest.mark.parametrize("semantic", SEMANTICS)
@pytest.mark.parametrize("index", range(len(DATA["evaluations"])))
def test_every_batch_of_the_file(todo: PdpProcess, index: int, semantic: str) -> None:
    case = DATA["evaluations"][index]
    expected = [d["decision"] for d in case["expected"]]
    answer = post(todo, "/access/v1/evaluations",
                  {**case["request"], "options": {"evaluations_semantic": semantic}})
    assert [d["decision"] for d in answer["evaluations"]] == short_circuited(expected, semantic)
    # and an enforcement point's reader (pdp/wire.py) takes the answer as it is
    read = decisions_of(answer, len(expected), Semantic(semantic))
    assert [d.decision for d in read] == short_circuited(expected, semantic)


@pytest.mark.parametrize("semantic", SEMANTICS)
def test_every_evaluation_as_one_batch(todo: PdpProcess, semantic: str) -> None:
    """All 40 single requests as the items of one batch (no defaults), in the file's order."""
    expected = [c["expected"] for c in DATA["evaluation"]]
    answer = post(todo, "/access/v1/evaluations",
                  {"evaluations": [c["request"] for c in DATA["evaluation"]],
                   "options": {"evaluations_semantic": semantic}})
    assert [d["decision"] for d in answer["evaluations"]] == short_circuited(expected, semantic)


def test_a_batch_of_one_subject_shares_its_defaults(todo: PdpProcess) -> None:
    """Morty's requests of the file as one batch: subject and action given once, at the top."""
    morty = [c for c in DATA["evaluation"] if c["request"]["subject"]["id"].startswith("CiRmZDE2")
             and c["request"]["action"]["name"] == "can_delete_todo"]
    answer = post(todo, "/access/v1/evaluations", {
        "subject": morty[0]["request"]["subject"], "action": {"name": "can_delete_todo"},
        "evaluations": [{"resource": c["request"]["resource"]} for c in morty]})
    assert [d["decision"] for d in answer["evaluations"]] == [c["expected"] for c in morty]


def test_the_metadata_and_the_request_id(todo: PdpProcess) -> None:
    metadata = httpx.get(f"{todo.url}/.well-known/authzen-configuration", timeout=10)
    assert metadata.json() == {
        "policy_decision_point": todo.url,
        "access_evaluation_endpoint": f"{todo.url}/access/v1/evaluation",
        "access_evaluations_endpoint": f"{todo.url}/access/v1/evaluations"}
    answered = httpx.post(f"{todo.url}/access/v1/evaluation", json=DATA["evaluation"][0]["request"],
                          headers={"X-Request-ID": "bfe9eb29-ab87"}, timeout=10)
    assert answered.headers["x-request-id"] == "bfe9eb29-ab87"


def test_an_edited_policy_decides_the_next_request(tmp_path: Path) -> None:
    """The policy file is watched: published by atomic rename, the new one answers within a poll."""
    policy = tmp_path / "todo.toml"
    policy.write_text(TODO_POLICY.read_text(encoding="utf-8"), encoding="utf-8")
    beth_creates = next(c["request"] for c in DATA["evaluation"]
                        if c["request"]["subject"]["id"].startswith("CiRmZDM2")
                        and c["request"]["action"]["name"] == "can_create_todo")
    with pdp_server(policy, "--policy-poll-seconds", "0.1") as pdp:
        assert post(pdp, "/access/v1/evaluation", beth_creates)["decision"] is False
        edited = tmp_path / "todo.toml.tmp"
        edited.write_text(policy.read_text(encoding="utf-8").replace(
            'capabilities = ["todo.read"]\nwhen = ["auth:claim:roles:viewer"]',
            'capabilities = ["todo.read", "todo.create"]\nwhen = ["auth:claim:roles:viewer"]'),
            encoding="utf-8")
        edited.replace(policy)
        deadline = time.monotonic() + 10
        while post(pdp, "/access/v1/evaluation", beth_creates)["decision"] is False:
            assert time.monotonic() < deadline, pdp.output()
            time.sleep(0.05)
