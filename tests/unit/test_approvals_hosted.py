"""A hosted server serves no approval pages (SPEC §15): a policy with an approval that approvers
decide is refused at start, in one line naming the approval and saying to put the gateway in front;
`serve` exits 2 with that line. A `self` approval starts; its caller can be asked when its client
declared form elicitation (at 2025-11-25 on a connection with a back channel, at 2026-07-28 with an
input round), and only a retry carrying our own round's state answers one.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import mcp_types
import pytest

from mcp_preconditions.calls import Reply, reply_of, without_round
from mcp_preconditions.cli import main
from mcp_preconditions.errors import RequirementError
from mcp_preconditions.guard import Guard
from mcp_preconditions.integrations._asking import can_ask
from mcp_preconditions.integrations._hosted import ServerGuard
from mcp_preconditions.late import INPUT_KEY, STATE_PREFIX
from mcp_preconditions.policy.load import parse_policy

POLICY = '[approvals.release]\napprovers = ["auth:claim:role:rm"]\n'


def line(path: str) -> str:
    return (f"{path}: approvals.release: approvers decide it on the gateway's approval pages, which "
            "a hosted server does not serve: put the mcp-preconditions gateway in front of this "
            'server, or use approvers = "self"')


def test_a_hosted_server_refuses_an_approver_decided_approval() -> None:
    guard = Guard(parse_policy(POLICY.encode(), "policy.toml"))
    with pytest.raises(RequirementError) as caught:
        ServerGuard(guard)
    assert caught.value.messages == [line("policy.toml")]


def test_a_self_approval_is_hosted() -> None:
    guard = Guard(parse_policy(b'[approvals.confirm]\napprovers = "self"\n', "policy.toml"))
    assert ServerGuard(guard).guard is guard


def test_serve_exits_2_naming_the_approval(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """`mcp-preconditions serve` as main() runs it, in this process: exit 2, that one line."""
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY, encoding="utf-8")
    assert main(["serve", "--policy", str(policy)]) == 2
    assert capsys.readouterr().err.splitlines() == [f"mcp-preconditions: error: {line(str(policy))}"]


def session(version: str, elicitation: dict[str, Any] | None, back: bool = True) -> SimpleNamespace:
    """What an SDK session shows the adapter: its version, back channel and declared capabilities."""
    declared = mcp_types.ClientCapabilities.model_validate(
        {} if elicitation is None else {"elicitation": elicitation})
    return SimpleNamespace(protocol_version=version, can_send_request=back,
                           client_capabilities=declared)


@pytest.mark.parametrize(("asked", "expected"), [
    (session("2025-11-25", {}), True), (session("2025-11-25", {"form": {}}), True),
    (session("2025-11-25", {"url": {}}), False), (session("2025-11-25", None), False),
    (session("2025-11-25", {"form": {}}, back=False), False),
    (session("2026-07-28", {"form": {}}, back=False), True), (session("2026-07-28", {}), True),
    (session("2026-07-28", {"url": {}}), False), (session("2026-07-28", None), False), (None, False)])
def test_who_can_be_asked(asked: object, expected: bool) -> None:
    assert can_ask(asked) is expected


def test_only_our_rounds_retry_is_a_reply_and_its_fields_never_reach_the_tool() -> None:
    answer = {INPUT_KEY: {"action": "accept", "content": {}}}
    assert reply_of(STATE_PREFIX + "rid", answer) == Reply("rid", "accept")
    assert reply_of(STATE_PREFIX + "rid", None) == Reply("rid", None)  # no answer: denies
    assert reply_of("the-tools-own-state", answer) is None  # the tool's round: not ours
    params = {"name": "wipe", "arguments": {}, "requestState": STATE_PREFIX + "rid",
              "inputResponses": answer, "_meta": {"k": 1}}
    assert without_round(params) == {"name": "wipe", "arguments": {}, "_meta": {"k": 1}}
