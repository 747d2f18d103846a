"""A reload's checks (`PolicyReloader.add_check`, SPEC §15): a new policy the process cannot serve
(a stdio gateway's approval pages it has nowhere to show) is refused like an invalid file: the old
snapshot stays, the failure listeners hear the reason, `last_error` says it; a policy that passes
is swapped in.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mcp_preconditions.cli._approvals import reload_check
from mcp_preconditions.drivers.reload import PolicyReloader
from mcp_preconditions.guard import Guard
from mcp_preconditions.policy.load import load_policy

OPEN = '[tools.echo]\nrequirements = []\n'
APPROVED = '[approvals.payout]\napprovers = ["auth:claim:role:treasury"]\n' \
           '[tools.echo]\nrequirements = ["approval:payout"]\n'
SELF = '[approvals.confirm]\napprovers = "self"\n[tools.echo]\nrequirements = ["approval:confirm"]\n'


def reloader(tmp_path: Path, *, listen: tuple[str, int] | None = None,
             pages_listen: str | None = None) -> tuple[PolicyReloader, Path, list[str]]:
    path = tmp_path / "policy.toml"
    path.write_text(OPEN, encoding="utf-8")
    guard = Guard(load_policy(path), {}, entry_points=False)
    found = PolicyReloader(guard, path)
    args = argparse.Namespace(pages_listen=pages_listen, public_url=None)
    found.add_check(reload_check(args, listen))
    failures: list[str] = []
    found.add_failure_listener(failures.append)
    return found, path, failures


def test_a_stdio_gateway_without_pages_refuses_a_policy_with_approvers(tmp_path: Path) -> None:
    policy, path, failures = reloader(tmp_path)
    before = policy.revision
    path.write_text(APPROVED, encoding="utf-8")
    assert policy.reload() is None and policy.revision == before
    problem = (f"{path}: invalid policy (1 problem(s)):\n  approvals.payout: approvers decide it on "
               "the gateway's approval pages, which a stdio gateway serves only with --pages-listen "
               "http://127.0.0.1:PORT")
    assert policy.last_error == problem and failures == [problem]
    assert policy.guard.requirements_for("echo") == ()  # the old policy is in force
    path.write_text(SELF, encoding="utf-8")  # asking the caller needs no page: swapped in
    assert policy.reload() is not None and failures == [problem]
    assert policy.guard.requirements_for("echo") == ("approval:confirm",)


def test_a_gateway_that_serves_pages_takes_it(tmp_path: Path) -> None:
    for options in ({"listen": ("127.0.0.1", 8080)}, {"pages_listen": "http://127.0.0.1:9"}):
        policy, path, failures = reloader(tmp_path, **options)
        path.write_text(APPROVED, encoding="utf-8")
        assert policy.reload() is not None and failures == []
        assert policy.guard.requirements_for("echo") == ("approval:payout",)
