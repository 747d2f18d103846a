"""`notifications/tools/list_changed` reaches real SDK clients when a policy reload or a change of live
facts changes what their session may call: on the standalone channel at 2025-11-25, on a
`subscriptions/listen` stream at 2026-07-28, for every server flavour.

In-process: each flavour's server is the SDK client's in-memory target; every wait is on the
notification itself (the periodic re-check's interval is the product's own parameter, 0.05 s here).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client

from mcp_preconditions.drivers.reload import PolicyReloader
from mcp_preconditions.guard import Guard
from mcp_preconditions.namespaces import LiveSources
from mcp_preconditions.policy.load import load_policy
from tests.fixtures.mcp_servers import FLAVOURS, Flavour, raw_tools

WAIT = 10.0  # the safety net of each wait on a notification

FILTERED = b'environment = ["production"]\n[guard]\nlist_filtering = true\n'
STAGING = b'environment = ["staging"]\n[guard]\nlist_filtering = true\n'
LIVE = b"""environment = ["production"]
[guard]
list_filtering = true
[state]
ttl_seconds = 0
[tools.from_policy]
requirements = ["state:door.open"]
"""


@pytest.fixture(params=list(FLAVOURS))
def make(request: pytest.FixtureRequest) -> Callable[..., Flavour]:
    factory: Callable[..., Flavour] = FLAVOURS[request.param]
    return factory


@pytest.fixture(autouse=True)
def _no_environment_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)


class Inbox:
    """A message handler for mcp.Client that records tools/list_changed notifications."""

    def __init__(self) -> None:
        self.count = 0
        self.event = anyio.Event()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, mcp_types.ServerNotification) and isinstance(
                message, mcp_types.ToolListChangedNotification):
            self.count += 1
            self.event.set()

    async def wait(self) -> None:
        with anyio.fail_after(WAIT):
            await self.event.wait()


def names(tools: list[dict[str, Any]]) -> list[str]:
    return [t["name"] for t in tools]


async def test_a_policy_reload_notifies_a_2025_session(make: Callable[..., Flavour],
                                                       tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_bytes(FILTERED)
    flavour = make(Guard(load_policy(policy), entry_points=False))
    reloader = PolicyReloader(flavour.preconditions.guard, policy,
                              on_change=lambda _change: flavour.preconditions.refresh())
    inbox = Inbox()
    async with Client(flavour.target, mode="legacy", message_handler=inbox) as client:
        assert client.server_capabilities.tools is not None
        assert client.server_capabilities.tools.list_changed is True
        assert names(await raw_tools(client.session)) == ["open_door", "from_policy"]
        policy.write_bytes(STAGING)
        assert reloader.reload() is not None
        await inbox.wait()
        assert names(await raw_tools(client.session)) == ["from_policy"]
    assert inbox.count == 1
    assert flavour.preconditions.sessions == 0  # the closed connection is forgotten


async def test_a_policy_reload_notifies_a_2026_listen_stream(make: Callable[..., Flavour],
                                                             tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_bytes(FILTERED)
    flavour = make(Guard(load_policy(policy), entry_points=False))
    async with Client(flavour.target, mode="auto") as client:  # discover: real capabilities
        assert client.protocol_version == "2026-07-28"
        assert client.server_capabilities.tools is not None
        assert client.server_capabilities.tools.list_changed is True
        async with client.listen(tools_list_changed=True) as subscription:
            assert flavour.preconditions.sessions == 1
            sent = await flavour.preconditions.reload(
                load_policy_bytes(tmp_path, STAGING))
            with anyio.fail_after(WAIT):
                event = await subscription.__anext__()
        assert type(event).__name__ == "ToolsListChanged"
        assert sent == 1
        assert names(await raw_tools(client.session)) == ["from_policy"]
    assert flavour.preconditions.sessions == 0


def load_policy_bytes(directory: Path, data: bytes) -> Any:
    path = directory / "next.toml"
    path.write_bytes(data)
    return load_policy(path)


async def test_a_change_of_live_facts_notifies_only_when_the_list_changes(
        make: Callable[..., Flavour], tmp_path: Path) -> None:
    door = {"open": True}
    policy = tmp_path / "policy.toml"
    policy.write_bytes(LIVE)
    guard = Guard(load_policy(policy), live=LiveSources(state_callables={
        "door.open": lambda: door["open"]}), entry_points=False)
    flavour = make(guard)
    inbox = Inbox()
    async with Client(flavour.target, mode="legacy", message_handler=inbox) as client:
        assert names(await raw_tools(client.session)) == ["open_door", "from_policy"]
        assert await flavour.preconditions.refresh() == 0  # nothing changed: nothing sent
        door["open"] = False
        async with anyio.create_task_group() as tg:
            tg.start_soon(flavour.preconditions.watch, 0.05)  # the periodic re-check
            await inbox.wait()
            tg.cancel_scope.cancel()
        assert names(await raw_tools(client.session)) == ["open_door"]
    assert inbox.count == 1


async def test_requirement_changes_notify_even_without_list_filtering(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_bytes(b'environment = ["production"]\n')
    flavour = FLAVOURS["MCPServer"](Guard(load_policy(policy), entry_points=False))
    inbox = Inbox()
    async with Client(flavour.target, mode="legacy", message_handler=inbox) as client:
        await raw_tools(client.session)
        moved = b'environment = ["production"]\n[tools.open_door]\nrequirements = ["feature:x"]\n'
        assert await flavour.preconditions.reload(load_policy_bytes(tmp_path, moved)) == 1
        await inbox.wait()
        tools = {t["name"]: t for t in await raw_tools(client.session)}
    assert tools["open_door"]["execution"]["requirements"] == ["env:production", "feature:x"]
