"""One call path (issue 42): every adapter takes a tool call through calls.py (refuse, decide, ask
the person, deny or run, finish), so each rule the paths used to disagree on is decided once and
held here by one test whose rows are the adapters: a `GuardedMCPServer`, a lowlevel `Server` under
`guard_server` and a `FastMCP` app under `guard_fastmcp`, each reached in-process by the MCP SDK's
client, and the gateway, in-process too (tests/fixtures/inprocess.py), with the same lowlevel
server behind it in memory.

The rules, each decided once:
- questions put to a caller in one call: one per `self` approval at most (`Snapshot.asking`); a
  question made anew for the call (a reload changed its revision) is not asked again;
- the denial of a tool with an `outputSchema`: its payload under `_meta`, no structuredContent,
  through the adapter's one look-up;
- what a caller is told of a policy unusable for the server: `toolset.unusable(who)`, one sentence
  naming whose policy;
- what the operator is told of a near miss: the log line of `names.unusable_line`, each near miss
  by `names.near_miss_message`;
- a call answered with an input round is not counted as a decision: its retry is, once.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from fastmcp import FastMCP
from mcp import Client
from mcp.server.lowlevel.server import Server

from mcp_preconditions.client import DENIAL_META_KEY
from mcp_preconditions.guard import Guard
from mcp_preconditions.integrations.fastmcp import guard_fastmcp
from mcp_preconditions.integrations.mcp_sdk import GuardedMCPServer, guard_server
from mcp_preconditions.late import LateCall
from mcp_preconditions.names import near_miss_message, unusable_line
from mcp_preconditions.outcomes import Outcome, Status
from mcp_preconditions.policy.load import load_policy, parse_policy
from mcp_preconditions.principal import Credentials, Principal
from mcp_preconditions.resolvers import Resolver
from mcp_preconditions.telemetry import Metrics
from mcp_preconditions.toolset import unusable
from tests.fixtures.inprocess import cli_gateway
from tests.fixtures.listed_server import build
from tests.fixtures.mcp_servers import MODES
from tests.fixtures.memory_upstream import MemoryServers

pytestmark = pytest.mark.integration

ADAPTERS = ("mcpserver", "lowlevel", "fastmcp", "gateway")
CLAIMS = {"iss": "https://idp.example", "sub": "alice"}
ALICE = Credentials(principal=Principal.from_claims(CLAIMS))
ACCEPT = mcp_types.ElicitResult(action="accept", content={})
REPORT_SCHEMA = {"type": "object", "properties": {"result": {"type": "string"}}}
TOOLS = [{"name": "wipe", "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}}},
         {"name": "report", "inputSchema": {"type": "object"}, "outputSchema": REPORT_SCHEMA}]
SELF = b'[approvals.confirm]\napprovers = "self"\n[tools.wipe]\nrequirements = ["approval:confirm"]\n'
Elicit = Callable[[Any, mcp_types.ElicitRequestParams], Awaitable[mcp_types.ElicitResult]]


@dataclass
class Served:
    """One adapter serving the two tools: its guard, a client maker, what ran, what it logged."""

    name: str
    guard: Guard
    connect: Callable[..., AbstractAsyncContextManager[Client]]
    ran: list[str] = field(default_factory=list)
    metrics: Callable[[], Metrics | None] = lambda: None
    log: Callable[[], str] = lambda: ""
    who: str = "server"

    def client(self, version: str = "2025-11-25", elicit: Elicit | None = None
               ) -> AbstractAsyncContextManager[Client]:
        options: dict[str, Any] = {"elicitation_callback": elicit} if elicit is not None else {}
        return self.connect(mode=MODES[version], **options)


def _in_process(target: Any) -> Callable[..., AbstractAsyncContextManager[Client]]:
    return lambda **options: Client(target, **options)


def _mcpserver(guard: Guard) -> Served:
    server = GuardedMCPServer("one", guard=guard, credentials=lambda _request: ALICE, metrics=True)
    served = Served("mcpserver", guard, _in_process(server), metrics=lambda: server.metrics)

    @server.tool(structured_output=False)
    def wipe(path: str) -> str:
        served.ran.append("wipe")
        return f"wiped {path}"

    @server.tool(structured_output=True)
    def report() -> dict[str, str]:
        served.ran.append("report")
        return {"result": "ok"}

    return served


def _lowlevel(guard: Guard) -> Served:
    ran: list[str] = []
    server: Server[Any] = build(TOOLS, ran.append)
    pre = guard_server(server, guard, credentials=lambda _request: ALICE, metrics=True)
    return Served("lowlevel", guard, _in_process(server), ran, lambda: pre.metrics)


def _fastmcp(guard: Guard) -> Served:
    app: FastMCP[Any] = FastMCP("one")
    pre = guard_fastmcp(app, guard, credentials=lambda _request: ALICE, metrics=True)
    served = Served("fastmcp", guard, _in_process(app._mcp_server), metrics=lambda: pre.metrics)

    @app.tool(output_schema=None)
    def wipe(path: str) -> str:
        served.ran.append("wipe")
        return f"wiped {path}"

    @app.tool(output_schema=REPORT_SCHEMA)
    def report() -> dict[str, str]:
        served.ran.append("report")
        return {"result": "ok"}

    return served


@asynccontextmanager
async def serving(adapter: str, tmp_path: Path, policy: bytes, caplog: pytest.LogCaptureFixture,
                  resolvers: Sequence[Resolver] = ()) -> AsyncIterator[Served]:
    """`adapter` serving TOOLS under `policy` (a file, as the gateway reads it) to ALICE, with
    `resolvers` beside the built-in ones (a hosted adapter's guard only)."""
    path = tmp_path / "policy.toml"
    path.write_bytes(policy)
    caplog.set_level("INFO", logger="mcp_preconditions")
    if adapter != "gateway":
        served = {"mcpserver": _mcpserver, "lowlevel": _lowlevel, "fastmcp": _fastmcp}[adapter](
            Guard(load_policy(path), resolvers=resolvers, entry_points=False))
        served.log = lambda: "\n".join(r.getMessage() for r in caplog.records)
        yield served
        return
    claims = tmp_path / "claims.json"
    claims.write_text(json.dumps(CLAIMS), encoding="utf-8")
    servers = MemoryServers()
    ran: list[str] = []
    with servers.installed():
        command = servers.add("listed", lambda env, die: build(TOOLS, ran.append))
        async with cli_gateway(["--policy", str(path), "--claims", str(claims), "--", *command]) as gw:
            await gw.until_ready()
            yield Served("gateway", gw.gateway.guard, lambda **options: gw.client(**options), ran,
                         lambda: gw.gateway.telemetry.metrics, gw.output, "gateway")


def _counted(metrics: Metrics | None, tool: str, result: str) -> float:
    assert metrics is not None
    found = 0.0
    for family in metrics.registry.collect():
        for sample in family.samples:
            if sample.name == "mcp_preconditions_decisions_total" and \
                    sample.labels.get("tool") == tool and sample.labels.get("result") == result:
                found += sample.value
    return found


# -- the rules ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_a_caller_is_asked_one_question_per_self_approval_at_most(
        adapter: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The caller accepts, but a reload meanwhile makes the call's question anew (a new revision
    is bound): it is not asked a second time, and the call does not run."""
    async with serving(adapter, tmp_path, SELF, caplog) as served:
        asked: list[str] = []

        async def elicit(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
            asked.append(params.message)
            served.guard.reload(parse_policy(SELF + f"# reloaded {len(asked)}\n".encode(),
                                             str(tmp_path / "policy.toml")))
            return ACCEPT

        async with served.client(elicit=elicit) as client:
            result = await client.call_tool("wipe", {"path": "/"})
    assert (len(asked), result.is_error, served.ran) == (1, True, [])


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_a_typed_tools_denial_carries_its_payload_in_meta(
        adapter: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    policy = b'environment = ["staging"]\n[tools.report]\nrequirements = ["env:production"]\n'
    async with serving(adapter, tmp_path, policy, caplog) as served, served.client() as client:
        result = await client.call_tool("report", {})
    payload = {"error": "unmet_requirements", "tool": "report", "unmet": ["env:production"],
               "withheld": 0}
    assert (result.is_error, result.structured_content, served.ran) == (True, None, [])
    assert result.meta is not None and result.meta[DENIAL_META_KEY] == payload


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_a_policy_unusable_for_the_server_is_one_sentence(
        adapter: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async with serving(adapter, tmp_path, b"[tools.Wipe]\nrequirements = []\n", caplog) as served, \
            served.client() as client:
        await client.list_tools()
        result = await client.call_tool("wipe", {"path": "/"})
    assert result.is_error and served.ran == []
    assert [c.text for c in result.content] == [unusable(served.who)]  # type: ignore[union-attr]


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_the_operator_is_told_each_near_miss_in_one_line(
        adapter: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async with serving(adapter, tmp_path, b"[tools.Wipe]\nrequirements = []\n", caplog) as served, \
            served.client() as client:
        await client.list_tools()
        await client.call_tool("wipe", {"path": "/"})
    # (the gateway's one server, given by its command line, is "upstream")
    where = "server upstream" if adapter == "gateway" else str(tmp_path / "policy.toml")
    assert unusable_line(where, [near_miss_message("Wipe", "wipe")]) in served.log()


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_a_call_answered_with_an_input_round_is_counted_once_by_its_retry(
        adapter: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def accept(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        return ACCEPT

    async with serving(adapter, tmp_path, SELF, caplog) as served, \
            served.client("2026-07-28", accept) as client:
        result = await client.call_tool("wipe", {"path": "/"})
        assert (result.is_error, served.ran) == (False, ["wipe"])
        metrics = served.metrics()
    assert (_counted(metrics, "wipe", "allowed"), _counted(metrics, "wipe", "denied")) == (1, 0)


class _Budget:
    """A third party's late stage (docs/library.md's budget, in brief): `budget:NAME` is met while
    the caller has a unit left, and a unit is spent only once the call ran (`Held.finished`)."""

    namespace = "budget"
    order = 700
    not_a_condition = "a budget is spent, not looked at"
    timeout = None
    carries = True

    def __init__(self, units: int) -> None:
        self.left = units
        self.told: list[tuple[bool, bool]] = []

    def validate(self, requirement: str) -> str | None:
        return None

    def resolve(self, requirement: str, context: Any) -> Outcome:
        return Outcome(requirement, Status.UNSATISFIED, "decided late")

    def stage(self, requirements: Sequence[str]) -> _Budget:
        self.requirements = tuple(requirements)
        return self

    def decide(self, call: LateCall) -> tuple[Outcome, ...]:
        has = call.sidecar is not None and self.left > 0
        outcomes = tuple(Outcome(r, Status.SATISFIED if has else Status.UNSATISFIED, "budget",
                                 transient=True) for r in self.requirements)
        if call.sidecar is not None:
            held = _Spent(self, outcomes)
            call.sidecar.held.update(dict.fromkeys(self.requirements, held))
            if has:
                call.sidecar.told.append(held)
        return outcomes

    def release(self, call: LateCall) -> None:
        return None


@dataclass
class _Spent:
    budget: _Budget
    outcomes: tuple[Outcome, ...]
    question: None = None
    outbound: None = None

    @property
    def requirements(self) -> tuple[str, ...]:
        return self.budget.requirements

    async def answer(self, answer: Any) -> bool:
        return False

    def finished(self, allowed: bool, ran: bool) -> None:
        self.budget.told.append((allowed, ran))
        self.budget.left -= ran

    async def offer(self, requirement: str, call: Any) -> None:
        return None


@pytest.mark.parametrize("adapter", ADAPTERS[:3])
async def test_a_third_partys_late_stage_is_carried_and_told_by_every_hosted_adapter(
        adapter: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A stage that `carries` gets a sidecar from an adapter that asks nobody, and hears how each
    call it allowed ended: the second call, over budget, is denied and never ran."""
    budget = _Budget(1)
    policy = b'[tools.wipe]\nrequirements = ["budget:wipes"]\n'
    async with serving(adapter, tmp_path, policy, caplog, [budget]) as served, \
            served.client() as client:
        first = await client.call_tool("wipe", {"path": "/"})
        second = await client.call_tool("wipe", {"path": "/"})
    assert (first.is_error, second.is_error, served.ran) == (False, True, ["wipe"])
    assert (budget.left, budget.told) == (0, [(True, True)])
