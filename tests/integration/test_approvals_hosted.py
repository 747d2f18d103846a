"""A `self` approval on a hosted server (SPEC §15), each in its own process over stdio, reached by
the MCP SDK's client: tests/fixtures/listed_server.py guarded by `guard_server` (lowlevel; without
the SDK's request-state boundary the round's state goes plain, "sealed" with it), a
`GuardedMCPServer` and a `FastMCP` app (their frameworks seal the round's state). At 2025-11-25
the caller is asked with `elicitation/create` through the call's own session; at 2026-07-28 with
an input round (`input_required`), the retry carrying the answer. Accept runs the call exactly once
(RAN.log, the server's own), with none of the round's fields; decline or cancel never
(`unavailable`); a client without elicitation gets `undisclosed`; a retry carrying a forged state,
or another call's, grants nothing.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client
from mcp.client.session import ElicitationFnT
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError

from mcp_preconditions.approvals.question import INPUT_KEY, STATE_PREFIX
from mcp_preconditions.guard import Guard
from mcp_preconditions.integrations._server import Preconditions
from mcp_preconditions.integrations.mcp_sdk import GuardedMCPServer, PreconditionsExtension
from mcp_preconditions.policy.load import parse_policy
from tests.fixtures.approvals import envelope
from tests.fixtures.mcp_servers import MODES, ROOT, server_env

pytestmark = pytest.mark.integration
POLICY = '[approvals.confirm]\napprovers = "self"\n[tools.wipe]\nrequirements = ["approval:confirm"]\n'
DECISIONS = "mcp_preconditions.decisions: "
FLAVOURS = ("lowlevel", "mcpserver", "fastmcp")
ACCEPT = mcp_types.ElicitResult(action="accept", content={})


@dataclass
class Hosted:
    """One hosted server process and what it left: the calls that ran, its decision records."""

    tmp_path: Path
    flavour: str
    asked: list[mcp_types.ElicitRequestParams] = field(default_factory=list)

    def argv(self) -> list[str]:
        policy, ran = self.tmp_path / "policy.toml", self.tmp_path / "ran.log"
        policy.write_text(POLICY, encoding="utf-8")
        claims = self.tmp_path / "claims.json"
        claims.write_text('{"iss": "https://idp", "sub": "alice"}', encoding="utf-8")
        if self.flavour in ("mcpserver", "fastmcp"):
            return ["-m", "tests.fixtures.guarded_wipe", str(policy), str(ran), "--claims", str(claims),
                    *(["--fastmcp"] if self.flavour == "fastmcp" else [])]
        tools = self.tmp_path / "tools.json"
        tools.write_text(json.dumps([{"name": "wipe", "inputSchema": {"type": "object"}}]),
                         encoding="utf-8")
        return ["-m", "tests.fixtures.guarded_listed", str(policy), str(tools), str(ran),
                "--claims", str(claims), *(["--sealed"] if self.flavour == "sealed" else [])]

    @asynccontextmanager
    async def client(self, version: str, answer: str | None) -> AsyncIterator[Client]:
        """A client at `version` that answers every question `answer` (None: it declares no
        elicitation)."""
        async def elicit(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
            self.asked.append(params)
            return mcp_types.ElicitResult(action=answer, content={} if answer == "accept" else None)

        callback: ElicitationFnT | None = elicit if answer else None

        params = StdioServerParameters(command=sys.executable, args=self.argv(), env=server_env(),
                                       cwd=ROOT)
        with (self.tmp_path / "stderr.log").open("a", encoding="utf-8") as errlog:
            async with Client(stdio_client(params, errlog=errlog), mode=MODES[version],
                              elicitation_callback=callback) as client:
                yield client

    def runs(self) -> list[str]:
        ran = self.tmp_path / "ran.log"
        return ran.read_text(encoding="utf-8").split() if ran.exists() else []

    def records(self) -> list[dict[str, Any]]:
        lines = (self.tmp_path / "stderr.log").read_text(encoding="utf-8").splitlines()
        return [json.loads(line.split(DECISIONS, 1)[1]) for line in lines if DECISIONS in line]

    def approvals(self) -> list[str]:
        return [r["approval"]["result"] for r in self.records() if r["tool"] == "wipe"]


async def test_at_2025_11_25_accepted_the_call_runs_exactly_once(tmp_path: Path) -> None:
    hosted = Hosted(tmp_path, "lowlevel")
    async with hosted.client("2025-11-25", "accept") as client:
        result = await client.call_tool("wipe", {"path": "/"})
    assert result.is_error is False and hosted.runs() == ["wipe"] and len(hosted.asked) == 1
    assert [r["allowed"] for r in hosted.records() if r["tool"] == "wipe"] == [False, True]


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_at_2026_07_28_the_question_is_an_input_round(tmp_path: Path, flavour: str) -> None:
    hosted = Hosted(tmp_path, flavour)
    async with hosted.client("2026-07-28", "accept") as client:
        result = await client.call_tool("wipe", {"path": "/srv"})
        assert result.is_error is False and hosted.runs() == ["wipe"]  # once, no round's field
        (question,) = hosted.asked
        assert isinstance(question, mcp_types.ElicitRequestFormParams)
        assert "Approve one call of tool 'wipe' (approval 'confirm')" in question.message
        assert '"path": "/srv"' in question.message
        second = await client.call_tool("wipe", {"path": "/srv"})  # a new call: asked again
    assert second.is_error is False and hosted.runs() == ["wipe", "wipe"] and len(hosted.asked) == 2
    assert hosted.approvals() == ["requested", "requested", "used"] * 2
    wipes = [r for r in hosted.records() if r["tool"] == "wipe"]
    assert [r["allowed"] for r in wipes] == [False, False, True] * 2
    assert wipes[0]["approval"]["id"] == wipes[2]["approval"]["id"] != wipes[3]["approval"]["id"]


@pytest.mark.parametrize(("action", "version", "flavour"), [
    ("decline", "2025-11-25", "lowlevel"), ("decline", "2026-07-28", "lowlevel"),
    ("cancel", "2026-07-28", "lowlevel"), ("decline", "2026-07-28", "mcpserver"),
    ("cancel", "2026-07-28", "fastmcp")])
async def test_a_declined_call_never_runs_and_is_unavailable(tmp_path: Path, action: str,
                                                             version: str, flavour: str) -> None:
    hosted = Hosted(tmp_path, flavour)
    async with hosted.client(version, action) as client:
        result = await client.call_tool("wipe", {"path": "/"})
    assert result.is_error is True and envelope(result) == ("unavailable", [])
    assert hosted.runs() == [] and len(hosted.asked) == 1
    assert hosted.approvals() == (["requested", "refused"] if version == "2025-11-25" else
                                  ["requested", "requested", "refused"])


@pytest.mark.parametrize(("version", "flavour"), [("2025-11-25", "lowlevel"),
                                                  ("2026-07-28", "lowlevel"),
                                                  ("2026-07-28", "mcpserver"),
                                                  ("2026-07-28", "fastmcp")])
async def test_a_client_without_elicitation_is_undisclosed(tmp_path: Path, version: str,
                                                           flavour: str) -> None:
    hosted = Hosted(tmp_path, flavour)
    async with hosted.client(version, None) as client:
        result = await client.call_tool("wipe", {"path": "/"})
    assert result.is_error is True and envelope(result) == ("undisclosed", [])
    assert hosted.runs() == []
    (record,) = [r for r in hosted.records() if r["tool"] == "wipe"]
    assert record["allowed"] is False and "approval" not in record  # nobody was asked


async def _round(client: Client, arguments: dict[str, Any]) -> mcp_types.InputRequiredResult:
    """The input round a first call of `wipe` gets."""
    first = await client.session.call_tool("wipe", arguments, allow_input_required=True)
    assert isinstance(first, mcp_types.InputRequiredResult) and first.input_requests is not None
    assert list(first.input_requests) == [INPUT_KEY] and first.request_state is not None
    return first


async def test_a_plain_state_grants_nothing_but_for_its_own_call(tmp_path: Path) -> None:
    """guard_server without a request-state boundary: the state is the request's ID in plain,
    and an accept carried with another call's, a forged or a garbage state is asked again."""
    hosted = Hosted(tmp_path, "lowlevel")
    async with hosted.client("2026-07-28", "accept") as client:
        state = (await _round(client, {"path": "/a"})).request_state
        assert state is not None and state.startswith(STATE_PREFIX)
        for forged in (state, STATE_PREFIX + "not-a-request", "garbage"):
            retry = await client.session.call_tool("wipe", {"path": "/b"}, request_state=forged,
                                                   input_responses={INPUT_KEY: ACCEPT},
                                                   allow_input_required=True)
            assert isinstance(retry, mcp_types.InputRequiredResult)  # asked again, for /b
            assert retry.request_state not in (None, state)
        assert hosted.runs() == []
        done = await client.session.call_tool("wipe", {"path": "/a"}, request_state=state,
                                              input_responses={INPUT_KEY: ACCEPT},
                                              allow_input_required=True)
        assert isinstance(done, mcp_types.CallToolResult) and done.is_error is False
        again = await client.session.call_tool("wipe", {"path": "/a"}, request_state=state,
                                               input_responses={INPUT_KEY: ACCEPT},
                                               allow_input_required=True)
        assert isinstance(again, mcp_types.InputRequiredResult)  # used: a replay is a new call
    assert hosted.runs() == ["wipe"]


@pytest.mark.parametrize("flavour", ["mcpserver", "fastmcp", "sealed"])
async def test_a_sealed_state_of_another_call_or_forged_is_refused(tmp_path: Path,
                                                                   flavour: str) -> None:
    """A GuardedMCPServer, a FastMCP app, or guard_server under the SDK's boundary: it seals the
    round's state to the call (tool, arguments): another call's state, or a forged one, is refused before the
    guard, and nothing runs until the right call carries its own."""
    hosted = Hosted(tmp_path, flavour)
    async with hosted.client("2026-07-28", "accept") as client:
        state = (await _round(client, {"path": "/a"})).request_state
        assert state is not None and STATE_PREFIX not in state  # sealed
        for forged in (state, STATE_PREFIX + "not-a-request", state[:-4] + "AAAA"):
            with pytest.raises(MCPError) as refused:
                await client.session.call_tool("wipe", {"path": "/b"} if forged == state else
                                               {"path": "/a"}, request_state=forged,
                                               input_responses={INPUT_KEY: ACCEPT},
                                               allow_input_required=True)
            assert refused.value.error.message == "Invalid or expired requestState"
        assert hosted.runs() == []
        done = await client.session.call_tool("wipe", {"path": "/a"}, request_state=state,
                                              input_responses={INPUT_KEY: ACCEPT},
                                              allow_input_required=True)
        assert isinstance(done, mcp_types.CallToolResult) and done.is_error is False
    assert hosted.runs() == ["wipe"]


@pytest.mark.parametrize("subclass", [False, True])
async def test_the_interceptor_path_asks_with_an_input_round_too(subclass: bool) -> None:
    """A plain `MCPServer` guarded by `PreconditionsExtension`, or a `GuardedMCPServer` subclass
    with its own call handler (the interceptor guards it), in process at 2026-07-28: accept runs
    the tool once, with none of the round's fields (the interceptor cannot hand the handler other
    params: it clears them on the very ones it gets)."""
    ran: list[bool] = []
    guard = Guard(parse_policy(POLICY.encode(), "policy.toml"))

    def wipe(path: str, ctx: Context) -> str:
        ran.append(ctx.request_state is None and ctx.input_responses is None)
        return f"wiped {path}"

    class Custom(GuardedMCPServer):
        async def _handle_call_tool(self, ctx: Any, params: mcp_types.CallToolRequestParams
                                    ) -> Any:
            return await MCPServer._handle_call_tool(self, ctx, params)  # skips ours

    if subclass:
        server: MCPServer[Any] = Custom("s", guard=guard)
    else:
        pre = Preconditions(guard)
        server = MCPServer("s", extensions=[PreconditionsExtension(pre)], middleware=[pre])
    server.add_tool(wipe, structured_output=False)
    asked: list[mcp_types.ElicitRequestParams] = []

    async def accept(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        asked.append(params)
        return ACCEPT

    async with Client(server, mode=MODES["2026-07-28"], elicitation_callback=accept) as client:
        result = await client.call_tool("wipe", {"path": "/srv"})
    assert result.is_error is False and ran == [True] and len(asked) == 1


@pytest.mark.parametrize("flavour", ["lowlevel", "mcpserver"])
async def test_at_2025_11_25_two_identical_calls_each_answer_their_own_question(
        tmp_path: Path, flavour: str) -> None:
    """Issue 39.1: the first question accepted, the second declined: one run (it was two)."""
    hosted = Hosted(tmp_path, flavour)
    both = anyio.Event()

    async def answer(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        hosted.asked.append(params)
        mine = len(hosted.asked)
        if mine == 2:
            both.set()
        await both.wait()
        return ACCEPT if mine == 1 else mcp_types.ElicitResult(action="decline")

    params = StdioServerParameters(command=sys.executable, args=hosted.argv(), env=server_env(),
                                   cwd=ROOT)
    with (tmp_path / "stderr.log").open("a", encoding="utf-8") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode=MODES["2025-11-25"],
                          elicitation_callback=answer) as client:
            results = await asyncio.gather(*(client.call_tool("wipe", {"path": "/"})
                                             for _ in range(2)))
    assert len(hosted.asked) == 2 and sorted(r.is_error for r in results) == [False, True]
    assert hosted.runs() == ["wipe"]


@pytest.mark.parametrize("flavour", ["lowlevel", "mcpserver", "fastmcp"])
async def test_at_2026_07_28_concurrent_retries_of_one_round_run_it_once(
        tmp_path: Path, flavour: str) -> None:
    """Eight retries accepting one round at once: one run; a declined round runs nothing
    whatever retries follow; two identical calls get two rounds."""
    hosted = Hosted(tmp_path, flavour)
    decline = mcp_types.ElicitResult(action="decline")
    async with hosted.client("2026-07-28", "accept") as client:
        async def retry(state: str, answer: mcp_types.ElicitResult) -> Any:
            return await client.session.call_tool("wipe", {"path": "/"}, request_state=state,
                                                  input_responses={INPUT_KEY: answer},
                                                  allow_input_required=True)
        state = (await _round(client, {"path": "/"})).request_state
        assert state is not None
        done = await asyncio.gather(*(retry(state, ACCEPT) for _ in range(8)))
        assert hosted.runs() == ["wipe"]
        assert sum(isinstance(r, mcp_types.CallToolResult) and not r.is_error for r in done) == 1
        no = (await _round(client, {"path": "/"})).request_state
        yes = (await _round(client, {"path": "/"})).request_state
        assert no is not None and yes is not None and no != yes
        refused = await retry(no, decline)
        assert isinstance(refused, mcp_types.CallToolResult) and refused.is_error
        await asyncio.gather(*(retry(no, ACCEPT) for _ in range(4)),
                             *(retry(yes, ACCEPT) for _ in range(4)))
    assert hosted.runs() == ["wipe", "wipe"]
