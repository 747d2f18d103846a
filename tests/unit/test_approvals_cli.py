"""Approvals as what they are on the command line and in the explorer (SPEC §15): decided per call,
by a person. `check` says NEEDS APPROVAL and who decides (`asks the caller`, `needs an approver`),
never satisfied or unsatisfied; `policy test` takes each approval as given and decides the call on
the rest, saying so; the explorer's outcomes carry the same statuses. Exact output, in-process.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from mcp_preconditions.explore import Inputs, Workbench, build_app
from tests.fixtures.cli_main import run

POLICY = """[approvals.confirm]
approvers = "self"
[approvals.release]
approvers = ["auth:claim:role:rm"]
[quotas.once]
calls = 1
per_seconds = 3600
[tools.wipe]
requirements = ["approval:confirm"]
[tools.deploy]
requirements = ["auth:claim:role:dev", "approval:release", "quota:once"]
"""
TOOLS = [{"name": "wipe", "inputSchema": {"type": "object"}},
         {"name": "deploy", "inputSchema": {"type": "object"}}]
APPROVER = ("decided per call, by a person: an approver approves the call on the gateway's "
            "approval page")


@pytest.fixture(autouse=True)
def _files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)
    Path("policy.toml").write_text(POLICY, encoding="utf-8")
    Path("tools.json").write_text(json.dumps(TOOLS), encoding="utf-8")
    Path("dev.json").write_text('{"sub": "alice", "role": "dev"}', encoding="utf-8")


def test_check_says_who_approves(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "--policy", "policy.toml", "--tools", "tools.json",
                       "--claims", "dev.json")
    assert code == 0
    assert out.splitlines()[-3:] == [
        "TOOL    DECISION        UNMET",
        "wipe    NEEDS APPROVAL  approval:confirm (asks the caller)",
        "deploy  NEEDS APPROVAL  approval:release (needs an approver)"]


def test_check_of_one_tool_shows_the_approval_as_a_persons_decision(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "--policy", "policy.toml", "--tools", "tools.json",
                       "--claims", "dev.json", "--tool", "deploy")
    assert code == 0
    assert out.splitlines()[-5:] == [
        "deploy: NEEDS APPROVAL",
        "  STATUS             REQUIREMENT          REASON",
        "  satisfied          auth:claim:role:dev  claim 'role' has 'dev'",
        f"  needs an approver  approval:release     {APPROVER}",
        "  not_asked          quota:once           not asked: the call is refused for another "
        "requirement"]


def test_check_json_names_the_approvals(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "--policy", "policy.toml", "--tools", "tools.json",
                       "--format", "json")
    assert code == 0
    tools = json.loads(out)["tools"]
    assert tools[0] == {"name": "wipe", "allowed": False, "unmet": ["approval:confirm"],
                        "errors": [], "approvals": {"approval:confirm": "asks_the_caller"}}
    assert "approvals" not in tools[1]  # anonymous: refused for its role, no approval reached


def test_policy_test_takes_approvals_as_given(capsys: pytest.CaptureFixture[str]) -> None:
    Path("tests.toml").write_text("""policy = "policy.toml"
tools = "tools.json"
[[cases]]
name = "a developer"
claims = {sub = "alice", role = "dev"}
expect.wipe = {allowed = true}
expect.deploy = {allowed = true}
[[cases]]
name = "a developer who used the quota"
claims = {sub = "alice", role = "dev"}
quota_used = {once = 1}
expect.deploy = {allowed = false, unmet = ["quota:once"]}
""", encoding="utf-8")
    code, out, _ = run(capsys, "policy", "test", "tests.toml")
    assert code == 0
    given = "(taken as given: a person decides each call)"
    assert out.splitlines() == [
        "PASS  a developer",
        f"      wipe: approval:confirm asks the caller {given}",
        f"      deploy: approval:release needs an approver {given}",
        "PASS  a developer who used the quota",
        f"      deploy: approval:release needs an approver {given}",
        "2 passed, 0 failed"]
    code, out, _ = run(capsys, "policy", "test", "tests.toml", "--format", "json")
    assert json.loads(out)["cases"][0]["approvals"] == [
        "wipe: approval:confirm asks the caller", "deploy: approval:release needs an approver"]


@pytest.fixture
def explore(tmp_path: Path) -> Iterator[Any]:
    clients: list[TestClient] = []

    def ask(path: str = "/api/decisions", **extra: str) -> dict[str, Any]:
        bench = Workbench(Inputs(str(tmp_path / "policy.toml"), POLICY, TOOLS, "tools.json"))
        client = TestClient(build_app(bench, "t0ken", ["testserver"]))
        clients.append(client)
        response = client.post(path, json={"policy": POLICY, "claims": '{"sub": "a", "role": "dev"}',
                                           **extra}, headers={"x-explore-token": "t0ken"})
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer

    yield ask
    for client in clients:
        client.close()


def test_the_explorer_shows_who_approves(explore: Any) -> None:
    tools = {t["name"]: t for t in explore()["tools"]}
    assert [(o["requirement"], o["status"]) for o in tools["deploy"]["outcomes"]] == [
        ("auth:claim:role:dev", "satisfied"), ("approval:release", "needs_an_approver"),
        ("quota:once", "not_asked")]
    assert tools["wipe"]["outcomes"][0]["status"] == "asks_the_caller"
    call = explore("/api/call", tool="deploy", arguments="")["call"]["decision"]
    assert call["outcomes"][1]["reason"] == APPROVER
