"""Root test configuration: fixture plugins for the real services the integration tests start, and
the two tiers (tests/fixtures/tiers.py: which tests are `interop`, and the processes each started)."""

pytest_plugins: list[str] = ["tests.fixtures.redis", "tests.fixtures.flagd", "tests.fixtures.oidc",
                             "tests.fixtures.mcp_servers", "tests.fixtures.upstreams",
                             "tests.fixtures.otlp", "tests.fixtures.cerbos", "tests.fixtures.tiers",
                             # a plugin, not a conftest: an xdist controller collects nothing itself
                             "tests.reliability.report"]

# No hypothesis deadline anywhere: a deadline is a timing assertion, and on a shared 2-core machine
# an example that waits for the scheduler fails it for no fault of the code under test.
from hypothesis import settings  # noqa: E402

settings.register_profile("no-deadline", deadline=None)
settings.load_profile("no-deadline")

# The conformance suite's Total: lines, printed at the end of a run (a plugin of its own, as above).
pytest_plugins.append("tests.fixtures.conformance_totals")
