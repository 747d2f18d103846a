"""Root test configuration: fixture plugins for the real services the integration tests start, and
the `alone` mark for tests that must not share the machine with pytest-xdist workers.
"""

import pytest

pytest_plugins: list[str] = ["tests.fixtures.redis", "tests.fixtures.flagd", "tests.fixtures.oidc",
                             "tests.fixtures.mcp_servers", "tests.fixtures.upstreams",
                             # a plugin, not a conftest: an xdist controller collects nothing itself
                             "tests.reliability.report"]

# Tests that look at the whole process table (pgrep of a command line any test may start): they run
# in a pytest process of their own, after the parallel one (Makefile `pytest`).
ALONE = frozenset({"tests/integration/test_gateway_signals.py"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.split("::", 1)[0] in ALONE:
            item.add_marker(pytest.mark.alone)
