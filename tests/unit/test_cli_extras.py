"""The extra each command needs (cli/_extras.py), read from the installed package's metadata: the
commands that need one name an extra pyproject.toml has; with every extra installed, none is missing;
with part of an extra installed, the line names exactly what is missing (issue 40: `[fastmcp]` alone
was told "the 'mcp' extra" was missing while mcp was installed); a module missing while a command
runs is blamed on its extra, never one of this package's own.
"""

from __future__ import annotations

import tomllib

import pytest

from mcp_preconditions.cli import _extras
from mcp_preconditions.cli._extras import NEEDS, distributions, extra_behind, missing, needs_line
from tests.fixtures.mcp_servers import ROOT


def test_each_needed_extra_is_one_of_pyproject() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["optional-dependencies"]
    for extra in set(NEEDS.values()):
        assert extra in extras
        assert "mcp" in distributions(extra)


def test_with_every_extra_installed_none_is_missing() -> None:
    assert [c for c in NEEDS if missing(c) is not None] == []
    assert missing("check") is None
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


@pytest.mark.parametrize(("absent", "line"), [
    (["mcp", "prometheus-client", "httptools", "orjson", "uvicorn"],
     "needs the 'mcp' extra, which is not installed: install mcp-preconditions with [mcp] "
     '(README.md, "Install")'),
    (["httptools", "orjson"],
     "needs httptools and orjson, which are not installed (the 'mcp' extra brings them): install "
     'mcp-preconditions with [mcp] (README.md, "Install")'),
    (["prometheus-client", "httptools", "orjson"],
     "needs prometheus-client, httptools and orjson, which are not installed (the 'mcp' extra brings "
     'them): install mcp-preconditions with [mcp] (README.md, "Install")'),
    (["orjson"],
     "needs orjson, which is not installed (the 'mcp' extra brings it): install mcp-preconditions "
     'with [mcp] (README.md, "Install")'),
])
def test_a_partly_installed_extra_names_exactly_what_is_missing(
        monkeypatch: pytest.MonkeyPatch, absent: list[str], line: str) -> None:
    monkeypatch.setattr(_extras, "_installed", lambda name: name not in absent)
    found = missing("gateway")
    assert found is not None and needs_line(*found) == line
    assert missing("check") is None
