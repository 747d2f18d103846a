"""The MCP conformance suite's server scenarios (npm @modelcontextprotocol/conformance, pinned in
package.json; `make conformance` prints the same runs' Total: lines) at both frozen requirement sets,
against the faithful 2025-11-25 server of tests/fixtures/conformance_server.py alone and through
`mcp-preconditions gateway` with no requirements, that server as its stdio and as its HTTP upstream
(tests/fixtures/conformance.py runs them; docs/gateway-conformance.md shows the table).

- At 2025-11-25 the gateway loses no check that passes against the server alone, scored or not,
  SSE polling included, whatever its upstream (LOST: none).
- At 2026-07-28 every scored scenario passes through the gateway, in the whole run (where the
  suite leaves calls waiting for a retry that never comes: a server's question still reaches the
  call that asks, gateway/callers.py) and on a gateway of its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures import conformance
from tests.fixtures.conformance import REQUIREMENTS, SERVER_STDIO, ServerLeg, run, scored
from tests.fixtures.fleet import clock, command, fleet_http, write_gateway_toml

# The whole server leg runs once, for the first test: six runs of the suite and the reruns.
# work bound, not an event wait: the suite's run of every scenario
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

LEGACY, MODERN = REQUIREMENTS
# SSE polling (SEP-1699): a server that closes a call's stream mid-call is resumed, and the client's
# stream of that call closed and resumed likewise (gateway/upstream/http.py); and whatever the
# server (a stdio one closes nothing), every call's stream is primed and, with --sse-poll-seconds
# (`conformance.POLLING`), closed for polling when the call runs longer (gateway/downstream/sse.py).
LOST: dict[str, set[tuple[str, str]]] = {"stdio": set(), "http": set()}


@pytest.fixture(scope="module")
def server_leg(tmp_path_factory: pytest.TempPathFactory) -> ServerLeg:
    try:
        found = conformance.server_leg(tmp_path_factory.mktemp("conformance"))
    except RuntimeError as exc:  # no Node 22, no suite, a server that did not start
        pytest.fail(str(exc), pytrace=False)
    for line in found.totals():
        print(line)
    return found


def test_the_faithful_server_passes_every_2025_scenario_and_no_2026_one_alone(
        server_leg: ServerLeg) -> None:
    legacy, modern = server_leg.alone[LEGACY], server_leg.alone[MODERN]
    assert scored(LEGACY) <= set(legacy.checks)
    assert {s: legacy.failed(s) for s in legacy.checks if legacy.failed(s)} == {}
    assert legacy.total.endswith(" passed, 0 failed")
    # A 2025-11-25 server: what 2026-07-28 alone asks (no handshake, input rounds) it cannot do.
    assert not modern.passes("server-stateless")
    assert not modern.passes("input-required-result-basic-elicitation")


@pytest.mark.parametrize("upstream", ["stdio", "http"])
def test_the_gateway_loses_nothing_at_2025(server_leg: ServerLeg, upstream: str) -> None:
    alone, leg = server_leg.alone[LEGACY], server_leg.through[(upstream, LEGACY)]
    lost = alone.successes() - leg.whole.successes()
    assert lost == LOST[upstream], f"lost through the gateway: {sorted(lost - LOST[upstream])}; " \
                                   f"no longer lost: {sorted(LOST[upstream] - lost)}"


@pytest.mark.parametrize("upstream", ["stdio", "http"])
def test_every_scored_2026_scenario_passes_through_the_gateway(
        server_leg: ServerLeg, upstream: str) -> None:
    leg = server_leg.through[(upstream, MODERN)]
    assert scored(MODERN) <= set(leg.whole.checks)
    failing = {s for s in scored(MODERN) if not leg.whole.passes(s)}
    own = {s: {c.id for c in leg.alone[s].failed(s)} for s in failing if not leg.alone[s].passes(s)}
    print(f"2026-07-28, {upstream} upstream: failing in the whole run {sorted(failing)}, "
          f"of which on a gateway of their own {own}")
    assert own == {}
    assert failing == set()


def test_a_many_server_gateway_loses_nothing_at_2025(server_leg: ServerLeg, tmp_path: Path) -> None:
    """SPEC §12: the faithful server with `prefix = ""` beside another server (PyPI
    mcp-server-time, under `time__`) behind one gateway.toml."""
    policy = tmp_path / "open.toml"
    policy.write_text("# every tool open\n", encoding="utf-8")
    config = write_gateway_toml(tmp_path / "gateway.toml", policy, {
        "conformance": command(SERVER_STDIO, prefix=""), "time": clock()})
    with fleet_http(config, *conformance.POLLING) as gateway:
        through = run(gateway.url, LEGACY, tmp_path / "results")
    print(f"server leg, a many-server gateway, {LEGACY}: {through.total}")
    lost = server_leg.alone[LEGACY].successes() - through.successes()
    assert lost == LOST["stdio"], sorted(lost)
