"""Root test configuration: fixture plugins for the real services the integration tests start."""

pytest_plugins: list[str] = ["tests.fixtures.redis", "tests.fixtures.flagd", "tests.fixtures.oidc",
                             "tests.fixtures.mcp_servers", "tests.fixtures.upstreams",
                             "tests.fixtures.otlp",
                             # a plugin, not a conftest: an xdist controller collects nothing itself
                             "tests.reliability.report"]
