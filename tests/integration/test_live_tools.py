"""`live_tools.list_tools` and `mcp-preconditions tools` (issue 22, item 14) against live servers:
npm server-filesystem over stdio, SDK servers over streamable HTTP (the logging upstream, and one
that paginates). What they print is what the server sent (every page), and `lint`, `check` and
`policy test` run on it; with `--policy`, requirements as the gateway lists them (confidential ones
left out).

The SDK servers run on sockets of the test's own event loop, and the command's bad input is run
in-process (`cli.main`): the default tier. What a real server process does stays interop, marked
test by test: server-filesystem read by `list_tools` and by the command (its listing, what lint,
check and policy test make of it), and a stdio server that exits at once (its stderr quoted) or
never answers.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel.server import Server

from mcp_preconditions.cli import main
from mcp_preconditions.errors import InputError
from mcp_preconditions.gateway.upstream.session import HttpTarget, StdioTarget
from mcp_preconditions.live_tools import MAX_PAGES, list_tools
from mcp_preconditions.wire import META_KEY
from tests.fixtures.gateway_upstream import LoggingUpstream
from tests.fixtures.inprocess import asgi_served
from tests.fixtures.mcp_servers import CLI, ROOT, raw_tools, run_asgi, server_env
from tests.fixtures.memory_upstream import logging_env
from tests.fixtures.upstreams import filesystem_stdio

IN_PROCESS = pytest.mark.asyncio(loop_scope="module")  # one event loop for the module's servers

FILESYSTEM_POLICY = ROOT / "policies" / "filesystem.toml"
OBSERVER = ROOT / "examples" / "claims" / "observer.json"
WRITERS = ("write_file", "edit_file", "create_directory", "move_file")


@pytest.fixture
def disk(tmp_path: Path) -> Path:
    root = tmp_path / "disk"
    root.mkdir()
    return root.resolve()


def stdio_target(command: list[str]) -> StdioTarget:
    return StdioTarget(command[0], tuple(command[1:]), server_env())


async def direct(command: list[str]) -> list[dict[str, Any]]:
    """The same server's tools/list read with the SDK's client directly."""
    params = StdioServerParameters(command=command[0], args=command[1:], env=server_env(), cwd=ROOT)
    async with Client(params) as client:
        return await raw_tools(client.session)


@pytest.mark.interop
@pytest.mark.integration
@pytest.mark.asyncio
async def test_list_tools_reads_server_filesystem_as_it_sent_them(disk: Path) -> None:
    listed = await list_tools(stdio_target(filesystem_stdio(disk)))
    assert listed == await direct(filesystem_stdio(disk))
    names = [t["name"] for t in listed]
    assert set(WRITERS) | {"read_text_file", "list_directory"} <= set(names)
    assert all(isinstance(t["inputSchema"], dict) for t in listed)


@IN_PROCESS
async def test_list_tools_over_http(tmp_path: Path) -> None:
    app = LoggingUpstream(logging_env(tmp_path / "log.jsonl")).build().streamable_http_app(
        host="127.0.0.1")
    async with asgi_served(app) as base:
        listed = await list_tools(HttpTarget(f"{base}/mcp"))
        async with Client(streamable_http_client(f"{base}/mcp"), mode="legacy") as client:
            assert listed == await raw_tools(client.session)
    assert {"echo", "secret", "mirror"} <= {t["name"] for t in listed}
    assert {t["name"]: t for t in listed}["secret"]["execution"]["requirements"] == [
        "auth:claim:role:admin"]  # as the server sent it


def paging_server(pages: int) -> Server[Any]:
    """A lowlevel SDK server listing one tool per page, `pages` pages, cursors "1", "2", ..."""

    async def list_tools_page(ctx: Any, params: mcp_types.PaginatedRequestParams | None) -> Any:
        page = int(params.cursor) if params is not None and params.cursor else 0
        tool = mcp_types.Tool(name=f"tool_{page}", input_schema={"type": "object"},
                              execution={"requirements": [f"env:page{page}"]})
        return mcp_types.ListToolsResult(tools=[tool],
                                         next_cursor=str(page + 1) if page + 1 < pages else None)

    return Server("pages", on_list_tools=list_tools_page)


@IN_PROCESS
async def test_every_page_is_read_and_a_cursor_that_never_ends_is_refused() -> None:
    async with run_asgi(paging_server(5).streamable_http_app(host="127.0.0.1")) as base:
        listed = await list_tools(HttpTarget(f"{base}/mcp"))
    assert [t["name"] for t in listed] == [f"tool_{i}" for i in range(5)]
    assert MAX_PAGES == 1000  # the bound `tools` reads with; one page is one round trip here
    async with run_asgi(paging_server(10_000).streamable_http_app(host="127.0.0.1")) as base:
        with pytest.raises(InputError) as caught:
            await list_tools(HttpTarget(f"{base}/mcp"), max_pages=20)
    assert str(caught.value) == f"{base}/mcp: tools/list has more than 20 pages"


@IN_PROCESS
async def test_a_server_that_cannot_be_reached_is_one_input_error() -> None:
    with pytest.raises(InputError) as unreachable:
        await list_tools(HttpTarget("http://127.0.0.1:1/mcp"))
    assert str(unreachable.value) == ("http://127.0.0.1:1/mcp: cannot list its tools: ConnectError: "
                                      "All connection attempts failed")


@pytest.mark.interop
@pytest.mark.integration
@pytest.mark.asyncio
async def test_a_server_that_cannot_be_started_or_is_silent_is_one_input_error(disk: Path) -> None:
    """Interop: a real child that exits at once (its stderr quoted) or never answers."""
    command = filesystem_stdio(disk / "missing")
    with pytest.raises(InputError) as exited:
        await list_tools(stdio_target(command))
    assert str(exited.value) == (f"{' '.join(command)}: cannot list its tools: MCPError: Connection "
                                 f"closed (its stderr: Error: None of the specified directories are "
                                 f"accessible)")
    with pytest.raises(InputError) as silent:
        await list_tools(StdioTarget("sleep", ("30",), server_env()), timeout=1)
    assert str(silent.value) == "sleep 30: no tools/list answer within 1 s"


# --- the command --------------------------------------------------------------------------------------
def cli(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    # work bound, not an event wait: the command is a fresh interpreter that starts a Node server
    # (npx) and reads its listing, or lints and tests a policy against one
    return subprocess.run([*CLI, *argv], cwd=cwd, env=server_env(), capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.mark.interop
@pytest.mark.integration
def test_tools_then_lint_check_and_policy_test_on_server_filesystem(disk: Path, tmp_path: Path) -> None:
    listed = cli("tools", "--", *filesystem_stdio(disk))
    assert (listed.returncode, listed.stderr) == (0, "")
    tools_file = tmp_path / "fs-tools.json"
    tools_file.write_text(listed.stdout, encoding="utf-8")
    tools = json.loads(listed.stdout)["tools"]
    assert set(WRITERS) <= {t["name"] for t in tools}
    assert all("requirements" not in (t.get("execution") or {}) for t in tools)  # it declares none

    lint = cli("lint", "--tools", str(tools_file), "--policy", str(FILESYSTEM_POLICY))
    assert (lint.returncode, lint.stderr) == (0, "")
    assert lint.stdout.splitlines()[-1] == f"0 error(s), 0 warning(s) in {len(tools)} tool(s)"

    check = cli("check", "--tools", str(tools_file), "--policy", str(FILESYSTEM_POLICY),
                "--claims", str(OBSERVER), "--format", "json")
    assert check.returncode == 0, check.stderr
    decided = {t["name"]: t for t in json.loads(check.stdout)["tools"]}
    assert [n for n, t in decided.items() if not t["allowed"]] == [
        t["name"] for t in tools if t["name"] in WRITERS]
    assert decided["write_file"]["unmet"] == ["auth:scope:files:write"]
    assert decided["read_text_file"]["allowed"] is True

    cases = tmp_path / "fs.tests.toml"
    cases.write_text(f'policy = "{FILESYSTEM_POLICY}"\ntools = "{tools_file}"\n\n[[cases]]\n'
                     'name = "an observer reads but never writes"\n'
                     'claims = { sub = "bob", scope = "mission:read" }\n'
                     'expect.read_text_file = { allowed = true }\n'
                     'expect.write_file = { allowed = false, unmet = ["auth:scope:files:write"] }\n',
                     encoding="utf-8")
    tested = cli("policy", "test", str(cases))
    assert tested.returncode == 0, tested.stdout + tested.stderr


@pytest.mark.interop
@pytest.mark.integration
def test_tools_with_a_policy_lists_requirements_as_the_gateway(disk: Path, tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"  # filesystem.toml, plus a confidential requirement on each
    policy.write_text('confidential = ["env:vault"]\n' + FILESYSTEM_POLICY.read_text("utf-8").replace(
        '"auth:scope:files:write"]', '"auth:scope:files:write", "env:vault"]'), encoding="utf-8")
    listed = cli("tools", "--policy", str(policy), "--", *filesystem_stdio(disk))
    assert (listed.returncode, listed.stderr) == (0, "")
    tools = {t["name"]: t for t in json.loads(listed.stdout)["tools"]}
    want = ["auth:oauth2", "auth:scope:files:write"]  # env:vault is enforced, never listed
    for name in WRITERS:
        assert tools[name]["execution"]["requirements"] == want, name
        assert tools[name]["_meta"][META_KEY] == want
    assert "env:vault" not in listed.stdout
    assert "requirements" not in (tools["read_text_file"].get("execution") or {})


@pytest.mark.parametrize(("argv", "message"), [
    ([], "no upstream: give --upstream-url URL or a command after --"),
    (["--upstream-url", "http://127.0.0.1:1/mcp", "--", "true"],
     "two upstreams: give --upstream-url URL or a command after --, not both"),
    (["--", "no-such-command-x"], "cannot start the upstream: command not found: no-such-command-x"),
    (["--upstream-url", "ftp://x/mcp"], "--upstream-url: not an http(s) URL: 'ftp://x/mcp'"),
    (["--upstream-url", "http://127.0.0.1:1/mcp"],
     "http://127.0.0.1:1/mcp: cannot list its tools: ConnectError: All connection attempts failed"),
    (["--timeout", "0", "--", "true"], "argument --timeout: expected a number of seconds above 0, got '0'"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], message: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["tools", *argv])  # in-process: none of these starts a server
    out, err = capsys.readouterr()
    prefix = "mcp-preconditions tools: error: " if "--timeout" in message else "mcp-preconditions: error: "
    assert (code, out, err) == (2, "", f"{prefix}{message}\n")
