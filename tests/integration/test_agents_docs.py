"""docs/agents.md's examples, run as a user would run them: each Python block saved as a script and
started from the repository root (it launches the real guarded server with `mcp-preconditions serve`),
its output compared with the text block the document says it prints.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.mcp_servers import ROOT, server_env

pytestmark = pytest.mark.integration

DOC = ROOT / "docs" / "agents.md"
EXAMPLE = re.compile(r"```python\n(.*?)```\n\nIt prints:\n\n```text\n(.*?)```", re.DOTALL)


def examples() -> list[tuple[str, str]]:
    return EXAMPLE.findall(DOC.read_text(encoding="utf-8"))


def test_the_document_has_one_example_per_framework() -> None:
    sources = [source for source, _ in examples()]
    assert len(sources) == 2
    assert "integrations.pydantic_ai import" in sources[0]
    assert "integrations.openai_agents import" in sources[1]


@pytest.mark.parametrize("index", [0, 1], ids=["pydantic-ai", "openai-agents"])
def test_an_example_prints_what_the_document_says(index: int, tmp_path: Path) -> None:
    source, printed = examples()[index]
    script = tmp_path / "example.py"
    script.write_text(source, encoding="utf-8")
    env = server_env()  # `mcp-preconditions` is the console script next to this interpreter
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == printed
