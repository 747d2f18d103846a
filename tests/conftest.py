"""Root test configuration: fixture plugins for the real services the integration tests start."""

pytest_plugins: list[str] = []
