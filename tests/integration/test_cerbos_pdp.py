"""The real Cerbos PDP of the AuthZEN tests (tests/fixtures/cerbos.py), asked directly: an Access
Evaluation and an Access Evaluations batch of the Todo scenario and of the tool policy, every
listener on 127.0.0.1, and a missing binary failing the test that needs it (never a skip).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.authzen import todo_decisions, with_properties
from tests.fixtures.cerbos import CerbosPdp, cerbos_binary, started

pytestmark = pytest.mark.integration
DATA = todo_decisions()
OPERATOR = {"type": "identity", "id": "ada", "properties": {"iss": "https://idp.example",
                                                             "roles": ["operator"]}}


def post(pdp: CerbosPdp, path: str, body: Any) -> Any:
    response = httpx.post(f"{pdp.url}{path}", json=body, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def tool(name: str, action: str = "tools/call", **arguments: int) -> dict[str, Any]:
    return {"action": {"name": action},
            "resource": {"type": "tool", "id": name,
                         "properties": {"server": "everything", "arguments": arguments}}}


def test_cerbos_answers_every_todo_evaluation(cerbos: CerbosPdp) -> None:
    answers = [post(cerbos, "/access/v1/evaluation", with_properties(c["request"]))["decision"]
               for c in DATA["evaluation"]]
    assert answers == [c["expected"] for c in DATA["evaluation"]]


def test_cerbos_answers_the_todo_batches(cerbos: CerbosPdp) -> None:
    for case in DATA["evaluations"]:
        assert post(cerbos, "/access/v1/evaluations", with_properties(case["request"])) == {
            "evaluations": case["expected"]}


def test_cerbos_decides_who_may_call_which_tool(cerbos: CerbosPdp) -> None:
    """The fixtures' tool policy, asked as SPEC §16's enforcement point asks (one batch, the
    requirement as the context of every item)."""
    batch = {"subject": OPERATOR, "context": {"requirement": "pdp:corp"},
             "evaluations": [tool("add", a=1, b=2), tool("echo"), tool("echo", "tools/list"),
                             tool("longRunningOperation")]}
    assert post(cerbos, "/access/v1/evaluations", batch) == {"evaluations": [
        {"decision": True}, {"decision": True}, {"decision": True}, {"decision": False}]}
    nobody = {**OPERATOR, "properties": {"roles": []}}
    assert post(cerbos, "/access/v1/evaluation", {"subject": nobody, **tool("echo")}) == {
        "decision": False}
    assert post(cerbos, "/access/v1/evaluation", {"subject": OPERATOR, **tool("add", a=99, b=2)}) == {
        "decision": False}


def test_a_batch_without_a_context_is_refused(cerbos: CerbosPdp) -> None:
    response = httpx.post(f"{cerbos.url}/access/v1/evaluations", timeout=10, json={
        "subject": OPERATOR, "evaluations": [tool("echo")]})
    assert response.status_code == 400
    assert "context" in response.json()["message"]


def test_cerbos_answers_items_of_one_resource_alike(cerbos: CerbosPdp) -> None:
    """What an enforcement point must know of Cerbos 0.51: the items of one batch that name the same
    resource (type and id) all get the first one's decision. Alone, the second is refused; after
    an allowed one, it is "allowed" too. One evaluation per requirement of one tool avoids it."""
    base = {"subject": OPERATOR, "context": {"requirement": "pdp:corp"}}
    assert post(cerbos, "/access/v1/evaluations", {**base, "evaluations": [
        tool("add", a=100, b=2)]}) == {"evaluations": [{"decision": False}]}
    assert post(cerbos, "/access/v1/evaluations", {**base, "evaluations": [
        tool("add", a=1, b=2), tool("add", a=100, b=2)]}) == {
        "evaluations": [{"decision": True}, {"decision": True}]}


def _listeners(pid: int) -> list[str]:
    """The local `ADDRESS:PORT` (hex, as /proc/net/tcp* shows them) of the process's listening
    sockets."""
    inodes = set()
    for link in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = link.readlink().name
        except FileNotFoundError:  # closed meanwhile (a connection): not a listener
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    return [fields[1] for table in ("tcp", "tcp6")
            for fields in (line.split() for line in
                           Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:])
            if fields[3] == "0A" and fields[9] in inodes]  # 0A: LISTEN


def test_every_listener_is_on_127_0_0_1(cerbos: CerbosPdp) -> None:
    """HTTP (AuthZEN), gRPC and the debug (gops) listener: three, each on 127.0.0.1 only."""
    assert cerbos.process is not None
    listeners = _listeners(cerbos.process.pid)
    assert len(listeners) == 3
    assert {address.split(":")[0] for address in listeners} == {"0100007F"}  # 127.0.0.1


def test_a_missing_binary_fails_never_skips(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"cerbos-\w+-\w+ is missing: run `npm ci` in"):
        cerbos_binary(tmp_path)
    with pytest.raises(pytest.fail.Exception, match="cannot start Cerbos for the AuthZEN tests: "):
        started(binary=tmp_path / "cerbos-linux-x64")
