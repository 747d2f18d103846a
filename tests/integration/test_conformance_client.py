"""The gateway as the client in the MCP conformance suite's client scenarios (SPEC §17): npm
@modelcontextprotocol/conformance (the version package.json pins, on the npm Node 22 it needs),
`conformance client --requirements REVISION` for 2025-11-25 and for 2026-07-28, with the client
command tests/fixtures/conformance_client.py: for each scenario it starts `mcp-preconditions gateway`
in front of the scenario's server and calls through it, and a person's browser connects their account
where an `auth/*` scenario's server asks for one (the gateway discovers, registers and authorizes as
an MCP client does: `kind = "oauth"` with nothing but its key).

Every scored scenario passes, the `auth/*` ones included, but those listed in NOT_PASSING with why.
The not-scored extensions (machine-to-machine grants, DPoP) are run and shown, not required: the
gateway's callers are people, whose accounts it connects. The suite's own `Total:` line is printed
for each set, and the scenario table of docs/gateway-conformance.md ("As a client") with it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures.conformance_client import PERSON
from tests.fixtures.mcp_servers import ROOT
from tests.fixtures.oidc import OidcServer
from tests.fixtures.upstreams import NODE_BIN

pytestmark = pytest.mark.integration

SETS = ("2025-11-25", "2026-07-28")
SLOTS = 3  # gateways at once (the suite starts every scenario together; two cores)
RUN_SECONDS = 3600  # a whole set, on two loaded cores
SCENARIO_TIMEOUT_MS = 2_400_000  # a scenario's driver waits for a slot, then its flows
# Scored scenarios that do not pass through the gateway today, by set, and why (none of them is the
# credentials': each is the gateway's forwarding, owned elsewhere).
NOT_PASSING: dict[str, dict[str, str]] = {
    "2025-11-25": {"sse-retry": "the gateway does not reconnect an upstream stream the server "
                                "closed with `retry` and `Last-Event-ID` (a warning)"},
    "2026-07-28": {},
}
_LINE = re.compile(r"^(?P<mark>[✓✗]) (?P<scenario>\S+): (?P<passed>\d+) passed, (?P<failed>\d+) "
                   r"failed(?:, (?P<warnings>\d+) warnings)?$")
_NOT_SCORED = re.compile(r"^  [✓✗] (?P<scenario>\S+) \((?P<reason>[^)]+)\)$")


@dataclass
class Run:
    """One requirement set's run: each scenario's line of the suite's summary, its not-scored
    scenarios (with the reason the set gives), and its `Total:` line."""

    revision: str
    lines: dict[str, re.Match[str]]
    not_scored: dict[str, str]
    total: str
    output: str

    def passing(self, scenario: str) -> bool:
        return self.lines[scenario]["mark"] == "✓"

    def table(self) -> str:
        """docs/gateway-conformance.md's table of this set, scenario by scenario."""
        rows = [f"| scenario ({self.revision}) | checks passed | through the gateway |",
                "|---|--:|---|"]
        for scenario, line in self.lines.items():
            checks = int(line["passed"]) + int(line["failed"]) + int(line["warnings"] or 0)
            verdict = "passes" if self.passing(scenario) else "fails" if int(line["failed"]) \
                else "warns"
            note = f" (not scored: {self.not_scored[scenario]})" if scenario in self.not_scored else ""
            rows.append(f"| `{scenario}` | {line['passed']} of {checks} | {verdict}{note} |")
        return "\n".join(rows)


def client_suite(revision: str, oidc: OidcServer, out: Path) -> Run:
    env = {**os.environ, "PATH": f"{NODE_BIN}{os.pathsep}{os.environ['PATH']}",
           "CONFORMANCE_OIDC_PORT": str(oidc.port), "CONFORMANCE_RUN_DIR": str(out / "drivers"),
           "CONFORMANCE_SLOTS": str(SLOTS), "CONFORMANCE_TOKEN": oidc.user_token(PERSON)}
    node = subprocess.run(["node", "--version"], env=env, capture_output=True, text=True, check=False)
    if not node.stdout.startswith("v22."):
        pytest.fail(f"the conformance suite needs the npm Node 22 in {NODE_BIN}, found "
                    f"{node.stdout.strip() or node.stderr.strip()}: run `make install`", pytrace=False)
    command = f"{sys.executable} -m tests.fixtures.conformance_client"
    done = subprocess.run(["conformance", "client", "--command", command, "--requirements", revision,
                           "--timeout", str(SCENARIO_TIMEOUT_MS), "-o", str(out / "results")],
                          env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=RUN_SECONDS - 60, check=False)
    summary = done.stdout.split("=== SUITE SUMMARY ===", 1)[-1].splitlines()
    lines = {m["scenario"]: m for m in map(_LINE.match, summary) if m is not None}
    not_scored = {m["scenario"]: m["reason"] for m in map(_NOT_SCORED.match, summary) if m}
    total = next((line for line in summary if line.startswith("Total:")), "")
    assert lines and total, (f"the conformance suite printed no summary (exit {done.returncode}):\n"
                             f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return Run(revision, lines, not_scored, total, done.stdout)


@pytest.fixture(scope="module", params=SETS)
def run(request: pytest.FixtureRequest, oidc_server: OidcServer,
        tmp_path_factory: pytest.TempPathFactory) -> Run:
    revision: str = request.param
    found = client_suite(revision, oidc_server, tmp_path_factory.mktemp(f"client-{revision}"))
    print(f"\nconformance client --requirements {revision} through the gateway: {found.total}")
    print(found.table())
    return found


@pytest.mark.timeout(RUN_SECONDS)  # the set runs once, for the first test of each
def test_every_client_scenario_that_applies_passes_through_the_gateway(run: Run) -> None:
    scored = [s for s in run.lines if s not in run.not_scored]
    failing = {s for s in scored if not run.passing(s)}
    assert failing == set(NOT_PASSING[run.revision]), (
        f"{run.revision}: {run.total}\n{run.table()}\n{run.output[-4000:]}")
    assert any(s.startswith("auth/") for s in scored)


@pytest.mark.timeout(RUN_SECONDS)
def test_each_auth_scenario_is_scored_and_passes(run: Run) -> None:
    """The OAuth scenarios of the set (SPEC §17): discovery in each of its variants, the
    Client ID Metadata Document, scopes (challenge, scopes_supported, none, step-up, a limit to
    retries), each token endpoint authentication, pre-registration; at 2026-07-28 also a resource
    that is not the server's, offline access, a moved authorization server and `iss` (RFC 9207)."""
    auth = {s for s in run.lines if s.startswith("auth/") and s not in run.not_scored}
    expected = 14 if run.revision == "2025-11-25" else 25
    assert len(auth) == expected and all(run.passing(s) for s in auth), run.table()
