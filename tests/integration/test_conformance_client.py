"""The gateway as the client in the MCP conformance suite's client scenarios (SPEC §17): npm
@modelcontextprotocol/conformance (the version package.json pins), `conformance client
--requirements REVISION` for 2025-11-25 and for 2026-07-28 (tests/fixtures/conformance_client_leg.py),
the client command tests/fixtures/conformance_client.py: for each scenario it starts `mcp-preconditions
gateway` in front of the scenario's server and calls through it, and a person's browser connects
their account where an `auth/*` scenario's server asks for one (the gateway discovers, registers and
authorizes as an MCP client does: `kind = "oauth"` with nothing but its key).

Every scored `auth/*` scenario passes, and every other scored one but those of NOT_PASSING (each the
gateway's forwarding, not its credentials: conformance_client_leg.WHY says why). The not-scored
extensions (machine-to-machine grants, DPoP) are run and shown, not required: the gateway's callers
are people, whose accounts it connects. The suite's own `Total:` line is printed for each set, with
the scenario table of docs/gateway-conformance.md ("As a client").

Interop (SPEC §9): what is judged is a real gateway process's traffic to the suite's own servers and
authorization servers (Node processes the suite starts), with a real oidc-provider signing the
person in; none of it can run in the test's event loop.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.fixtures.conformance_client_leg import REQUIREMENTS, RUN_SECONDS, ClientRun, run, table
from tests.fixtures.conformance_totals import PROPERTY
from tests.fixtures.oidc import OidcServer

pytestmark = [pytest.mark.integration, pytest.mark.interop]

NOT_PASSING: dict[str, set[str]] = {
    "2025-11-25": set(),
    "2026-07-28": set(),
}
AUTH_SCORED = {"2025-11-25": 14, "2026-07-28": 25}


@pytest.fixture(scope="module")
def client_run(oidc_server: OidcServer, tmp_path_factory: pytest.TempPathFactory) -> ClientRun:
    """The 2026-07-28 set (test_conformance_client_2025.py runs the 2025-11-25 one: a file each,
    so that the two sets run side by side on two workers)."""
    return client_run_of(REQUIREMENTS[1], oidc_server, tmp_path_factory)


def client_run_of(revision: str, oidc_server: OidcServer,
                  tmp_path_factory: pytest.TempPathFactory) -> ClientRun:
    try:
        found = run(revision, oidc_server, tmp_path_factory.mktemp(f"client-{revision}"))
    except RuntimeError as exc:  # no Node 22, no suite, no summary
        pytest.fail(str(exc), pytrace=False)
    print(f"\n{found.total_line()}")
    print("\n".join(table(found)))
    return found


@pytest.mark.timeout(RUN_SECONDS)  # the set runs once, for the first test of each
def test_every_auth_scenario_passes_through_the_gateway(
        client_run: ClientRun, record_property: Callable[[str, object], None]) -> None:
    """The OAuth scenarios of the set (SPEC §17): discovery in each of its variants, the Client ID
    Metadata Document, scopes (challenge, scopes_supported, none, step-up, a limit to retries), each
    token endpoint authentication, pre-registration; at 2026-07-28 also a resource that is not the
    server's, offline access, a moved authorization server, `iss` (RFC 9207) and metadata naming
    another issuer."""
    record_property(PROPERTY, client_run.total_line())  # printed at the end of the run
    auth = [s for s in client_run.scored() if s.startswith("auth/")]
    failing = [s for s in auth if not client_run.passed[s]]
    assert (len(auth), failing) == (AUTH_SCORED[client_run.requirements], []), \
        "\n".join([client_run.total, *table(client_run), client_run.output[-4000:]])


@pytest.mark.timeout(RUN_SECONDS)
def test_every_other_scored_scenario_passes_but_the_known_ones(
        client_run: ClientRun, record_property: Callable[[str, object], None]) -> None:
    record_property(PROPERTY, client_run.total_line())
    failing = {s for s in client_run.scored() if not client_run.passed[s]}
    assert failing == NOT_PASSING[client_run.requirements], \
        "\n".join([client_run.total, *table(client_run)])
