"""The extra each command needs (cli/_extras.py), read from the installed package's metadata: the
commands that need one name an extra pyproject.toml has; with every extra installed, none is missing;
a module missing while a command runs is blamed on its extra, never one of this package's own.
"""

from __future__ import annotations

import tomllib

import pytest

from mcp_preconditions.cli._extras import NEEDS, distributions, extra_behind, missing_extra
from tests.fixtures.mcp_servers import ROOT


def test_each_needed_extra_is_one_of_pyproject() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["optional-dependencies"]
    for extra in set(NEEDS.values()):
        assert extra in extras
        assert "mcp" in distributions(extra)


def test_with_every_extra_installed_none_is_missing() -> None:
    assert [c for c in NEEDS if missing_extra(c) is not None] == []
    assert missing_extra("check") is None
    assert distributions("no-such-extra") == []


@pytest.mark.parametrize(("command", "module", "extra"), [
    ("gateway", "mcp_types", "mcp"),
    ("explore", "jinja2", "explore"),
    ("explore", "uvicorn.protocols", "explore"),
    ("gateway", "mcp_preconditions.gateway.nothing", None),  # our own: a bug, raised as one
    ("check", "redis", None),  # a core command: its own message, or a bug
])
def test_a_module_missing_at_run_time_is_blamed_on_the_extra(command: str, module: str,
                                                             extra: str | None) -> None:
    assert extra_behind(command, ModuleNotFoundError(f"No module named {module!r}", name=module)) == extra
