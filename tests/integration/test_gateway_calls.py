"""The gateway in front of an upstream, driven by the MCP SDK's own client on both protocol
versions: the guard decides before anything goes upstream, allowed results are the upstream's own,
tools/list carries the union of requirements, `[gateway] unlisted_tools = "deny"`.

In-process (tests/fixtures/inprocess.py): the gateway wired from its command line as a stdio gateway
(`--claims` is its caller) in the test's event loop, its upstream the logging upstream in memory, the
client on its app over the streaming bridge. The stdio listener itself is the interop tier's
(test_gateway_passthrough's sampling request, test_gateway_cli).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import mcp_types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from pydantic import TypeAdapter

from mcp_preconditions.client import DENIAL_META_KEY
from mcp_preconditions.envelope import AuthorizationDenial, Remediation
from mcp_preconditions.integrations._calls import DENIAL_CODE
from mcp_preconditions.wire import META_KEY
from tests.fixtures.gateway_upstream import (
    ECHO_RESULT,
    MIRROR_META,
    MIRROR_WIRE,
    SECRET_REQUIREMENTS,
    read_log,
    tool_calls,
)
from tests.fixtures.inprocess import logging_gateway

pytestmark = pytest.mark.asyncio(loop_scope="module")

VERSIONS: dict[str, Literal["legacy", "auto"]] = {"2025-11-25": "legacy", "2026-07-28": "auto"}
POLICY = """
[tools.echo]
requirements = ["auth:claim:role:observer"]
[tools.secret]
requirements = ["auth:claim:tenant:acme"]
"""
OBSERVER = '{"sub": "olga", "role": "observer", "tenant": "acme"}'
RAW: Any = TypeAdapter(dict[str, Any])  # typed by the SDK for its models; a dict passes


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path, Path]:
    policy, claims = tmp_path / "policy.toml", tmp_path / "observer.json"
    policy.write_text(POLICY, encoding="utf-8")
    claims.write_text(OBSERVER, encoding="utf-8")
    return policy, claims, tmp_path / "upstream.jsonl"


async def raw_call(client: Client, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    """A tools/call result exactly as it came over the connection (before the typed models)."""
    request = mcp_types.CallToolRequest(params=mcp_types.CallToolRequestParams(
        name=name, arguments=arguments or {}))
    result: dict[str, Any] = await client.session.send_request(request, RAW)
    return result


@asynccontextmanager
async def gateway_client(policy: Path, log: Path, *options: str,
                         mode: Literal["legacy", "auto"] = "legacy") -> AsyncIterator[Client]:
    """An SDK client of `gateway --policy P OPTIONS -- UPSTREAM`, UPSTREAM the logging upstream in
    memory recording in `log`."""
    async with logging_gateway(policy, log, *options) as gateway, \
            gateway.client(mode) as client:
        yield client


async def raw_tools(client: Client) -> dict[str, dict[str, Any]]:
    result = await client.session.send_request(mcp_types.ListToolsRequest(), RAW)
    return {t["name"]: t for t in result["tools"]}


@pytest.mark.parametrize("version", VERSIONS)
async def test_denied_never_reaches_upstream_and_allowed_result_is_the_upstreams(
        files: tuple[Path, Path, Path], version: str) -> None:
    policy, claims, log = files
    async with gateway_client(policy, log, "--claims", str(claims), mode=VERSIONS[version]) as client:
        assert client.protocol_version == version
        denied = await raw_call(client, "secret")
        mirrored = await raw_call(client, "mirror")
        allowed = await raw_call(client, "echo", {"text": "hi"})
    assert denied["isError"] is True
    assert denied["structuredContent"] == {"error": "unmet_requirements", "tool": "secret",
                                           "unmet": SECRET_REQUIREMENTS, "withheld": 0}
    assert tool_calls(log) == ["echo"]  # the denied call never reached the upstream
    assert mirrored["structuredContent"]["unmet"] == MIRROR_META
    # Exactly what the upstream sent; at 2026-07-28 the envelope adds resultType, nothing else.
    expected = {**ECHO_RESULT, "resultType": "complete"} if version == "2026-07-28" else ECHO_RESULT
    assert allowed == expected


@pytest.mark.parametrize("version", VERSIONS)
async def test_tools_list_has_the_union_of_requirements_on_the_wire(
        files: tuple[Path, Path, Path], version: str) -> None:
    policy, _claims, log = files
    async with gateway_client(policy, log, mode=VERSIONS[version]) as client:
        tools = await raw_tools(client)
    union = [*SECRET_REQUIREMENTS, "auth:claim:tenant:acme"]  # the upstream's own, then the policy's
    assert tools["secret"]["execution"]["requirements"] == union
    assert tools["secret"]["_meta"][META_KEY] == union
    assert tools["echo"]["execution"]["requirements"] == ["auth:claim:role:observer"]
    assert tools["echo"]["_meta"][META_KEY] == ["auth:claim:role:observer"]
    assert "execution" not in tools["slow"] and "_meta" not in tools["slow"]
    assert tools["slow"]["inputSchema"]["properties"]["seconds"] == {"type": "number"}
    assert sorted(tools) == ["ask", "bad", "crash", "echo", "env", "flip", "garbage", "mirror",
                             "relist", "secret", "slow", "typed"]
    # An upstream's execution.requirements and its _meta mirror are both read: neither hides the other.
    assert tools["mirror"]["execution"]["requirements"] == [*MIRROR_WIRE, *MIRROR_META]


@pytest.mark.parametrize("version", VERSIONS)
async def test_unlisted_tools_deny_refuses_tools_without_requirements_and_unknown_names(
        files: tuple[Path, Path, Path], version: str) -> None:
    policy, claims, log = files
    policy.write_text(POLICY + '[gateway]\nunlisted_tools = "deny"\n', encoding="utf-8")
    async with gateway_client(policy, log, "--claims", str(claims), mode=VERSIONS[version]) as client:
        unlisted = await raw_call(client, "slow", {"seconds": 0})
        unknown = await raw_call(client, "no_such_tool")
        allowed = await raw_call(client, "echo")
    assert unlisted["isError"] is True
    assert unlisted["structuredContent"] == {"error": "unlisted_tool", "tool": "slow",
                                             "unmet": [], "withheld": 0}
    assert unknown["structuredContent"] == {"error": "unlisted_tool", "tool": "no_such_tool",
                                            "unmet": [], "withheld": 0}
    assert allowed["structuredContent"] == ECHO_RESULT["structuredContent"]
    assert tool_calls(log) == ["echo"]


async def test_a_name_the_upstream_does_not_have_is_never_forwarded_even_when_unlisted_are_allowed(
        files: tuple[Path, Path, Path]) -> None:
    policy, _claims, log = files
    async with gateway_client(policy, log, mode="legacy") as client:
        unknown = await raw_call(client, "no_such_tool")
        anyone = await raw_call(client, "slow", {"seconds": 0})
    assert unknown["structuredContent"]["error"] == "unlisted_tool"
    assert anyone == {"content": [{"type": "text", "text": "slow done"}]}
    assert tool_calls(log) == ["slow"]


async def test_anonymous_caller_over_stdio_is_denied_with_the_exact_unmet_list(
        files: tuple[Path, Path, Path]) -> None:
    policy, _claims, log = files
    async with gateway_client(policy, log, mode="legacy") as client:
        denied = await raw_call(client, "echo")
    assert denied["structuredContent"]["unmet"] == ["auth:claim:role:observer"]
    assert not tool_calls(log)
    # The gateway lists tools from its own session to the upstream: the log shows the upstream's
    # handshake, tools/list and the readiness check's ping, never a tools/call.
    assert {e["method"] for e in read_log(log)} <= {"initialize", "notifications/initialized",
                                                   "tools/list", "ping"}


async def test_malformed_upstream_requirements_refuse_the_tool(files: tuple[Path, Path, Path]) -> None:
    policy, claims, log = files
    async with gateway_client(policy, log, "--claims", str(claims), mode="legacy") as client:
        refused = await raw_call(client, "bad")
    assert refused["isError"] is True
    assert refused["structuredContent"] == {"error": "unmet_requirements", "tool": "bad",
                                            "unmet": ["(malformed requirements)"], "withheld": 0}
    assert not tool_calls(log)


async def test_jsonrpc_denial_mode(files: tuple[Path, Path, Path]) -> None:
    policy, claims, log = files
    policy.write_text(POLICY + '[guard]\ndenial = "jsonrpc"\n[gateway]\nunlisted_tools = "deny"\n',
                      encoding="utf-8")
    async with gateway_client(policy, log, "--claims", str(claims), mode="legacy") as client:
        with pytest.raises(MCPError) as denied:
            await raw_call(client, "secret")
        with pytest.raises(MCPError) as unlisted:
            await raw_call(client, "slow")
    assert denied.value.error.code == DENIAL_CODE
    data, refused = denied.value.error.data, unlisted.value.error.data
    # Each with the gateway's SEP-2643 envelope in `data["_meta"]`: nothing to do about either.
    envelopes = [AuthorizationDenial.from_meta(d.pop("_meta")) for d in (data, refused)]
    assert [(e.remediation, e.hints) for e in envelopes if e is not None] == [
        (Remediation.UNAVAILABLE, ())] * 2
    assert data == {"error": "unmet_requirements", "tool": "secret",
                    "unmet": SECRET_REQUIREMENTS, "withheld": 0}
    assert refused == {"error": "unlisted_tool", "tool": "slow", "unmet": [], "withheld": 0}
    assert not tool_calls(log)


async def test_a_near_miss_policy_name_refuses_every_call(files: tuple[Path, Path, Path]) -> None:
    policy, claims, log = files
    policy.write_text('[tools.Echo]\nrequirements = ["auth:claim:role:observer"]\n', encoding="utf-8")
    async with gateway_client(policy, log, "--claims", str(claims), mode="legacy") as client:
        refused = await raw_call(client, "echo")
        also = await raw_call(client, "slow", {"seconds": 0})
    assert refused["isError"] is True and also["isError"] is True
    # The caller learns that the policy is unusable, never its path or the names in it.
    assert refused["content"][0]["text"] == also["content"][0]["text"] == \
        "the gateway's policy is unusable"
    assert not tool_calls(log)


@pytest.mark.parametrize("version", VERSIONS)
async def test_list_filtering_hides_what_the_caller_cannot_call(
        files: tuple[Path, Path, Path], version: str) -> None:
    policy, claims, log = files
    policy.write_text(POLICY + '[guard]\nlist_filtering = true\n[gateway]\nunlisted_tools = "deny"\n',
                      encoding="utf-8")
    async with gateway_client(policy, log, "--claims", str(claims), mode=VERSIONS[version]) as client:
        tools = await raw_tools(client)
    # echo: the observer meets its requirement; secret needs admin; the rest have none ("deny").
    assert sorted(tools) == ["echo"]


async def test_a_tool_with_an_output_schema_gets_its_denial_payload_in_meta(
        files: tuple[Path, Path, Path]) -> None:
    policy, claims, log = files
    policy.write_text(POLICY + '[tools.typed]\nrequirements = ["auth:claim:role:admin"]\n',
                      encoding="utf-8")
    async with gateway_client(policy, log, "--claims", str(claims), mode="legacy") as client:
        denied = await raw_call(client, "typed")
    # Clients validate structuredContent against the outputSchema even on an error.
    assert denied["isError"] is True and "structuredContent" not in denied
    assert denied["_meta"][DENIAL_META_KEY] == {"error": "unmet_requirements", "tool": "typed",
                                                "unmet": ["auth:claim:role:admin"], "withheld": 0}
    assert not tool_calls(log)
