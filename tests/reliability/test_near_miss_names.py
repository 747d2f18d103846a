"""Near-miss policy names of real tools (issue 22, item 7): random typos (separators, case, one edit,
look-alikes) of npm server-filesystem's tool names, as listed live, in a policy's `[tools.NAME]`.
The oracle: no call reaches the tool the policy meant to guard; on every hosted adapter (the SDK's
in-process client), and through `mcp-preconditions gateway` in front of the real server, where a
refused `write_file` must leave the disk untouched.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from mcp_preconditions.names import check_tool_names
from tests.fixtures.mcp_servers import ROOT, raw_tools, server_env
from tests.fixtures.upstreams import filesystem_stdio, gateway_stdio
from tests.properties.test_advertised_enforced import FLAVOURS

from .tally import TALLY
from .test_fail_open_adapters import near_miss_case

SUITE = "near-miss names of real tools"
SEPARATORS = ("-", "_", ".", " ", "")
LETTERS = "abcdefghijklmnopqrstuvwxyz"
CYRILLIC = {"a": "а", "e": "е", "o": "о", "c": "с", "p": "р", "x": "х", "i": "і"}


async def _listed(root: Path) -> list[str]:
    command = filesystem_stdio(root)
    params = StdioServerParameters(command=command[0], args=command[1:], env=server_env(), cwd=ROOT)
    with anyio.fail_after(60):
        async with Client(params) as client:
            return [t["name"] for t in await raw_tools(client.session)]


@pytest.fixture(scope="module")
def real_tools(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """server-filesystem's tool names, as the running server lists them."""
    names = asyncio.run(_listed(tmp_path_factory.mktemp("fs-names")))
    assert {"write_file", "edit_file", "move_file", "read_text_file"} <= set(names)
    return names


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


def test_a_near_miss_of_a_real_tool_never_leaves_it_unguarded(real_tools: list[str]) -> None:
    @settings(max_examples=60, deadline=None)
    @given(near_miss(real_tools), st.sampled_from(FLAVOURS))
    def check(pair: tuple[str, str], flavour: str) -> None:
        tool, variant = pair
        assert (variant, tool) in check_tool_names([variant], real_tools).near_misses
        calls, wrong = asyncio.run(near_miss_case(flavour, tool, variant))
        TALLY.add(SUITE, cases=1, calls=calls, wrongly_allowed=wrong)
        assert wrong == 0, (flavour, tool, variant)

    check()


# One typo of each kind, through the gateway in front of the real server.
GATEWAY_TYPOS = ["write-file", "writefile", "Write.File", "wirte_file", "write_fle", "write_fille",
                 "write_f\u0456le"]


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))}


async def _write_through_gateway(policy: Path, disk: Path) -> dict[str, Any]:
    command = gateway_stdio(policy, filesystem_stdio(disk), claims=ROOT / "examples" / "claims" /
                            "observer.json")
    params = StdioServerParameters(command=command[0], args=command[1:], env=server_env(), cwd=ROOT)
    with anyio.fail_after(60):
        async with Client(params) as client:
            result = await client.call_tool("write_file", {"path": str(disk / "notes.txt"),
                                                           "content": "gone\n"})
            return result.model_dump(by_alias=True)


@pytest.mark.parametrize("variant", GATEWAY_TYPOS)
async def test_the_gateway_refuses_writes_under_a_near_miss_policy(tmp_path: Path, variant: str) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    (disk / "notes.txt").write_text("first line\n", encoding="utf-8")
    before = snapshot(disk)
    policy = tmp_path / "near.toml"
    policy.write_text(f'[tools.{json.dumps(variant)}]\nrequirements = ["auth:oauth2", '
                      f'"auth:scope:files:write"]\n', encoding="utf-8")
    result = await _write_through_gateway(policy, disk.resolve())
    wrong = int(snapshot(disk) != before or not result["isError"])
    TALLY.add(SUITE, cases=1, calls=1, wrongly_allowed=wrong)
    assert wrong == 0, result
