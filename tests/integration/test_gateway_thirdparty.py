"""Third-party MCP servers, unchanged, behind `mcp-preconditions gateway`: npm server-everything (stdio
and streamable-HTTP upstreams), npm server-filesystem (a denied write_file leaves the disk untouched)
and PyPI mcp-server-time, each driven by the MCP SDK's own client at 2025-11-25 and 2026-07-28.

An allowed call's result is compared with the same call made to the upstream directly.

Interop: these servers ARE the real components (SPEC §9: server-everything, -filesystem and the
time server, each end to end through real gateway processes). Each way of reaching server-everything
and each protocol version is run once or twice, not every pair: the version bridging of every path
is the in-process tier's (test_gateway_calls, test_gateway_bridging, test_gateway_transparency).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import ExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from pydantic import TypeAdapter

from mcp_preconditions.client import DENIAL_META_KEY
from mcp_preconditions.wire import META_KEY
from tests.fixtures.mcp_servers import MODES, ROOT, VERSIONS, raw_tools, server_env
from tests.fixtures.upstreams import (
    Listening,
    everything_stdio,
    filesystem_stdio,
    gateway_http,
    gateway_stdio,
    time_stdio,
)

pytestmark = [pytest.mark.integration, pytest.mark.interop]

Target = str | Sequence[str]  # a streamable-HTTP URL, or the command line of a stdio server
EVERYTHING_POLICY = """environment = ["production"]
[tools.echo]
requirements = ["env:production"]
[tools.get-sum]
requirements = ["env:staging", "auth:scope:math:write"]
"""
TIME_POLICY = """environment = ["production"]
[tools.convert_time]
requirements = ["env:staging"]
"""
FILESYSTEM_POLICY = ROOT / "policies" / "filesystem.toml"
OBSERVER = ROOT / "examples" / "claims" / "observer.json"
RESULT_FIELDS = ("content", "structuredContent", "isError", "_meta")


async def _never_called(context: Any, params: Any = None) -> Any:
    # No tool these tests call asks its client anything. server-everything and server-filesystem do
    # ask for roots on their own as they start; the SDK answers that with this error, which nothing
    # here looks at (the comparisons are of listings and results).
    raise AssertionError("this client answers no server request")


# The gateway declares sampling, elicitation and roots to its upstream (it forwards such requests), and
# server-everything lists more tools to a client that does: a direct client compared with the gateway
# declares the same.
LIKE_THE_GATEWAY: dict[str, Any] = {"sampling_callback": _never_called,
                                    "elicitation_callback": _never_called,
                                    "list_roots_callback": _never_called}


@asynccontextmanager
async def connect(target: Target, version: str = "2025-11-25", **options: Any) -> AsyncIterator[Client]:
    """The MCP SDK's client on `version`, over streamable HTTP or by launching a stdio command."""
    if isinstance(target, str):
        transport: Any = streamable_http_client(target)
    else:
        transport = StdioServerParameters(command=target[0], args=list(target[1:]), env=server_env(),
                                          cwd=ROOT)
    async with Client(transport, mode=MODES[version], **options) as client:
        assert client.protocol_version == version
        yield client


async def raw_call(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The `tools/call` result as it came over the connection: the fields an upstream decides."""
    as_dict: Any = TypeAdapter(dict[str, Any])
    params = mcp_types.CallToolRequestParams(name=name, arguments=arguments)
    request = mcp_types.CallToolRequest(params=params)
    raw: dict[str, Any] = await client.session.send_request(request, as_dict)
    return {key: raw[key] for key in RESULT_FIELDS if key in raw}


def payload(result: dict[str, Any]) -> dict[str, Any]:
    """A result without the protocol's own `_meta` envelope keys (`io.modelcontextprotocol/...`, such
    as the 2026-07-28 serverInfo), which SPEC §10 lets version bridging change."""
    meta = {k: v for k, v in result.get("_meta", {}).items() if not k.startswith("io.modelcontextprotocol/")}
    return {k: v for k, v in result.items() if k != "_meta"} | ({"_meta": meta} if meta else {})


def denial(tool: str, unmet: list[str], *, scope: str = "") -> dict[str, Any]:
    """The §3 refusal, and what to do about it (SPEC §15: only an operator changes these, unless
    only scopes are missing); an unmet `auth:scope:` requirement adds the scope to ask for."""
    said = "" if all(r.startswith("auth:scope:") for r in unmet) else " Ask an operator."
    text = f"Tool '{tool}' was not run: unmet requirements: {', '.join(unmet)}.{said}"
    return {"isError": True, "structuredContent": {"error": "unmet_requirements", "tool": tool,
                                                   "unmet": unmet, "withheld": 0},
            "text": text + (f" Missing scopes: {scope}." if scope else "")}


def seen_denial(result: dict[str, Any]) -> dict[str, Any]:
    """The refusal as a client reads it: its payload is the structuredContent, or, for a tool that
    declares an outputSchema (write_file, convert_time), `_meta[DENIAL_META_KEY]` with no
    structuredContent at all (schema-validating clients would reject it)."""
    payload = result.get("structuredContent")
    if payload is None:
        payload = (result.get("_meta") or {}).get(DENIAL_META_KEY)
    return {"isError": result.get("isError"), "structuredContent": payload,
            "text": result["content"][0]["text"]}


def check_listing(wire: list[dict[str, Any]], direct: list[dict[str, Any]],
                  requirements: dict[str, list[str]]) -> None:
    """Every upstream tool, in the upstream's order; the policy's requirements on the wire and in the
    `_meta` mirror, nothing added to the other tools."""
    assert [t["name"] for t in wire] == [t["name"] for t in direct]
    for tool in wire:
        wanted = requirements.get(tool["name"])
        if wanted is None:
            assert "requirements" not in tool.get("execution", {}), tool
            assert META_KEY not in tool.get("_meta", {}), tool
        else:
            assert tool["execution"]["requirements"] == wanted
            assert tool["_meta"][META_KEY] == wanted


def policy_file(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


# --- npm server-everything -------------------------------------------------------------------------
EVERYTHING_REQUIREMENTS = {"echo": ["env:production"], "get-sum": ["env:staging", "auth:scope:math:write"]}


@pytest.fixture(scope="module")
def everything_gateways(everything_http_server: Listening, tmp_path_factory: pytest.TempPathFactory
                        ) -> Iterator[dict[str, Target]]:
    """The gateway in front of server-everything three ways: an HTTP listener over a stdio upstream
    and over the HTTP upstream, and a stdio listener (launched by each client) over a stdio upstream."""
    policy = policy_file(tmp_path_factory.mktemp("everything"), "everything.toml", EVERYTHING_POLICY)
    with ExitStack() as stack:
        over_stdio = stack.enter_context(gateway_http(policy, everything_stdio()))
        over_http = stack.enter_context(gateway_http(policy, upstream_url=everything_http_server.url))
        yield {"http listener, stdio upstream": over_stdio.url,
               "http listener, http upstream": over_http.url,
               "stdio listener, stdio upstream": gateway_stdio(policy, everything_stdio())}


@pytest.mark.parametrize(("way", "version"), [
    ("http listener, stdio upstream", "2025-11-25"), ("http listener, stdio upstream", "2026-07-28"),
    ("http listener, http upstream", "2026-07-28"), ("stdio listener, stdio upstream", "2025-11-25")])
async def test_server_everything_behind_the_gateway(
        everything_gateways: dict[str, Target], everything_http_server: Listening, way: str,
        version: str) -> None:
    async with connect(everything_http_server.url, **LIKE_THE_GATEWAY) as upstream:
        direct = await raw_tools(upstream.session)
        echoed = await raw_call(upstream, "echo", {"message": "hi"})
    async with connect(everything_gateways[way], version) as client:
        wire = await raw_tools(client.session)
        through = await raw_call(client, "echo", {"message": "hi"})
        denied = await raw_call(client, "get-sum", {"a": 1, "b": 2})
    check_listing(wire, direct, EVERYTHING_REQUIREMENTS)
    assert payload(through) == payload(echoed) == {"content": [{"type": "text", "text": "Echo: hi"}]} | (
        {"isError": False} if "isError" in echoed else {})
    assert seen_denial(denied) == denial("get-sum", ["env:staging", "auth:scope:math:write"],
                                         scope="math:write")


# --- npm server-filesystem -------------------------------------------------------------------------
FILESYSTEM_REQUIREMENTS = {name: ["auth:oauth2", "auth:scope:files:write"]
                           for name in ("write_file", "edit_file", "create_directory", "move_file")}


@pytest.fixture
def disk(tmp_path: Path) -> Path:
    """The one directory server-filesystem may touch, with a file in it."""
    root = tmp_path / "disk"
    root.mkdir()
    (root / "notes.txt").write_text("first line\n", encoding="utf-8")
    return root.resolve()


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else b"<dir>"
            for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("version", ["2025-11-25"])  # (2026-07-28: the writer's test below)
async def test_server_filesystem_denied_writes_leave_the_disk_untouched(disk: Path, version: str) -> None:
    before = snapshot(disk)
    notes = str(disk / "notes.txt")
    async with connect(filesystem_stdio(disk), **LIKE_THE_GATEWAY) as upstream:
        direct = await raw_tools(upstream.session)
        read_direct = await raw_call(upstream, "read_text_file", {"path": notes})
    gateway = gateway_stdio(FILESYSTEM_POLICY, filesystem_stdio(disk), claims=OBSERVER)
    async with connect(gateway, version) as client:
        wire = await raw_tools(client.session)
        read = await raw_call(client, "read_text_file", {"path": notes})
        overwrite = await raw_call(client, "write_file", {"path": notes, "content": "gone\n"})
        create = await raw_call(client, "write_file", {"path": str(disk / "new.txt"), "content": "x"})
        mkdir = await raw_call(client, "create_directory", {"path": str(disk / "sub")})
        move = await raw_call(client, "move_file", {"source": notes, "destination": str(disk / "m.txt")})
    check_listing(wire, direct, FILESYSTEM_REQUIREMENTS)
    assert payload(read) == payload(read_direct)
    assert read["content"][0]["text"] == "first line\n"
    for tool, result in (("write_file", overwrite), ("write_file", create), ("create_directory", mkdir),
                         ("move_file", move)):
        assert seen_denial(result) == denial(tool, ["auth:scope:files:write"], scope="files:write")
    assert snapshot(disk) == before


@pytest.mark.parametrize("version", ["2026-07-28"])  # (2025-11-25: the denied writes' test above)
async def test_server_filesystem_writes_for_a_caller_with_the_scope(
        disk: Path, tmp_path: Path, version: str) -> None:
    writer = tmp_path / "writer.json"
    writer.write_text(json.dumps({"sub": "erin", "scope": "files:write"}), encoding="utf-8")
    gateway = gateway_stdio(FILESYSTEM_POLICY, filesystem_stdio(disk), claims=writer)
    async with connect(gateway, version) as client:
        written = await raw_call(client, "write_file", {"path": str(disk / "new.txt"), "content": "hello"})
    assert written.get("isError") is not True, written
    assert (disk / "new.txt").read_text(encoding="utf-8") == "hello"


async def test_server_filesystem_over_http_denies_an_anonymous_write(disk: Path) -> None:
    before = snapshot(disk)
    with gateway_http(FILESYSTEM_POLICY, filesystem_stdio(disk)) as gateway:
        for version in VERSIONS:
            async with connect(gateway.url, version) as client:
                denied = await raw_call(client, "write_file", {"path": str(disk / "notes.txt"),
                                                               "content": "x"})
                listed = await raw_call(client, "list_directory", {"path": str(disk)})
            assert seen_denial(denied) == denial("write_file", ["auth:oauth2", "auth:scope:files:write"],
                                                 scope="files:write"), version
            assert listed["content"][0]["text"] == "[FILE] notes.txt", version
    assert snapshot(disk) == before


# --- PyPI mcp-server-time --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def time_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Listening]:
    policy = policy_file(tmp_path_factory.mktemp("time"), "time.toml", TIME_POLICY)
    with gateway_http(policy, time_stdio()) as gateway:
        yield gateway


@pytest.mark.parametrize("version", ["2026-07-28"])
async def test_mcp_server_time_behind_the_gateway(time_gateway: Listening, version: str) -> None:
    async with connect(time_stdio(), version, **LIKE_THE_GATEWAY) as upstream:
        direct = await raw_tools(upstream.session)
        now_direct = await raw_call(upstream, "get_current_time", {"timezone": "UTC"})
    async with connect(time_gateway.url, version) as client:
        wire = await raw_tools(client.session)
        now = await raw_call(client, "get_current_time", {"timezone": "UTC"})
        denied = await raw_call(client, "convert_time", {"source_timezone": "UTC", "time": "12:00",
                                                         "target_timezone": "Europe/Paris"})
    check_listing(wire, direct, {"convert_time": ["env:staging"]})
    assert now.get("isError") is not True
    assert now["structuredContent"]["timezone"] == "UTC"
    assert payload(now).keys() == payload(now_direct).keys()
    assert seen_denial(denied) == denial("convert_time", ["env:staging"])
