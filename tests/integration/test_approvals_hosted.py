"""A `self` approval on a hosted server (SPEC §15), each reached in memory by the MCP SDK's client,
as over stdio: tests/fixtures/listed_server.py guarded by `guard_server` (lowlevel; without the
SDK's request-state boundary the round's state goes plain, "sealed" with it), a `GuardedMCPServer`
and a `FastMCP` app (their frameworks seal the round's state): the very servers
tests/fixtures/guarded_listed.py and guarded_wipe.py run as processes. At 2025-11-25 the caller is
asked with `elicitation/create` through the call's own session; at 2026-07-28 with an input round
(`input_required`), the retry carrying the answer. Accept runs the call exactly once (the server's
own `ran` list), with none of the round's fields; decline or cancel never (`unavailable`); a client
without elicitation gets `undisclosed`; a retry carrying a forged state, or another call's, grants
nothing. (The hosted servers' stdio wire is test_mcp_stdio's interop row; the same server behind a
real gateway process, test_envelope_table's.)
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client
from mcp.client.session import ElicitationFnT
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError

from mcp_preconditions.guard import Guard
from mcp_preconditions.integrations._server import Preconditions
from mcp_preconditions.integrations.mcp_sdk import GuardedMCPServer, PreconditionsExtension
from mcp_preconditions.late import INPUT_KEY, STATE_PREFIX
from mcp_preconditions.policy.load import load_policy, parse_policy
from mcp_preconditions.principal import Credentials, Principal
from tests.fixtures.approvals import envelope
from tests.fixtures.guarded_listed import guarded
from tests.fixtures.guarded_wipe import wiper
from tests.fixtures.inprocess import LogLines
from tests.fixtures.mcp_servers import MODES

pytestmark = pytest.mark.integration
POLICY = '[approvals.confirm]\napprovers = "self"\n[tools.wipe]\nrequirements = ["approval:confirm"]\n'
DECISIONS = "mcp_preconditions.decisions: "
FLAVOURS = ("lowlevel", "mcpserver", "fastmcp")
ACCEPT = mcp_types.ElicitResult(action="accept", content={})
CALLER = Credentials(principal=Principal.from_claims({"iss": "https://idp", "sub": "alice"}))


@dataclass
class Hosted:
    """One hosted server and what it left: the calls that ran, its decision records."""

    tmp_path: Path
    flavour: str
    log: LogLines
    asked: list[mcp_types.ElicitRequestParams] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)

    def server(self) -> Any:
        """A new instance of the flavour's server (a process per client, as before)."""
        policy = self.tmp_path / "policy.toml"
        policy.write_text(POLICY, encoding="utf-8")
        if self.flavour in ("mcpserver", "fastmcp"):
            def ran(clean: bool) -> None:
                self.ran.append("wipe" if clean else "wipe+round")
            server = wiper(Guard(load_policy(policy)), CALLER, ran,
                           fastmcp=self.flavour == "fastmcp")
            return server if isinstance(server, MCPServer) else server._mcp_server
        tools = [{"name": "wipe", "inputSchema": {"type": "object"}}]
        return guarded(policy, tools, self.ran.append, sealed=self.flavour == "sealed",
                       caller=CALLER)[0]

    @asynccontextmanager
    async def client(self, version: str, answer: str | ElicitationFnT | None
                     ) -> AsyncIterator[Client]:
        """A client at `version` that answers every question `answer` (None: it declares no
        elicitation; a callable: it answers)."""
        async def elicit(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
            self.asked.append(params)
            assert isinstance(answer, str)
            return mcp_types.ElicitResult(action=answer, content={} if answer == "accept" else None)

        callback: ElicitationFnT | None = (answer if callable(answer) else
                                           elicit if answer else None)
        async with Client(self.server(), mode=MODES[version],
                          elicitation_callback=callback) as client:
            yield client

    def runs(self) -> list[str]:
        return list(self.ran)

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line.split(DECISIONS, 1)[1]) for line in self.log.lines
                if line.startswith(DECISIONS)]

    def approvals(self) -> list[str]:
        return [r["approval"]["result"] for r in self.records() if r["tool"] == "wipe"]


@pytest.fixture
def decisions() -> Iterator[LogLines]:
    """The hosted server's decision records (`log_decisions()` shows them on a process's stderr)."""
    log, logger = LogLines(), logging.getLogger("mcp_preconditions.decisions")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(log)
    try:
        yield log
    finally:
        logger.removeHandler(log)
        logger.setLevel(level)


@pytest.fixture
def hosting(tmp_path: Path, decisions: LogLines) -> Any:
    return lambda flavour: Hosted(tmp_path, flavour, decisions)


async def test_at_2025_11_25_accepted_the_call_runs_exactly_once(hosting: Any) -> None:
    hosted = hosting("lowlevel")
    async with hosted.client("2025-11-25", "accept") as client:
        result = await client.call_tool("wipe", {"path": "/"})
    assert result.is_error is False and hosted.runs() == ["wipe"] and len(hosted.asked) == 1
    assert [r["allowed"] for r in hosted.records() if r["tool"] == "wipe"] == [False, True]


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_at_2026_07_28_the_question_is_an_input_round(hosting: Any, flavour: str) -> None:
    hosted = hosting(flavour)
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
async def test_a_declined_call_never_runs_and_is_unavailable(hosting: Any, action: str,
                                                             version: str, flavour: str) -> None:
    hosted = hosting(flavour)
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
async def test_a_client_without_elicitation_is_undisclosed(hosting: Any, version: str,
                                                           flavour: str) -> None:
    hosted = hosting(flavour)
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


async def test_a_plain_state_grants_nothing_but_for_its_own_call(hosting: Any) -> None:
    """guard_server without a request-state boundary: the state is the request's ID in plain,
    and an accept carried with another call's, a forged or a garbage state is asked again."""
    hosted = hosting("lowlevel")
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
async def test_a_sealed_state_of_another_call_or_forged_is_refused(hosting: Any,
                                                                   flavour: str) -> None:
    """A GuardedMCPServer, a FastMCP app, or guard_server under the SDK's boundary: it seals the
    round's state to the call (tool, arguments): another call's state, or a forged one, is refused before the
    guard, and nothing runs until the right call carries its own."""
    hosted = hosting(flavour)
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
        hosting: Any, flavour: str) -> None:
    """Issue 39.1: the first question accepted, the second declined: one run (it was two)."""
    hosted = hosting(flavour)
    both = anyio.Event()

    async def answer(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        hosted.asked.append(params)
        mine = len(hosted.asked)
        if mine == 2:
            both.set()
        await both.wait()
        return ACCEPT if mine == 1 else mcp_types.ElicitResult(action="decline")

    async with hosted.client("2025-11-25", answer) as client:
        results = await asyncio.gather(*(client.call_tool("wipe", {"path": "/"}) for _ in range(2)))
    assert len(hosted.asked) == 2 and sorted(r.is_error for r in results) == [False, True]
    assert hosted.runs() == ["wipe"]


@pytest.mark.parametrize("flavour", ["lowlevel", "mcpserver", "fastmcp"])
async def test_at_2026_07_28_concurrent_retries_of_one_round_run_it_once(
        hosting: Any, flavour: str) -> None:
    """Eight retries accepting one round at once: one run; a declined round runs nothing
    whatever retries follow; two identical calls get two rounds."""
    hosted = hosting(flavour)
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
