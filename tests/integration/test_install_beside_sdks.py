"""The library installs beside the SDKs a user already has (SPEC §9): the wheel built from this tree,
with its SDK extras, asks pip for nothing but itself in this virtualenv, whose mcp, fastmcp,
pydantic-ai and openai-agents are whatever the test pass installed (the newest, or in the lowest
pass the lowest the ranges allow). `--no-index`: were any of them to be replaced, pip could not, and
says so.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.fixtures.mcp_servers import ROOT

pytestmark = pytest.mark.integration
SDK_EXTRAS = "mcp,fastmcp,explore,pydantic-ai,openai-agents"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `pip wheel --no-deps -w dist .` builds (README, "Install"), from a copy of the tree."""
    tree = tmp_path_factory.mktemp("tree")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    shutil.copytree(ROOT / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w",
                            # work bound, not an event wait: pip builds the wheel
                            str(tree / "dist"), str(tree)], capture_output=True, text=True, timeout=600,
                           check=False)
    assert built.returncode == 0, built.stderr
    (found,) = (tree / "dist").glob("mcp_preconditions-*-py3-none-any.whl")
    return found


def test_the_wheel_with_its_sdk_extras_leaves_the_installed_sdks_alone(wheel: Path) -> None:
    asked = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index",
                            "--quiet", "--report", "-", f"{wheel}[{SDK_EXTRAS}]"],
                           # work bound, not an event wait: pip resolves the extras
                           capture_output=True, text=True, timeout=300, check=False)
    assert asked.returncode == 0, asked.stderr
    report = json.loads(asked.stdout)
    assert [(i["metadata"]["name"], i["metadata"]["version"]) for i in report["install"]] == [
        ("mcp-preconditions", version("mcp-preconditions"))]
