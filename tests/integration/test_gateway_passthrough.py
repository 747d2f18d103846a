"""Everything that is not a tool call passes through the gateway: prompts and resources on both
protocol versions, the upstream's sampling request answered by the client, progress, and
tools/list_changed (which also makes the gateway reload the upstream's tools). A stdio upstream
gets the gateway's environment minus the policy's own secrets.

In-process (tests/fixtures/inprocess.py): the gateway wired from its command line in the test's event
loop, its upstream in memory, the clients on its app over the streaming bridge (a stdio gateway's
callers and records kept). The sampling request through a real stdio gateway stays interop: it is
about the stdio listener putting a server's request to its one client.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext

from tests.fixtures.gateway_upstream import NOTE, gateway_stdio, tool_calls
from tests.fixtures.inprocess import logging_gateway
from tests.integration.test_gateway_calls import RAW, VERSIONS, raw_call, raw_tools

pytestmark = pytest.mark.asyncio(loop_scope="module")
HTTP = ("--listen", "http://127.0.0.1:0")


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text('[tools.echo]\nrequirements = ["auth:claim:role:observer"]\n', encoding="utf-8")
    return path


@pytest.mark.parametrize("version", VERSIONS)
async def test_prompts_and_resources_pass_through(tmp_path: Path, policy: Path, version: str) -> None:
    async with logging_gateway(policy, tmp_path / "log.jsonl") as gw, \
            gw.client(VERSIONS[version]) as client:
        assert client.server_capabilities.prompts is not None
        assert client.server_capabilities.resources is not None
        prompts = await client.list_prompts()
        prompt = await client.get_prompt("greet", {"name": "Ada"})
        resources = await client.list_resources()
        note = await client.session.send_request(mcp_types.ReadResourceRequest(
            params=mcp_types.ReadResourceRequestParams(uri="test://note")), RAW)
    assert [p.name for p in prompts.prompts] == ["greet"]
    assert prompt.messages[0].content == mcp_types.TextContent(type="text", text="Hello, Ada!")
    assert [str(r.uri) for r in resources.resources] == ["test://note"]
    assert note["contents"] == NOTE["contents"]


@pytest.mark.parametrize("listener", [pytest.param("stdio", marks=pytest.mark.interop), "http"])
async def test_the_upstreams_sampling_request_is_answered_by_the_client(
        tmp_path: Path, policy: Path, listener: str) -> None:
    """Interop for `stdio`: a real gateway process puts the request to its stdio client."""
    asked: list[str] = []

    async def sampling(context: ClientRequestContext, params: mcp_types.CreateMessageRequestParams
                       ) -> mcp_types.CreateMessageResult:
        asked.append(params.messages[0].content.text)  # type: ignore[union-attr]
        return mcp_types.CreateMessageResult(role="assistant", model="test",
                                             content=mcp_types.TextContent(type="text", text="4"))

    log = tmp_path / "log.jsonl"
    async with contextlib.AsyncExitStack() as stack:
        if listener == "stdio":
            client = await stack.enter_async_context(
                Client(gateway_stdio(policy, log), mode="legacy", sampling_callback=sampling))
        else:
            gw = await stack.enter_async_context(logging_gateway(policy, log, *HTTP))
            client = await stack.enter_async_context(
                gw.client("legacy", sampling_callback=sampling))
        result = await raw_call(client, "ask")
    assert asked == ["2+2?"]
    assert result["content"] == [{"type": "text", "text": "4"}]


async def test_progress_reaches_the_caller_only(tmp_path: Path, policy: Path) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    others: list[Any] = []

    async def bystander(message: Any) -> None:
        if isinstance(message, mcp_types.ProgressNotification):
            others.append(message)

    log = tmp_path / "log.jsonl"
    async with logging_gateway(policy, log, *HTTP) as gw, \
            gw.client("legacy", message_handler=bystander) as other, gw.client("legacy") as client:
        await other.list_tools()
        result = await client.call_tool("slow", {"seconds": 0.2}, progress_callback=progress)
        await other.list_tools()
    assert result.content == [mcp_types.TextContent(type="text", text="slow done")]
    assert seen == [(0.5, 1.0, "half way")]
    assert others == []  # another client's progress is not broadcast


async def test_tools_list_changed_reloads_and_reaches_a_2025_client(tmp_path: Path, policy: Path) -> None:
    log = tmp_path / "log.jsonl"
    changed = anyio.Event()

    async def handler(message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            changed.set()

    async with logging_gateway(policy, log) as gw, \
            gw.client("legacy", message_handler=handler) as client:
        await raw_tools(client)
        await raw_call(client, "flip")
        with anyio.fail_after(10):
            await changed.wait()
        tools = await raw_tools(client)
        extra = await raw_call(client, "extra0")
    assert "extra0" in tools
    assert extra["content"] == [{"type": "text", "text": "extra0 done"}]
    assert tool_calls(log) == ["flip", "extra0"]


async def test_tools_list_changed_reaches_a_2026_listener(tmp_path: Path, policy: Path) -> None:
    async with logging_gateway(policy, tmp_path / "log.jsonl") as gw, gw.client("auto") as client:
        async with client.listen(tools_list_changed=True) as subscription:
            await raw_call(client, "flip")
            with anyio.fail_after(10):
                event = await subscription.__anext__()
        tools = await raw_tools(client)
    assert type(event).__name__ == "ToolsListChanged"
    assert "extra0" in tools


async def test_a_stdio_upstream_does_not_inherit_the_policys_secrets(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[auth]\nissuer = "https://issuer.example"\naudience = "urn:x"\n'
                      '[auth.introspection]\nendpoint = "https://issuer.example/introspect"\n'
                      'client_id_env = "GW_TEST_CLIENT_ID"\nclient_secret_env = "GW_TEST_SECRET"\n'
                      '[state.redis]\nurl_env = "GW_TEST_REDIS_URL"\n', encoding="utf-8")
    for name, value in {"GW_TEST_CLIENT_ID": "id", "GW_TEST_SECRET": "secret",
                        "GW_TEST_REDIS_URL": "redis://x", "GW_TEST_OTHER": "o"}.items():
        monkeypatch.setenv(name, value)  # the gateway's environment: what it gives a command
    async with logging_gateway(policy, tmp_path / "log.jsonl") as gw, \
            gw.client("legacy") as client:
        names = (await raw_call(client, "env"))["structuredContent"]["names"]
    assert "GW_TEST_OTHER" in names and "PATH" in names
    assert not {"GW_TEST_CLIENT_ID", "GW_TEST_SECRET", "GW_TEST_REDIS_URL"} & set(names)
