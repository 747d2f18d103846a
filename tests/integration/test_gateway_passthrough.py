"""Everything that is not a tool call passes through the gateway: prompts and resources on both
protocol versions, the upstream's sampling request answered by the client, progress, and
tools/list_changed (which also makes the gateway reload the upstream's tools). A stdio upstream
gets the gateway's environment minus the policy's own secrets.
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

from tests.fixtures.gateway_upstream import NOTE, gateway_http, gateway_stdio, tool_calls
from tests.integration.test_gateway_calls import RAW, VERSIONS, raw_call, raw_tools


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text('[tools.echo]\nrequirements = ["auth:claim:role:observer"]\n', encoding="utf-8")
    return path


@pytest.mark.parametrize("version", VERSIONS)
async def test_prompts_and_resources_pass_through(tmp_path: Path, policy: Path, version: str) -> None:
    async with Client(gateway_stdio(policy, tmp_path / "log.jsonl"), mode=VERSIONS[version]) as client:
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


@pytest.mark.parametrize("listener", ["stdio", "http"])
async def test_the_upstreams_sampling_request_is_answered_by_the_client(
        tmp_path: Path, policy: Path, listener: str) -> None:
    asked: list[str] = []

    async def sampling(context: ClientRequestContext, params: mcp_types.CreateMessageRequestParams
                       ) -> mcp_types.CreateMessageResult:
        asked.append(params.messages[0].content.text)  # type: ignore[union-attr]
        return mcp_types.CreateMessageResult(role="assistant", model="test",
                                             content=mcp_types.TextContent(type="text", text="4"))

    log = tmp_path / "log.jsonl"
    with contextlib.ExitStack() as stack:
        target: Any = (gateway_stdio(policy, log) if listener == "stdio" else
                       stack.enter_context(gateway_http(policy, log, wait="/readyz")).url + "/mcp")
        async with Client(target, mode="legacy", sampling_callback=sampling) as client:
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
    with gateway_http(policy, log, wait="/readyz") as gw:
        async with Client(gw.url + "/mcp", mode="legacy", message_handler=bystander) as other, \
                Client(gw.url + "/mcp", mode="legacy") as client:
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

    async with Client(gateway_stdio(policy, log), mode="legacy", message_handler=handler) as client:
        await raw_tools(client)
        await raw_call(client, "flip")
        with anyio.fail_after(30):
            await changed.wait()
        tools = await raw_tools(client)
        extra = await raw_call(client, "extra0")
    assert "extra0" in tools
    assert extra["content"] == [{"type": "text", "text": "extra0 done"}]
    assert tool_calls(log) == ["flip", "extra0"]


async def test_tools_list_changed_reaches_a_2026_listener(tmp_path: Path, policy: Path) -> None:
    async with Client(gateway_stdio(policy, tmp_path / "log.jsonl"), mode="auto") as client:
        async with client.listen(tools_list_changed=True) as subscription:
            await raw_call(client, "flip")
            with anyio.fail_after(30):
                event = await subscription.__anext__()
        tools = await raw_tools(client)
    assert type(event).__name__ == "ToolsListChanged"
    assert "extra0" in tools


async def test_a_stdio_upstream_does_not_inherit_the_policys_secrets(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[auth]\nissuer = "https://issuer.example"\naudience = "urn:x"\n'
                      '[auth.introspection]\nendpoint = "https://issuer.example/introspect"\n'
                      'client_id_env = "GW_TEST_CLIENT_ID"\nclient_secret_env = "GW_TEST_SECRET"\n'
                      '[state.redis]\nurl_env = "GW_TEST_REDIS_URL"\n', encoding="utf-8")
    params = gateway_stdio(policy, tmp_path / "log.jsonl", GW_TEST_CLIENT_ID="id",
                           GW_TEST_SECRET="secret", GW_TEST_REDIS_URL="redis://x", GW_TEST_OTHER="o")
    async with Client(params, mode="legacy") as client:
        names = (await raw_call(client, "env"))["structuredContent"]["names"]
    assert "GW_TEST_OTHER" in names and "PATH" in names
    assert not {"GW_TEST_CLIENT_ID", "GW_TEST_SECRET", "GW_TEST_REDIS_URL"} & set(names)
