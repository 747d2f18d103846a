"""Policy files are watched by default (issue 22, item 11; SPEC §5): `serve` and `gateway` started
without `--policy-poll-seconds` put an edited policy file in force within a few seconds, and with
`--policy-poll-seconds 0` never do. Real subprocesses, driven by the MCP SDK's stdio client; each
test runs a watching and a non-watching process on the same file, so the negative is observed only
after the positive has been.
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
from tests.fixtures.gateway_upstream import gateway_stdio
from tests.fixtures.mcp_servers import CLI, MISSION_POLICY, ROOT, server_env

pytestmark = pytest.mark.integration

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
    assert await eventually_async(watching, False, 15 * DEFAULT_FILE_POLL_SECONDS) is False
    await asyncio.sleep(2 * DEFAULT_FILE_POLL_SECONDS)
    assert await frozen() is True


async def test_a_gateway_watches_its_policy_file_by_default(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_bytes(CLOSED)
    async with AsyncExitStack() as stack:
        default = await stack.enter_async_context(Client(
            gateway_stdio(policy, tmp_path / "a.jsonl"), mode="legacy"))
        off = await stack.enter_async_context(Client(
            gateway_stdio(policy, tmp_path / "b.jsonl", "--policy-poll-seconds", "0"), mode="legacy"))

        async def denied(client: Client) -> bool:
            return bool((await client.call_tool("echo", {"text": "hi"})).is_error)

        await watched_and_unwatched(policy, OPENED, (lambda: denied(default), lambda: denied(off)))


def serve(policy: Path, *args: str) -> StdioServerParameters:
    claims = ROOT / "examples" / "claims" / "mission-control.json"
    return StdioServerParameters(command=CLI[0], args=[
        *CLI[1:], "serve", "--policy", str(policy), "--claims", str(claims), *args],
        env=server_env(), cwd=ROOT)


async def test_serve_watches_its_policy_file_by_default(tmp_path: Path) -> None:
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
