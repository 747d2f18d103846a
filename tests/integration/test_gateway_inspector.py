"""The MCP Inspector CLI (npm @modelcontextprotocol/inspector 2.12.0) in front of `mcp-preconditions
gateway` and third-party servers, in both protocol eras: the issue's done-criterion (the shipped
policies/everything.toml over `npx --no-install mcp-server-everything stdio`), server-everything over
the HTTP listener, server-filesystem (a denied write leaves the disk untouched) and mcp-server-time.

The Inspector's typed models drop `execution.requirements`; the `_meta` mirror is what it shows.

Interop: the Inspector CLI and the npm and PyPI servers are the real components, the gateway a
process each Inspector run starts as a user types it (or the HTTP listener it connects to); none of
that runs in-process.
"""

from __future__ import annotations

import json
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from mcp_preconditions.wire import META_KEY
from tests.fixtures.inspector import ERAS, inspector, run_inspector
from tests.fixtures.mcp_servers import ROOT, raw_tools, server_env
from tests.fixtures.upstreams import (
    GATEWAY_SCRIPT,
    Listening,
    everything_stdio,
    filesystem_stdio,
    gateway_http,
    time_stdio,
)
from tests.integration.test_inspector import shown_envelope

pytestmark = [pytest.mark.integration, pytest.mark.interop]

EVERYTHING_POLICY = ROOT / "policies" / "everything.toml"
FILESYSTEM_POLICY = ROOT / "policies" / "filesystem.toml"
OBSERVER = ROOT / "examples" / "claims" / "observer.json"
NPX_EVERYTHING = ["npx", "--no-install", "mcp-server-everything", "stdio"]
DENIED = 5  # the Inspector's exit code for a tool result with isError
HTTP_POLICY = """environment = ["production"]
[tools.echo]
requirements = ["env:production"]
[tools.get-sum]
requirements = ["env:staging"]
"""


def gateway(policy: Path, *upstream: str, claims: Path | None = None) -> list[str]:
    """The Inspector's stdio target: `--` then the gateway's own command line, as a user types it."""
    caller = ["--claims", str(claims)] if claims else []
    return ["--", str(GATEWAY_SCRIPT), "gateway", "--policy", str(policy), *caller, "--", *upstream]


def era_option(era: str | None) -> list[str]:
    return [] if era is None else ["--protocol-era", era]


def call(tmp_path: Path, era: str | None, target: list[str], tool: str, **arguments: str
         ) -> tuple[int, Any]:
    # --tool-arg takes every value up to the next option: it goes before the target.
    args = [a for key, value in arguments.items() for a in ("--tool-arg", f"{key}={value}")]
    code, out = inspector(tmp_path, *args, *era_option(era), "--method", "tools/call",
                          "--tool-name", tool, *target)
    return code, out["result"]


def listing(tmp_path: Path, era: str | None, target: list[str]) -> dict[str, dict[str, Any]]:
    code, out = inspector(tmp_path, *era_option(era), "--method", "tools/list", *target)
    assert code == 0, out
    return {tool["name"]: tool for tool in out["result"]["tools"]}


def shown_requirements(tools: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    return {name: tool["_meta"][META_KEY] for name, tool in tools.items()
            if META_KEY in tool.get("_meta", {})}


async def sdk_listing(command: list[str]) -> dict[str, dict[str, Any]]:
    """The upstream's own tools/list, from the MCP SDK's client. (The Inspector is not used here: it
    waits a minute for server-everything to exit after stdin closes.)"""
    params = StdioServerParameters(command=command[0], args=command[1:], env=server_env(), cwd=ROOT)
    async with Client(params, mode="legacy") as client:
        return {tool["name"]: tool for tool in await raw_tools(client.session)}


def check(policy: Path, claims: Path, tools: dict[str, dict[str, Any]], tmp_path: Path
          ) -> dict[str, dict[str, Any]]:
    """`mcp-preconditions check` of the upstream's tools for `claims`: the verdicts to expect."""
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps({"tools": list(tools.values())}), encoding="utf-8")
    done = subprocess.run([str(GATEWAY_SCRIPT), "check", "--policy", str(policy), "--claims", str(claims),
                           "--tools", str(tools_file), "--format", "json"], capture_output=True,
                          text=True, env=server_env(), cwd=ROOT, timeout=10, check=False)
    assert done.returncode == 0, done.stderr
    return {verdict["name"]: verdict for verdict in json.loads(done.stdout)["tools"]}


# --- the done-criterion --------------------------------------------------------------------
# work bound, not an event wait: three Inspector runs, each starting the gateway and its upstream
@pytest.mark.timeout(300)
def test_done_criterion_shipped_everything_policy_shows_requirements_and_a_denial(tmp_path: Path) -> None:
    """Run as a user types it: no protocol-era option (the other tests here cover both eras)."""
    if not EVERYTHING_POLICY.exists():
        pytest.fail(f"{EVERYTHING_POLICY} is not there: the gateway ships it", pytrace=False)
    named = {name: table["requirements"] for name, table in tomllib.loads(
        EVERYTHING_POLICY.read_text(encoding="utf-8")).get("tools", {}).items()}
    target = gateway(EVERYTHING_POLICY, *NPX_EVERYTHING, claims=OBSERVER)
    direct = anyio.run(sdk_listing, NPX_EVERYTHING)
    through = listing(tmp_path, None, target)
    # The gateway declares sampling, elicitation and roots upstream, which the Inspector does not:
    # server-everything lists a few more tools to it.
    assert [name for name in through if name in direct] == list(direct)
    assert shown_requirements(through) == {n: r for n, r in named.items() if n in through}
    assert named, "policies/everything.toml puts requirements on no tool"
    verdicts = check(EVERYTHING_POLICY, OBSERVER, direct, tmp_path)
    # A denial's structuredContent fails the Inspector's outputSchema check (see the last test here):
    # show the denial of a tool without one.
    refused = [name for name, tool in direct.items()
               if not verdicts[name]["allowed"] and "outputSchema" not in tool]
    assert refused, "the observer is allowed every tool without an outputSchema: no denial to show"
    code, denied = call(tmp_path, None, target, refused[0])
    assert code == DENIED
    assert denied["isError"] is True
    assert denied["structuredContent"]["tool"] == refused[0]
    assert denied["structuredContent"]["unmet"] == verdicts[refused[0]]["unmet"]


# --- server-everything over the HTTP listener -------------------------------------------------------
@pytest.fixture(scope="module")
def everything_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Listening]:
    policy = tmp_path_factory.mktemp("inspector-everything") / "everything.toml"
    policy.write_text(HTTP_POLICY, encoding="utf-8")
    with gateway_http(policy, everything_stdio()) as server:
        yield server


@pytest.mark.parametrize("era", list(ERAS))
def test_inspector_over_the_http_listener(everything_gateway: Listening, tmp_path: Path, era: str) -> None:
    tools = listing(tmp_path, era, [everything_gateway.url])
    assert shown_requirements(tools) == {"echo": ["env:production"], "get-sum": ["env:staging"]}
    code, echoed = call(tmp_path, era, [everything_gateway.url], "echo", message="hi")
    assert code == 0
    assert echoed["content"] == [{"type": "text", "text": "Echo: hi"}]
    code, denied = call(tmp_path, era, [everything_gateway.url], "get-sum", a="1", b="2")
    assert code == DENIED
    assert denied["structuredContent"] == {"error": "unmet_requirements", "tool": "get-sum",
                                           "unmet": ["env:staging"], "withheld": 0}
    shown_envelope(denied, "unavailable")  # the gateway's own denial, with its envelope


# --- server-filesystem over the stdio listener ------------------------------------------------------
def attempt(tmp_path: Path, era: str, target: list[str], tool: str, **arguments: str) -> int:
    """A call whose result the Inspector may refuse to print (see the last test here): its exit code."""
    args = [a for key, value in arguments.items() for a in ("--tool-arg", f"{key}={value}")]
    code, _out, _errors = run_inspector(tmp_path, *args, "--protocol-era", era, "--method", "tools/call",
                                        "--tool-name", tool, *target)
    return code


@pytest.mark.timeout(300)  # work bound, not an event wait: Inspector runs, each starting the gateway
@pytest.mark.parametrize("era", list(ERAS))
def test_inspector_cannot_write_through_a_denial(tmp_path: Path, era: str) -> None:
    disk = (tmp_path / "disk").resolve()
    disk.mkdir()
    (disk / "notes.txt").write_text("first line\n", encoding="utf-8")
    target = gateway(FILESYSTEM_POLICY, *filesystem_stdio(disk), claims=OBSERVER)
    tools = listing(tmp_path, era, target)
    assert shown_requirements(tools)["write_file"] == ["auth:oauth2", "auth:scope:files:write"]
    code, read = call(tmp_path, era, target, "read_text_file", path=str(disk / "notes.txt"))
    assert code == 0
    assert read["content"] == [{"type": "text", "text": "first line\n"}]
    assert attempt(tmp_path, era, target, "write_file", path=str(disk / "notes.txt"), content="gone") != 0
    assert attempt(tmp_path, era, target, "write_file", path=str(disk / "new.txt"), content="x") != 0
    assert [p.name for p in disk.iterdir()] == ["notes.txt"]
    assert (disk / "notes.txt").read_text(encoding="utf-8") == "first line\n"


# --- mcp-server-time over the stdio listener --------------------------------------------------------
TIME_POLICY = 'environment = ["production"]\n[tools.convert_time]\nrequirements = ["env:staging"]\n'


@pytest.mark.parametrize("era", list(ERAS))
def test_inspector_with_mcp_server_time(tmp_path: Path, era: str) -> None:
    policy = tmp_path / "time.toml"
    policy.write_text(TIME_POLICY, encoding="utf-8")
    target = gateway(policy, *time_stdio())
    tools = listing(tmp_path, era, target)
    assert shown_requirements(tools) == {"convert_time": ["env:staging"]}
    code, now = call(tmp_path, era, target, "get_current_time", timezone="UTC")
    assert code == 0
    assert now["structuredContent"]["timezone"] == "UTC"


def test_inspector_shows_the_denial_of_a_tool_with_an_output_schema(tmp_path: Path) -> None:
    """convert_time declares an outputSchema. The TypeScript SDK under the Inspector (and most desktop
    clients) validates any structuredContent against it, isError or not, so a denial whose
    structuredContent is the §3 refusal reaches the user as a schema error instead of the denial."""
    policy = tmp_path / "time.toml"
    policy.write_text(TIME_POLICY, encoding="utf-8")
    code, denied = call(tmp_path, "legacy", gateway(policy, *time_stdio()), "convert_time",
                        source_timezone="UTC", time="12:00", target_timezone="Europe/Paris")
    assert code == DENIED
    assert denied["isError"] is True
    assert "unmet requirements: env:staging" in denied["content"][0]["text"]
    shown_envelope(denied, "unavailable")
