"""A command whose extra is not installed says so in one line naming the extra, exit 2, never a
ModuleNotFoundError traceback (SPEC §9). Run in a real virtualenv holding the package and its core
dependencies only (.run/core-only, built once per pyproject.toml and kept across runs).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.mcp_servers import ROOT

pytestmark = pytest.mark.integration
CORE_ONLY = ROOT / ".run" / "core-only"
NEEDS = ("needs the '{extra}' extra, which is not installed: install mcp-preconditions with [{extra}] "
         '(README.md, "Install")')
MISSION = ["--policy", "policies/mission-control.toml", "--tools", "examples/mission-control-tools.json"]


@pytest.fixture(scope="module")
def core_only() -> Path:
    """The core-only virtualenv's `mcp-preconditions`, (re)built when pyproject.toml changed."""
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    stamp = CORE_ONLY / ".pyproject-sha256"
    if not stamp.exists() or stamp.read_text() != digest:
        shutil.rmtree(CORE_ONLY, ignore_errors=True)
        # work bound, not an event wait: a venv with pip
        subprocess.run([sys.executable, "-m", "venv", str(CORE_ONLY)], check=True, timeout=120)
        pip = [str(CORE_ONLY / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        # work bound, not an event wait: pip
        subprocess.run([*pip, "-e", str(ROOT)], check=True, timeout=600, capture_output=True)
        stamp.write_text(digest)
    return CORE_ONLY / "bin" / "mcp-preconditions"


def run(command: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(command), *args], capture_output=True, text=True, cwd=ROOT, timeout=10,
                          check=False)


def test_the_virtualenv_has_no_extra(core_only: Path) -> None:
    python = core_only.parent / "python"
    probe = "import importlib.util as u; print([m for m in ('mcp', 'uvicorn', 'jinja2') if u.find_spec(m)])"
    assert run(python, "-c", probe).stdout == "[]\n"


@pytest.mark.parametrize(("args", "extra"), [
    (["serve", "--policy", "policies/mission-control.toml"], "mcp"),
    (["serve", "--policy", "policies/mission-control.toml", "--transport", "http"], "mcp"),
    (["demo"], "mcp"),
    (["gateway", "--policy", "policies/everything.toml", "--", "npx", "mcp-server-everything"], "mcp"),
    (["gateway", "--config", "gateway.toml"], "mcp"),
    (["config", "validate", "gateway.toml"], "mcp"),
    (["config", "schema"], "mcp"),
    (["tools", "--", "ls"], "mcp"),
    (["explore", *MISSION], "explore"),
])
def test_a_command_without_its_extra_is_one_line_and_exit_2(core_only: Path, args: list[str],
                                                             extra: str) -> None:
    done = run(core_only, *args)
    assert (done.returncode, done.stdout, done.stderr) == (
        2, "", f"mcp-preconditions {args[0]}: error: {NEEDS.format(extra=extra)}\n")


def test_the_core_commands_run_without_an_extra(core_only: Path) -> None:
    assert run(core_only, "check", *MISSION).returncode == 0
    assert run(core_only, "policy", "test", "policies/mission-control.tests.toml").returncode == 0
    assert run(core_only, "gateway", "--help").returncode == 0  # its help needs nothing more


def test_a_policy_that_needs_an_extra_names_it(core_only: Path) -> None:
    done = run(core_only, "check", "--policy", "policies/mission-control-live.toml",
               "--tools", "examples/mission-control-tools.json")
    assert (done.returncode, done.stdout, done.stderr) == (
        2, "", "mcp-preconditions: error: policies/mission-control-live.toml: features.openfeature needs the "
               "'openfeature' extra, which is not installed: install mcp-preconditions with [openfeature] "
               "(No module named 'openfeature')\n")
