"""The conformance suite's client scenarios at `--requirements 2025-11-25`, the gateway as the
client: the same tests as test_conformance_client.py (which runs 2026-07-28), in a file of their
own so that the two sets run side by side on two workers (`--dist loadfile`).

Interop (SPEC §9): a real gateway process's traffic to the suite's own servers and authorization
servers, with a real oidc-provider signing the person in (test_conformance_client.py says why).
"""

from __future__ import annotations

import pytest

from tests.fixtures.conformance_client_leg import REQUIREMENTS, ClientRun
from tests.fixtures.oidc import OidcServer
from tests.integration.test_conformance_client import (  # noqa: F401  (collected here too)
    client_run_of,
    test_every_auth_scenario_passes_through_the_gateway,
    test_every_other_scored_scenario_passes_but_the_known_ones,
)

pytestmark = [pytest.mark.integration, pytest.mark.interop]


@pytest.fixture(scope="module")
def client_run(oidc_server: OidcServer, tmp_path_factory: pytest.TempPathFactory) -> ClientRun:
    return client_run_of(REQUIREMENTS[0], oidc_server, tmp_path_factory)
