"""docs/agents.md's examples, run as a user would run them: each Python block saved as a script and
started from the repository root (it launches the real guarded server with `mcp-preconditions serve`,
or, for the bearer-token examples, reaches `serve --transport http` at $MCP_URL with a token from a
real OIDC provider in $MCP_TOKEN), its output compared with the text block the document says it
prints.

Interop: what these check is the documents' scripts as a user runs them, each a fresh interpreter
that launches `mcp-preconditions serve` itself (or reaches one over a socket with the provider's
token); run in this process they would no longer be the scripts the document shows.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.mcp_servers import ROOT, ServeProcess, server_env
from tests.fixtures.oidc import OidcServer

pytestmark = [pytest.mark.integration, pytest.mark.interop]

DOC = ROOT / "docs" / "agents.md"
EXAMPLE = re.compile(r"```python\n(.*?)```\n\nIt prints:\n\n```text\n(.*?)```", re.DOTALL)


def examples() -> list[tuple[str, str]]:
    return EXAMPLE.findall(DOC.read_text(encoding="utf-8"))


def test_the_document_has_two_examples_per_framework() -> None:
    sources = [source for source, _ in examples()]
    assert len(sources) == 4
    assert ["integrations.pydantic_ai import" in s for s in sources] == [True, True, False, False]
    assert ["MCP_TOKEN" in s for s in sources] == [False, True, False, True]


def run_example(index: int, tmp_path: Path, **extra: str) -> str:
    """Run example `index`; its standard output (exit 0 asserted)."""
    source, _ = examples()[index]
    script = tmp_path / "example.py"
    script.write_text(source, encoding="utf-8")
    env = server_env(**extra)  # `mcp-preconditions` is the console script next to this interpreter
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    # work bound, not an event wait: the script is a fresh interpreter that imports an agent
    # framework, starts `mcp-preconditions serve` (or reaches one) and runs the agent (12-14 s
    # each measured on two loaded cores)
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.parametrize("index", [0, 2], ids=["pydantic-ai", "openai-agents"])
def test_an_example_prints_what_the_document_says(index: int, tmp_path: Path) -> None:
    assert run_example(index, tmp_path) == examples()[index][1]


@pytest.mark.parametrize("index", [1, 3], ids=["pydantic-ai", "openai-agents"])
def test_a_bearer_token_example_prints_what_the_document_says(
        index: int, tmp_path: Path, mission_http: ServeProcess, oidc_server: OidcServer) -> None:
    token = oidc_server.token()
    assert run_example(index, tmp_path, MCP_URL=mission_http.url, MCP_TOKEN=token) == examples()[index][1]
    # The token is what lets the call through: with a forged one the same script is denied.
    forged = run_example(index, tmp_path, MCP_URL=mission_http.url, MCP_TOKEN=token[:-4] + "AAAA")
    assert "cleared the tower" not in forged
    assert "auth:oauth2" in forged  # learned from the denial
