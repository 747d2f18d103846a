"""`log_decisions()` shows each decision record exactly once (issue 40 item 11), whatever else is set
up to print logs: the SDK's `MCPServer` (so `GuardedMCPServer`) installs a handler on the root logger
outside pytest, and an application may call `logging.basicConfig`; records that went on to the root
logger were printed a second time there. Each server flavour (GuardedMCPServer, guard_server,
the FastMCP middleware) in-process with a root handler on stderr, and one script in a process of its
own, where MCPServer installs its own root handler as it does for a user.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
from mcp import Client

from mcp_preconditions import log_decisions
from mcp_preconditions.decisions import DEFAULT_LOGGER
from tests.fixtures.mcp_servers import FLAVOURS, ROOT, Flavour, server_env, small_guard

RECORD = '"duration_us"'  # in every record, once, however a handler wraps the line


@pytest.fixture
def root_handler(capsys: pytest.CaptureFixture[str]) -> Iterator[None]:
    """A handler on the root logger that prints INFO records on stderr (what MCPServer installs
    with `logging.basicConfig` outside pytest, or an application's own `basicConfig`)."""
    root = logging.getLogger()
    handler = logging.StreamHandler(sys.stderr)  # the stderr capsys captures
    root.addHandler(handler)
    level = root.level
    root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


@pytest.fixture
def shown(capsys: pytest.CaptureFixture[str]) -> Iterator[Callable[[], logging.Handler]]:
    """`log_decisions()` on the test's stderr; the handler and the logger's settings undone after."""
    logger = logging.getLogger(DEFAULT_LOGGER)
    level, propagate = logger.level, logger.propagate
    added: list[logging.Handler] = []

    def show() -> logging.Handler:
        added.append(log_decisions())
        return added[-1]

    try:
        yield show
    finally:
        for handler in added:
            logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


@pytest.mark.parametrize("flavour", list(FLAVOURS))
async def test_each_record_is_printed_once(flavour: str, root_handler: None,
                                           shown: Callable[[], logging.Handler],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    server: Flavour = FLAVOURS[flavour](small_guard())
    handler = shown()
    assert shown() is handler  # called again: nothing more is added
    async with Client(server.target) as client:
        await client.call_tool("open_door", {})
        await client.call_tool("closed_door", {})
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if RECORD in line]
    assert len(lines) == 2, err
    assert all(line.startswith(DEFAULT_LOGGER + ": {") for line in lines), err
    assert err.count(RECORD) == 2, err


SCRIPT = """
import anyio
from mcp import Client
from mcp_preconditions import Guard, log_decisions, parse_policy
from mcp_preconditions.integrations.mcp_sdk import GuardedMCPServer

server = GuardedMCPServer("once", guard=Guard(parse_policy(b'environment = ["prod"]', "p.toml")))

@server.tool(requirements=["env:prod"])
def one() -> str:
    return "ran"

log_decisions()

async def main() -> None:
    async with Client(server) as client:
        await client.call_tool("one", {})
        await client.call_tool("one", {})

anyio.run(main)
"""


@pytest.mark.interop
def test_a_guarded_mcpserver_script_prints_each_record_once() -> None:
    """As a user runs it: MCPServer puts its own handler on the root logger (it printed every
    record a second time, over several lines). Interop: a fresh interpreter's own logging set-up
    and what it prints on stderr are what is judged; pytest's capture would stand in for both."""
    # work bound, not an event wait: a fresh interpreter importing the SDK and running a whole
    # session (5 s alone, past 10 s at load 16)
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=60, env=server_env(), cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count(RECORD) == 2, done.stderr
    assert done.stderr.count(DEFAULT_LOGGER + ': {"time"') == 2, done.stderr
