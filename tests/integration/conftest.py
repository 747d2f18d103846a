"""Fixtures several integration test files share: Debian's Chromium driven by Playwright, and the
`wiki` server that verifies its own tokens (audience WIKI_AUDIENCE) at the test run's provider.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser

from tests.fixtures.explorer import chromium
from tests.fixtures.oidc import WIKI_AUDIENCE, OidcServer
from tests.fixtures.token_servers import TokenServer, token_server


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as b:
        yield b


@pytest.fixture(scope="module")
def wiki(oidc_server: OidcServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TokenServer]:
    with token_server(oidc_server.issuer, WIKI_AUDIENCE, tmp_path_factory.mktemp("wiki")) as server:
        yield server
