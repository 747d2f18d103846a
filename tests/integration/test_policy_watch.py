"""Policy files are watched by default (issue 22, item 11; SPEC §5): `serve` and `gateway` started
without `--policy-poll-seconds` put an edited policy file in force within a few seconds, and with
`--policy-poll-seconds 0` never do. Each test runs a watching and a non-watching one on the same file,
so the negative is observed only after the positive has been.

The gateway in-process (tests/fixtures/inprocess.py): two gateways wired from their command lines in
the test's event loop, their upstreams in memory; the watching one's reload awaited on its log line,
the other shown to have no poller at all. `serve` stays interop: its watcher is started inside the
loop that runs its stdio transport (cli/server_cmds.py's `_serve`), which only its process runs;
there the negative is looked at again two poll intervals after the positive (nothing happens to be
waited for).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from mcp_preconditions.drivers.bundle import DEFAULT_FILE_POLL_SECONDS
from tests.fixtures.flagd import eventually_async
from tests.fixtures.inprocess import cli_gateway
from tests.fixtures.mcp_servers import CLI, MISSION_POLICY, ROOT, server_env
from tests.fixtures.memory_upstream import MemoryServers, logging_env

pytestmark = pytest.mark.asyncio(loop_scope="module")

CLOSED = b'environment = ["staging"]\n[tools.echo]\nrequirements = ["env:production"]\n'
OPENED = b'environment = ["production"]\n[tools.echo]\nrequirements = ["env:production"]\n'
Denied = Callable[[], Awaitable[bool]]


def publish(path: Path, data: bytes) -> None:
    """Replace the policy file by atomic rename, as an operator's deploy would."""
    staged = path.with_suffix(".tmp")
    staged.write_bytes(data)
    os.replace(staged, path)


async def watched_and_unwatched(path: Path, opened: bytes, denied_by: tuple[Denied, Denied]) -> None:
    """Both processes deny; after the edit the watching one allows within a few seconds, and the
    one with `--policy-poll-seconds 0` still denies two intervals after that."""
    watching, frozen = denied_by
    assert (await watching(), await frozen()) == (True, True)
    publish(path, opened)
    assert await eventually_async(watching, False, 10) is False  # (its poll: every 2 s)
    # Not a wait for an event: a process that never reloads shows nothing, so two of its would-be
    # polls pass (the in-process gateway test checks there is no poller at all).
    await asyncio.sleep(2 * DEFAULT_FILE_POLL_SECONDS)
    assert await frozen() is True


@pytest.fixture(autouse=True)
def _no_environment_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)


async def test_a_gateway_watches_its_policy_file_by_default(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_bytes(CLOSED)
    servers = MemoryServers()
    with servers.installed():
        a = servers.logging_upstream("a", **logging_env(tmp_path / "a.jsonl"))
        b = servers.logging_upstream("b", **logging_env(tmp_path / "b.jsonl"))
        async with AsyncExitStack() as stack:
            watching = await stack.enter_async_context(cli_gateway(
                ["--policy", str(policy), "--", *a]))
            frozen = await stack.enter_async_context(cli_gateway(
                ["--policy", str(policy), "--policy-poll-seconds", "0", "--", *b]))
            default = await stack.enter_async_context(watching.client())
            off = await stack.enter_async_context(frozen.client())

            async def denied(client: Client) -> bool:
                return bool((await client.call_tool("echo", {"text": "hi"})).is_error)

            assert (await denied(default), await denied(off)) == (True, True)
            publish(policy, OPENED)
            await watching.logged(r"policy .* reloaded: revision")  # within its default 2 s poll
            assert (await denied(default), await denied(off)) == (False, True)
    assert len(watching.prepared.tasks) == 1  # the poller
    assert frozen.prepared.tasks == []  # no poller: the file is never read again


def serve(policy: Path, *args: str) -> StdioServerParameters:
    claims = ROOT / "examples" / "claims" / "mission-control.json"
    return StdioServerParameters(command=CLI[0], args=[
        *CLI[1:], "serve", "--policy", str(policy), "--claims", str(claims), *args],
        env=server_env(), cwd=ROOT)


@pytest.mark.interop
async def test_serve_watches_its_policy_file_by_default(tmp_path: Path) -> None:
    """Interop: `serve`'s watcher runs in the loop of its process's stdio transport."""
    clear = MISSION_POLICY.read_bytes()
    cloudy = clear.replace(b'"weather.clear" = true', b'"weather.clear" = false')
    assert cloudy != clear
    policy = tmp_path / "mission-control.toml"
    policy.write_bytes(cloudy)
    async with AsyncExitStack() as stack:
        default = await stack.enter_async_context(Client(serve(policy), mode="legacy"))
        off = await stack.enter_async_context(Client(serve(policy, "--policy-poll-seconds", "0"),
                                                     mode="legacy"))

        async def denied(client: Client) -> bool:
            return bool((await client.call_tool("launch_rocket", {"vehicle": "Falcon 9"})).is_error)

        await watched_and_unwatched(policy, clear, (lambda: denied(default), lambda: denied(off)))
