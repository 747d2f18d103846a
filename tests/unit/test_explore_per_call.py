"""What nothing offline can decide, shown as what it is (issue 40 item 9): a `credential:KEY` is
obtained per call by the gateway, for the caller, so `check` and the explorer never call a tool
that carries one ALLOWED (they used to drop it, or stop on its namespace); an approval is given per
call by a person, so a tool that needs one is not "depends on arguments". The credential is decided
where the gateway decides it, after every other requirement, and an approval after it. The
explorer's views through its JSON endpoints (Starlette's test client), `check` in-process; exact
output. tests/integration/test_explore_browser_per_call.py shows the page in Chromium.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from mcp_preconditions.cli import main
from mcp_preconditions.explore import Inputs, Workbench, build_app

POLICY = """environment = ["staging"]
[approvals.confirm]
approvers = "self"
[approvals.release]
approvers = ["auth:claim:role:rm"]
[tools.wiki__publish]
requirements = ["approval:release"]
[tools.wipe]
requirements = ["approval:confirm"]
[tools.wiki__prod]
requirements = ["env:production"]
"""


def tool(name: str, *requirements: str) -> dict[str, Any]:
    return {"name": name, "inputSchema": {"type": "object"},
            **({"execution": {"requirements": list(requirements)}} if requirements else {})}


# As a gateway lists them: every tool of the server `wiki` carries `credential:wiki`.
TOOLS = [tool("wiki__read", "credential:wiki"), tool("wiki__publish", "credential:wiki"),
         tool("wiki__prod", "credential:wiki"), tool("wipe"), tool("open")]
CREDENTIAL = ("decided per call, at the gateway: the caller's own credential for server 'wiki', "
              "which nothing offline can obtain")
CONNECTED = ("decided per call, at the gateway: an account the caller connects (kind oauth) for "
             "server 'wiki', which nothing offline can obtain")
APPROVER = ("decided per call, by a person: an approver approves the call on the gateway's "
            "approval page")


@pytest.fixture
def explore(tmp_path: Path) -> Iterator[Any]:
    """Ask the page's endpoint `path` with `body`, the explorer started on TOOLS (`kinds`: the
    servers with credentials its gateway config names, None: from a tools file)."""
    clients: list[TestClient] = []

    def ask(path: str, kinds: Mapping[str, str] | None = None, **body: Any) -> dict[str, Any]:
        bench = Workbench(Inputs(str(tmp_path / "policy.toml"), POLICY, TOOLS, "tools.json",
                                 credentials=kinds))
        client = TestClient(build_app(bench, "t0ken", ["testserver"]))
        clients.append(client)
        response = client.post(path, json={"policy": POLICY, **body},
                               headers={"x-explore-token": "t0ken"})
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer

    yield ask
    for client in clients:
        client.close()


def outcomes(tool: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(o["requirement"], o["status"], o["reason"]) for o in tool["outcomes"]]


def test_who_can_shows_a_credential_and_an_approval_as_decided_per_call(explore: Any) -> None:
    answer = explore("/api/decisions")
    assert answer["policy"]["problems"] == []  # `credential:` is known: no unknown namespace
    tools = {t["name"]: t for t in answer["tools"]}
    assert {n: (t["allowed"], t["verdict"], t["some_arguments"]) for n, t in tools.items()} == {
        "wiki__read": (False, "needs_credential", False),
        "wiki__publish": (False, "needs_credential", False),
        "wiki__prod": (False, "denied", False),
        "wipe": (False, "needs_approval", False),  # was "DEPENDS ON ARGUMENTS"
        "open": (True, "allowed", False)}
    assert outcomes(tools["wiki__read"]) == [("credential:wiki", "needs_a_credential", CREDENTIAL)]
    # The approval comes after the credential, and a person gives it once there is one.
    assert outcomes(tools["wiki__publish"]) == [
        ("credential:wiki", "needs_a_credential", CREDENTIAL),
        ("approval:release", "needs_an_approver", APPROVER + ", once the caller's credential is obtained")]
    # Refused for another requirement: the gateway asks for no credential, nor does the page.
    assert outcomes(tools["wiki__prod"]) == [
        ("credential:wiki", "not_asked", "not asked: the call is refused for another requirement"),
        ("env:production", "unsatisfied", "environment label 'production' is not among this "
                                          "server's labels")]


def test_a_gateway_configs_kinds_say_which_credential(explore: Any) -> None:
    tools = {t["name"]: t for t in explore("/api/decisions", {"wiki": "oauth"})["tools"]}
    assert outcomes(tools["wiki__read"]) == [("credential:wiki", "needs_a_credential", CONNECTED)]
    # A server the config gives no credentials: the tool's requirement is refused as the gateway
    # refuses it.
    problems = explore("/api/decisions", {"crm": "token-exchange"})["policy"]["problems"]
    assert problems == [
        f"tools.json: tool '{name}': requirement 'credential:wiki': no server 'wiki' has credentials "
        "(servers with credentials: 'crm') (accepted forms: credential:KEY, a server the gateway "
        "reaches with each caller's own credential)" for name in ("wiki__read", "wiki__publish",
                                                                   "wiki__prod")]


def test_a_call_tried_says_it_is_decided_per_call(explore: Any) -> None:
    credential = explore("/api/call", tool="wiki__read", arguments="{}")["call"]
    assert credential["decision"]["verdict"] == "needs_credential"
    assert credential["decided_per_call"] is True
    approval = explore("/api/call", tool="wipe", arguments="{}")["call"]
    assert (approval["decision"]["verdict"], approval["decided_per_call"]) == ("needs_approval", True)
    denied = explore("/api/call", tool="wiki__prod", arguments="{}")["call"]
    assert (denied["decision"]["verdict"], denied["decided_per_call"]) == ("denied", False)
    assert denied["denial_text"] == ("Tool 'wiki__prod' was not run: unmet requirements: "
                                     "env:production. Ask an operator.")


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)
    Path("policy.toml").write_text(POLICY, encoding="utf-8")
    Path("tools.json").write_text(json.dumps(TOOLS), encoding="utf-8")


def test_check_takes_a_gateways_tools_and_never_allows_a_credential(
        files: None, capsys: pytest.CaptureFixture[str]) -> None:
    """It stopped with "unknown namespace 'credential'" (exit 2) on the tools a gateway lists."""
    assert main(["check", "--policy", "policy.toml", "--tools", "tools.json"]) == 0
    assert capsys.readouterr().out.splitlines()[-6:] == [
        "TOOL           DECISION            UNMET",
        "wiki__read     NEEDS A CREDENTIAL  credential:wiki (needs a credential)",
        "wiki__publish  NEEDS A CREDENTIAL  credential:wiki (needs a credential)",
        "wiki__prod     DENIED              env:production",
        "wipe           NEEDS APPROVAL      approval:confirm (asks the caller)",
        "open           ALLOWED"]
    assert main(["check", "--policy", "policy.toml", "--tools", "tools.json", "--tool",
                 "wiki__publish"]) == 0
    assert capsys.readouterr().out.splitlines()[-4:] == [
        "wiki__publish: NEEDS A CREDENTIAL",
        "  STATUS              REQUIREMENT       REASON",
        f"  needs a credential  credential:wiki   {CREDENTIAL}",
        f"  needs an approver   approval:release  {APPROVER}, once the caller's credential is obtained"]
    assert main(["check", "--policy", "policy.toml", "--tools", "tools.json", "--format", "json"]) == 0
    read = json.loads(capsys.readouterr().out)["tools"][0]
    assert read == {"name": "wiki__read", "allowed": False, "unmet": ["credential:wiki"],
                    "errors": [], "credentials": ["credential:wiki"]}


def test_a_credential_without_a_server_is_one_line(files: None,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    Path("tools.json").write_text(json.dumps([tool("x", "credential:")]), encoding="utf-8")
    assert main(["check", "--policy", "policy.toml", "--tools", "tools.json"]) == 2
    assert capsys.readouterr().err == (
        "mcp-preconditions: error: tools.json: tool 'x': requirement 'credential:': credential: "
        "needs a server key (credential:KEY) (accepted forms: credential:KEY, a server the gateway "
        "reaches with each caller's own credential)\n")
