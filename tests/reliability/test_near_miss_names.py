"""Near-miss policy names of real tools (issue 22, item 7): random typos (separators, case, one edit,
look-alikes) of npm server-filesystem's tool names in a policy's `[tools.NAME]`. The oracle: no call
reaches the tool the policy meant to guard; on every hosted adapter (the SDK's in-process client),
and through `mcp-preconditions gateway` in front of the server, where a refused `write_file` must
leave the disk untouched.

In-process: the names are FILESYSTEM_TOOLS, the listing server-filesystem gives today; the gateway is
wired from its command line in the test's loop (tests/fixtures/inprocess.py) in front of a stand-in
in memory that lists those names and whose `write_file` writes. Interop (real processes): the live
listing is checked to be FILESYSTEM_TOOLS, and one typo goes through a gateway process in front of
the real server.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.server.lowlevel.server import Server

from mcp_preconditions.names import check_tool_names
from tests.fixtures.inprocess import cli_gateway
from tests.fixtures.mcp_servers import ROOT, raw_tools, server_env
from tests.fixtures.memory_upstream import MemoryServers
from tests.fixtures.upstreams import filesystem_stdio, gateway_stdio
from tests.properties.test_advertised_enforced import FLAVOURS

from .tally import TALLY
from .test_fail_open_adapters import near_miss_case

SUITE = "near-miss names of real tools"
SEPARATORS = ("-", "_", ".", " ", "")
LETTERS = "abcdefghijklmnopqrstuvwxyz"
CYRILLIC = {"a": "а", "e": "е", "o": "о", "c": "с", "p": "р", "x": "х", "i": "і"}
CLAIMS = ROOT / "examples" / "claims" / "observer.json"
# npm server-filesystem's tools, as it lists them (test_the_real_server_lists_these_names).
FILESYSTEM_TOOLS = ["read_file", "read_text_file", "read_media_file", "read_multiple_files",
                    "write_file", "edit_file", "create_directory", "list_directory",
                    "list_directory_with_sizes", "directory_tree", "move_file", "search_files",
                    "get_file_info", "list_allowed_directories"]


async def _listed(root: Path) -> list[str]:
    command = filesystem_stdio(root)
    params = StdioServerParameters(command=command[0], args=command[1:], env=server_env(), cwd=ROOT)
    with anyio.fail_after(10):
        async with Client(params) as client:
            return [t["name"] for t in await raw_tools(client.session)]


@pytest.mark.interop
def test_the_real_server_lists_these_names(tmp_path: Path) -> None:
    """Interop: the names the in-process cases use are those npm server-filesystem lists (when it
    lists others, FILESYSTEM_TOOLS is to be brought up to date)."""
    assert asyncio.run(_listed(tmp_path)) == FILESYSTEM_TOOLS


Typo = Callable[[str, st.DrawFn], str]


def _separator(name: str, draw: st.DrawFn) -> str:
    return name.replace("_", draw(st.sampled_from(SEPARATORS)))


def _case(name: str, draw: st.DrawFn) -> str:
    return draw(st.sampled_from((name.upper(), name.title(), name.capitalize())))


def _insert(name: str, draw: st.DrawFn) -> str:
    i = draw(st.integers(0, len(name)))
    return name[:i] + draw(st.sampled_from(LETTERS)) + name[i:]


def _delete(name: str, draw: st.DrawFn) -> str:
    i = draw(st.integers(0, len(name) - 1))
    return name[:i] + name[i + 1:]


def _substitute(name: str, draw: st.DrawFn) -> str:
    i = draw(st.integers(0, len(name) - 1))
    return name[:i] + draw(st.sampled_from(LETTERS)) + name[i + 1:]


def _transpose(name: str, draw: st.DrawFn) -> str:
    i = draw(st.integers(0, len(name) - 2))
    return name[:i] + name[i + 1] + name[i] + name[i + 2:]


def _look_alike(name: str, draw: st.DrawFn) -> str:
    letters = [c for c in CYRILLIC if c in name]
    if not letters:
        return name.upper()
    latin = draw(st.sampled_from(letters))
    return name.replace(latin, CYRILLIC[latin], 1)


TYPOS: dict[str, Typo] = {"separator": _separator, "case": _case, "insert": _insert,
                          "delete": _delete, "substitute": _substitute, "transpose": _transpose,
                          "look-alike": _look_alike}


@st.composite
def near_miss(draw: st.DrawFn, tools: list[str]) -> tuple[str, str]:
    """(a real tool, a typo of it that is no real tool's name)."""
    tool = draw(st.sampled_from(tools))
    variant = TYPOS[draw(st.sampled_from(sorted(TYPOS)))](tool, draw)
    if variant in tools:  # a typo that happens to be another real tool (or no change)
        variant = tool.upper()
    return tool, variant


@settings(max_examples=60, deadline=None)
@given(near_miss(FILESYSTEM_TOOLS), st.sampled_from(FLAVOURS))
def test_a_near_miss_of_a_real_tool_never_leaves_it_unguarded(pair: tuple[str, str],
                                                              flavour: str) -> None:
    tool, variant = pair
    assert (variant, tool) in check_tool_names([variant], FILESYSTEM_TOOLS).near_misses
    calls, wrong = asyncio.run(near_miss_case(flavour, tool, variant))
    TALLY.add(SUITE, cases=1, calls=calls, wrongly_allowed=wrong)
    assert wrong == 0, (flavour, tool, variant)


# One typo of each kind, through the gateway in front of the real server.
GATEWAY_TYPOS = ["write-file", "writefile", "Write.File", "wirte_file", "write_fle", "write_fille",
                 "write_f\u0456le"]


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))}


def near_miss_policy(directory: Path, variant: str) -> Path:
    policy = directory / "near.toml"
    policy.write_text(f'[tools.{json.dumps(variant)}]\nrequirements = ["auth:oauth2", '
                      f'"auth:scope:files:write"]\n', encoding="utf-8")
    return policy


def disk_of(directory: Path) -> tuple[Path, dict[str, bytes]]:
    """A folder holding notes.txt, and what it holds."""
    disk = directory / "disk"
    disk.mkdir()
    (disk / "notes.txt").write_text("first line\n", encoding="utf-8")
    return disk.resolve(), snapshot(disk)


def counted(disk: Path, before: dict[str, bytes], result: dict[str, Any]) -> None:
    wrong = int(snapshot(disk) != before or not result["isError"])
    TALLY.add(SUITE, cases=1, calls=1, wrongly_allowed=wrong)
    assert wrong == 0, result


def stand_in(env: Any, die: Any) -> Server[Any]:
    """server-filesystem as the gateway sees it: its tools' names, and a `write_file` that writes."""
    async def list_tools(ctx: Any, params: Any) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=[mcp_types.Tool(name=n, input_schema={"type": "object"})
                                                for n in FILESYSTEM_TOOLS])

    async def call_tool(ctx: Any, params: mcp_types.CallToolRequestParams) -> mcp_types.CallToolResult:
        arguments = params.arguments or {}
        if params.name == "write_file":
            Path(arguments["path"]).write_text(arguments["content"], encoding="utf-8")
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text="done")])

    return Server("filesystem", on_list_tools=list_tools, on_call_tool=call_tool)


@pytest.mark.parametrize("variant", GATEWAY_TYPOS)
async def test_the_gateway_refuses_writes_under_a_near_miss_policy(tmp_path: Path, variant: str) -> None:
    disk, before = disk_of(tmp_path)
    servers = MemoryServers()
    with servers.installed():
        upstream = servers.add("filesystem", stand_in)
        async with cli_gateway(["--policy", str(near_miss_policy(tmp_path, variant)), "--claims",
                                str(CLAIMS), "--", *upstream]) as gw, gw.client() as client:
            result = await client.call_tool("write_file", {"path": str(disk / "notes.txt"),
                                                           "content": "gone\n"})
    counted(disk, before, result.model_dump(by_alias=True))


async def _write_through_gateway(policy: Path, disk: Path) -> dict[str, Any]:
    command = gateway_stdio(policy, filesystem_stdio(disk), claims=CLAIMS)
    params = StdioServerParameters(command=command[0], args=command[1:], env=server_env(), cwd=ROOT)
    with anyio.fail_after(10):
        async with Client(params) as client:
            result = await client.call_tool("write_file", {"path": str(disk / "notes.txt"),
                                                           "content": "gone\n"})
            return result.model_dump(by_alias=True)


@pytest.mark.interop
async def test_a_gateway_process_in_front_of_the_real_server_refuses_the_write(tmp_path: Path) -> None:
    """Interop: the gateway process, npm server-filesystem and its disk, end to end, for the
    look-alike typo (the in-process cases above hold every kind)."""
    disk, before = disk_of(tmp_path)
    result = await _write_through_gateway(near_miss_policy(tmp_path, "write_f\u0456le"), disk)
    counted(disk, before, result)
