"""Protocol-version bridging the other way round: an upstream that speaks 2026-07-28 only, in front
of 2025-11-25 and 2026-07-28 clients. Nothing is lost: tools with their requirements, the upstream's
exact results, prompts, resources, and tools/list_changed (heard on the gateway's listen stream).

In-process (tests/fixtures/inprocess.py): the gateway wired from its command line in the test's event
loop, the SDK's server in memory speaking 2026-07-28 only, the clients on its app over the streaming
bridge.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest

from tests.fixtures.gateway_upstream import ECHO_RESULT, NOTE, SECRET_REQUIREMENTS, read_log
from tests.fixtures.inprocess import WAIT_SECONDS, logging_gateway
from tests.integration.test_gateway_calls import RAW, VERSIONS, raw_call, raw_tools

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text('[tools.secret]\nrequirements = ["auth:claim:tenant:acme"]\n', encoding="utf-8")
    return path


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_2026_only_upstream_loses_nothing(tmp_path: Path, policy: Path, version: str) -> None:
    log = tmp_path / "log.jsonl"
    changed = anyio.Event()

    async def handler(message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            changed.set()

    async with logging_gateway(policy, log, GATEWAY_UPSTREAM_MODERN_ONLY="1") as gw, \
            gw.client(VERSIONS[version], message_handler=handler) as client:
        assert client.protocol_version == version
        tools = await raw_tools(client)
        echo = await raw_call(client, "echo")
        prompt = await client.get_prompt("greet", {"name": "Ada"})
        note = await client.session.send_request(mcp_types.ReadResourceRequest(
            params=mcp_types.ReadResourceRequestParams(uri="test://note")), RAW)
        if version == "2025-11-25":
            await raw_call(client, "flip")
            with anyio.fail_after(WAIT_SECONDS):
                await changed.wait()
            assert "extra0" in await raw_tools(client)
    # The gateway's own session is at 2026-07-28: its requests carry that envelope.
    first = next(e for e in read_log(log) if e["method"] == "tools/list")
    assert first["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
    assert tools["secret"]["execution"]["requirements"] == [*SECRET_REQUIREMENTS, "auth:claim:tenant:acme"]
    expected = {**ECHO_RESULT, "resultType": "complete"} if version == "2026-07-28" else ECHO_RESULT
    assert {k: v for k, v in echo.items() if k != "_meta"} == {
        k: v for k, v in expected.items() if k != "_meta"}
    # At 2026-07-28 the upstream's SDK stamps its serverInfo into _meta; the rest is the tool's own.
    assert echo["_meta"]["example.com/trace"] == "abc"
    assert prompt.messages[0].content == mcp_types.TextContent(type="text", text="Hello, Ada!")
    assert note["contents"] == NOTE["contents"]
    assert ("ttlMs" in note) == (version == "2026-07-28")


async def test_a_change_just_after_the_first_listing_is_heard(tmp_path: Path, policy: Path) -> None:
    """The upstream adds `late` and says its list changed right after answering the gateway's first
    tools/list. A listen stream replays nothing: the gateway's is acknowledged before it lists, so
    it hears the change and lists `late` (it used to list first, miss it, and show the stale list
    until the server's next change)."""
    async with logging_gateway(policy, tmp_path / "log.jsonl", GATEWAY_UPSTREAM_MODERN_ONLY="1",
                               GATEWAY_UPSTREAM_CHANGE_AFTER_LISTING="1") as gw, \
            gw.client("legacy") as client:
        tools: dict[str, Any] = {}
        with anyio.move_on_after(WAIT_SECONDS):  # the re-listing that follows the change
            while "late" not in tools:
                tools = await raw_tools(client)
                await anyio.sleep(0.01)
    assert "late" in tools, sorted(tools)
