"""The lowest pass's constraints (.ci/lowest_constraints.py) and the ranges they come from: every extra
names a range with a lower bound, never one version (SPEC §9), and the constraints are the lowest
version every range naming a package admits.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / ".ci" / "lowest_constraints.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lowest_constraints", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lowest_constraints = _script()


def _lowest_extras() -> list[str]:
    """The extras the Makefile's lowest pass pins."""
    found = re.search(r"^LOWEST_EXTRAS\s*:=\s*(\S+)$", (ROOT / "Makefile").read_text("utf-8"), re.M)
    assert found is not None
    return found[1].split(",")


def _extras() -> dict[str, list[str]]:
    extras: dict[str, list[str]] = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))[
        "project"]["optional-dependencies"]
    return extras


def run(pyproject: Path, extras: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), str(pyproject), extras],
                          capture_output=True, text=True, check=False)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pyproject.toml"
    path.write_text(text, "utf-8")
    return path


def test_no_extra_names_one_exact_version_and_each_has_a_lower_bound() -> None:
    for extra, lines in _extras().items():
        if extra == "dev":  # test tools; mcp-server-time is pinned as the npm servers are
            continue
        for line in lines:
            operators = {spec.operator for spec in Requirement(line).specifier}
            assert not operators & {"==", "==="}, (extra, line)
            assert operators & {">=", "~="}, (extra, line)


def test_the_sdks_are_ranges_up_to_the_next_major() -> None:
    named = {Requirement(line).name: str(Requirement(line).specifier)
             for extra in ("mcp", "fastmcp", "pydantic-ai") for line in _extras()[extra]}
    assert named["mcp"] == "<3,>=2.3"
    assert named["fastmcp"] == "<5,>=4.1"
    assert named["pydantic-ai-slim"] == "<3,>=2.68"


def test_the_lowest_pass_pins_every_package_of_its_extras() -> None:
    result = run(ROOT / "pyproject.toml", ",".join(_lowest_extras()))
    assert result.returncode == 0, result.stderr
    pins = dict(line.split("==") for line in result.stdout.splitlines() if not line.startswith("#"))
    assert {"mcp": "2.3", "fastmcp": "4.1", "pydantic-ai-slim": "2.68"}.items() <= pins.items()
    # the uvicorn pinned is one the mcp extra admits (serve --transport http runs on it)
    uvicorn = next(Requirement(r) for r in _extras()["mcp"] if r.startswith("uvicorn"))
    assert pins["uvicorn"] in uvicorn.specifier
    assert "no lower bound" not in result.stdout


def test_the_lowest_version_is_the_highest_floor_and_markers_apply(tmp_path: Path) -> None:
    path = write(tmp_path, """
[project]
name = "demo"
dependencies = ["pydantic>=2.7,<3", "Typing_Extensions", "only-windows>=1; sys_platform == 'win32'"]
[project.optional-dependencies]
a = ["mcp>=2.3,<3", "uvicorn>=0.35,<0.55"]
b = ["mcp~=2.4.1", "demo[c]"]
c = ["jinja2==3.1.0"]
""")
    assert run(path, "a,b").stdout == (
        "# The lowest versions pyproject.toml's ranges allow (extras: a, b).\n"
        "jinja2==3.1.0\nmcp==2.4.1\npydantic==2.7\nuvicorn==0.35\n"
        "# no lower bound, left to the resolver: typing-extensions\n")


@pytest.mark.parametrize(("dependencies", "extras", "message"), [
    ('["mcp>2.3"]', "", "mcp: '>' names no lowest version; write '>=' instead"),
    ('["mcp>=2.3,<3", "mcp>=3.1"]', "", "mcp: the lowest version 3.1 is outside mcp<3,>=2.3"),
    ('["mcp>=2.3"]', "nope", "no extra 'nope' (there are: a)"),
    ('["mcp >= = 2"]', "", "'mcp >= = 2': Expected semicolon"),
])
def test_a_range_with_no_lowest_version_is_one_line_and_exit_2(
        tmp_path: Path, dependencies: str, extras: str, message: str) -> None:
    path = write(tmp_path, f'[project]\nname = "demo"\ndependencies = {dependencies}\n'
                           '[project.optional-dependencies]\na = []\n')
    result = run(path, extras)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"lowest_constraints.py: {path}: {message}")
    assert result.stderr.count("\n") == 1


def test_a_missing_file_and_a_wrong_usage(tmp_path: Path) -> None:
    missing = run(tmp_path / "none.toml", "a")
    assert missing.returncode == 2
    assert missing.stderr.startswith(f"lowest_constraints.py: {tmp_path / 'none.toml'}: ")
    usage = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, check=False)
    assert usage.returncode == 2
    assert usage.stderr == "usage: lowest_constraints.py PYPROJECT EXTRA[,EXTRA...]\n"


def test_the_requirements_of_a_self_reference_are_read_once() -> None:
    project = {"name": "Demo", "dependencies": [],
               "optional-dependencies": {"a": ["demo[b]", "demo[a]"], "b": ["x>=1"]}}
    found = lowest_constraints.requirements(project, ["a", "b"])
    assert [str(r) for r in found] == ["x>=1"]
