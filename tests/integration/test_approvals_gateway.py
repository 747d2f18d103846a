"""`approval:NAME` through the gateway as `mcp-preconditions gateway` wires it over stdio (SPEC
§15), in front of a listed server whose `ran` list is the oracle of what ran, reached through the MCP
SDK's client: a `self` approval asked with `elicitation/create` runs the call exactly once on accept
and never on decline, and a client without elicitation gets `undisclosed`; an approver's approval,
given in the gateway's approval store, lets exactly one retry run, and a changed argument or an
expired approval (a fake clock) is refused; each envelope matches SPEC §15's table; the records
carry `approval` and the metric counts results; a stdio gateway without pages refuses to start on
an approver-decided approval.

The gateway and the listed server run in this process (tests/fixtures/inprocess.py, the server in
memory); the approver-decided approvals are in its memory store. Interop, marked: two real gateway
processes sharing one approval in a real redis-server (two replicas honour it once; another
caller's gateway never uses it): a store shared between processes is what Redis is there for, and
what no in-process gateway can show.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from mcp_preconditions.approvals import MemoryApprovalStore, Party, State
from mcp_preconditions.approvals.store_redis import RedisApprovalStore
from mcp_preconditions.cli import main
from tests.fixtures.approvals import envelope, gateway_store
from tests.fixtures.clock import FakeClock
from tests.fixtures.inprocess import InProcess, cli_gateway
from tests.fixtures.listed_server import build
from tests.fixtures.mcp_servers import CLI, MODES, ROOT, server_env
from tests.fixtures.memory_upstream import MemoryServers
from tests.fixtures.ports import free_port
from tests.fixtures.redis import RedisServer

pytestmark = pytest.mark.integration

TOOLS = [{"name": n, "inputSchema": {"type": "object"}} for n in ("wipe", "deploy", "brief", "hurry")]
APPROVALS = """[approvals.confirm]
approvers = "self"
timeout_seconds = 30
[approvals.quick]
approvers = "self"
timeout_seconds = 1
[approvals.release]
approvers = ["auth:claim:role:release_manager"]
store = "{store}"
[approvals.short]
approvers = ["auth:claim:role:release_manager"]
expires_seconds = 1
store = "{store}"
[tools.wipe]
requirements = ["approval:confirm"]
[tools.deploy]
requirements = ["approval:release"]
[tools.brief]
requirements = ["approval:short"]
[tools.hurry]
requirements = ["approval:quick"]
"""
# Redis timeouts of seconds, not the defaults' fraction of one: a loaded machine can make a healthy
# Redis that late, and an approval's store then fails (closed) where the test expects its answer.
REDIS = """# run {run}
[guard]
lookup_timeout_seconds = 5
[state.redis]
url = "{redis}"
connect_timeout_seconds = 3
read_timeout_seconds = 3
"""
ALICE = {"iss": "https://idp.example", "sub": "alice"}
RITA = Party("https://idp.example", "rita")
PAGES = "https://gateway.example"  # the pages' public URL, which the url hints name
Elicit = Callable[[Any, mcp_types.ElicitRequestParams], Awaitable[mcp_types.ElicitResult]]


class Served:
    """One gateway set-up in this process: policy, claims, what ran, the operator's records, and
    (while a client is open) the gateway and its approval store on a fake clock."""

    def __init__(self, tmp_path: Path) -> None:
        self.policy, self.claims = tmp_path / "policy.toml", tmp_path / "claims.json"
        self.decisions = tmp_path / "decisions.jsonl"
        self.policy.write_text(APPROVALS.format(store="memory"), encoding="utf-8")
        self.claims.write_text(json.dumps(ALICE), encoding="utf-8")
        self.ran: list[str] = []
        self.clock = FakeClock(time.time())
        self.gateway: InProcess | None = None

    def runs(self) -> list[str]:
        return list(self.ran)

    def records(self) -> list[dict[str, Any]]:
        """The operator's records (`--decision-log`): a stdio gateway's stderr is the caller's."""
        return [json.loads(line) for line in
                self.decisions.read_text(encoding="utf-8").splitlines()]

    @property
    def store(self) -> MemoryApprovalStore:
        """The gateway's store of `store = "memory"` approvals (the pages decide in it)."""
        assert self.gateway is not None, "no gateway is running"
        return self.gateway.gateway.guard.live.approval_memory

    async def metrics(self) -> str:
        assert self.gateway is not None
        async with self.gateway.http() as http:
            return (await http.get("/metrics")).text

    @asynccontextmanager
    async def client(self, *, elicit: Elicit | None = None, declared: bool = True,
                     version: str = "2025-11-25") -> AsyncIterator[Client]:
        """The gateway, wired from its command line in this process, and its client."""
        servers = MemoryServers()
        upstream = servers.add("listed", lambda _env, _die: build(TOOLS, self.ran.append))
        argv = ["--policy", str(self.policy), "--claims", str(self.claims),
                "--pages-listen", "http://127.0.0.1:0", "--public-url", PAGES,
                "--decision-log", str(self.decisions), "--", *upstream]
        callbacks: dict[str, Any] = {"elicitation_callback": elicit or _accept} if declared else {}
        with servers.installed():
            async with cli_gateway(argv) as gateway:
                self.gateway = gateway
                self.store._clock = self.clock  # expiry by the test's clock, not the wall's
                await gateway.until_ready()
                async with gateway.client("legacy" if version == "2025-11-25" else "auto",
                                          **callbacks) as client:  # (MODES[version])
                    yield client
        self.gateway = None


class Processes:
    """Real gateway processes over stdio sharing approvals in a real redis-server (the interop
    rows): policy, listing, claims, RAN.log, stderr, decision records."""

    def __init__(self, tmp_path: Path, redis_url: str) -> None:
        self.policy, self.tools = tmp_path / "policy.toml", tmp_path / "tools.json"
        self.claims, self.ran = tmp_path / "claims.json", tmp_path / "ran.log"
        self.errors, self.decisions = tmp_path / "stderr.log", tmp_path / "decisions.jsonl"
        self.policy.write_text(REDIS.format(run=uuid.uuid4().hex, redis=redis_url)
                               + APPROVALS.format(store="redis"), encoding="utf-8")
        self.tools.write_text(json.dumps(TOOLS), encoding="utf-8")
        self.claims.write_text(json.dumps(ALICE), encoding="utf-8")
        self.pages = f"http://127.0.0.1:{free_port()}"

    def runs(self) -> list[str]:
        return self.ran.read_text(encoding="utf-8").split() if self.ran.exists() else []

    @asynccontextmanager
    async def client(self, pages: str | None = None) -> AsyncIterator[Client]:
        """A gateway process and its client. `pages`: where this replica serves its pages (its
        own port; the url hints name `self.pages`, the address browsers reach, as behind a
        balancer)."""
        command = [*CLI, "gateway", "--policy", str(self.policy), "--claims", str(self.claims),
                   "--pages-listen", pages or self.pages, "--public-url", self.pages,
                   "--decision-log", str(self.decisions), "--", sys.executable, "-m",
                   "tests.fixtures.listed_server", str(self.tools), str(self.ran)]
        params = StdioServerParameters(command=command[0], args=command[1:], env=server_env(),
                                       cwd=ROOT)
        with self.errors.open("a", encoding="utf-8") as errlog:
            async with Client(stdio_client(params, errlog=errlog), mode=MODES["2025-11-25"],
                              elicitation_callback=_accept) as client:
                yield client


async def _accept(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
    return mcp_types.ElicitResult(action="accept", content={})


@pytest.fixture
def served(tmp_path: Path) -> Served:
    return Served(tmp_path)


@pytest.fixture
def processes(tmp_path: Path, redis_server: RedisServer) -> Processes:
    return Processes(tmp_path, redis_server.url)


@pytest.fixture
async def store(redis_server: RedisServer) -> AsyncIterator[RedisApprovalStore]:
    async with gateway_store(redis_server.url) as found:
        yield found


async def test_a_self_approved_call_runs_exactly_once(served: Served) -> None:
    asked: list[mcp_types.ElicitRequestParams] = []

    async def accept(ctx: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        asked.append(params)
        return mcp_types.ElicitResult(action="accept", content={})

    async with served.client(elicit=accept) as client:
        result = await client.call_tool("wipe", {"path": "/tmp/x"})
    assert result.is_error is False and envelope(result) is None
    assert served.runs() == ["wipe"]
    (question,) = asked
    assert isinstance(question, mcp_types.ElicitRequestFormParams)
    assert "Approve one call of tool 'wipe' (approval 'confirm')" in question.message
    assert '"path": "/tmp/x"' in question.message
    wipes = [r for r in served.records() if r["tool"] == "wipe"]
    assert [(r["allowed"], r["approval"]["result"]) for r in wipes] == [(False, "requested"),
                                                                         (True, "used")]
    assert wipes[0]["approval"]["id"] == wipes[1]["approval"]["id"]


async def test_at_2026_07_28_the_question_is_an_input_round(served: Served) -> None:
    asked: list[mcp_types.ElicitRequestParams] = []

    async def accept(ctx: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        asked.append(params)
        return mcp_types.ElicitResult(action="accept", content={})

    async with served.client(elicit=accept, version="2026-07-28") as client:
        result = await client.call_tool("wipe", {"path": "/srv"})
        assert result.is_error is False and served.runs() == ["wipe"]
        assert len(asked) == 1 and "Approve one call of tool 'wipe'" in asked[0].message
        second = await client.call_tool("wipe", {"path": "/srv"})  # a new call: asked again
    assert second.is_error is False and served.runs() == ["wipe", "wipe"] and len(asked) == 2
    wipes = [r["approval"]["result"] for r in served.records() if r["tool"] == "wipe"]
    assert wipes == ["requested", "requested", "used"] * 2  # the round's retry met it again


@pytest.mark.parametrize(("action", "version"), [("decline", "2025-11-25"), ("cancel", "2025-11-25"),
                                                 ("decline", "2026-07-28")])
async def test_a_declined_call_never_runs_and_is_unavailable(served: Served, action: str,
                                                             version: str) -> None:
    async def answer(ctx: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        return mcp_types.ElicitResult(action=action)

    async with served.client(elicit=answer, version=version) as client:
        result = await client.call_tool("wipe", {"path": "/"})
    assert result.is_error is True and envelope(result) == ("unavailable", [])
    assert served.runs() == []
    results = [r["approval"]["result"] for r in served.records() if r["tool"] == "wipe"]
    assert results == (["requested", "refused"] if version == "2025-11-25" else
                       ["requested", "requested", "refused"])


async def test_no_answer_in_time_denies_and_nothing_runs(served: Served) -> None:
    async def late(ctx: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        await anyio.sleep_forever()  # never answers: the approval's timeout_seconds = 1 decides
        return mcp_types.ElicitResult(action="accept", content={})

    async with served.client(elicit=late) as client:
        result = await client.call_tool("hurry", {})
    assert result.is_error is True and envelope(result) == ("unavailable", [])
    assert served.runs() == []
    assert [r["approval"]["result"] for r in served.records() if r["tool"] == "hurry"] == [
        "requested", "expired"]


@pytest.mark.parametrize("version", ["2025-11-25", "2026-07-28"])
async def test_a_client_without_elicitation_is_undisclosed_and_nothing_runs(served: Served,
                                                                            version: str) -> None:
    async with served.client(declared=False, version=version) as client:
        result = await client.call_tool("wipe", {"path": "/"})
    assert result.is_error is True and envelope(result) == ("undisclosed", [])
    assert served.runs() == []
    (record,) = [r for r in served.records() if r["tool"] == "wipe"]
    assert record["allowed"] is False and "approval" not in record  # nobody was asked


async def test_an_approvers_approval_lets_exactly_one_retry_run(served: Served) -> None:
    async with served.client() as client:
        first = await client.call_tool("deploy", {"env": "prod"})
        found = envelope(first)
        assert found is not None and found[0] == "available"
        (hint,) = found[1]
        assert hint["type"] == "url" and hint["url"].startswith(PAGES + "/approvals/")
        request_id = hint["url"].rsplit("/", 1)[1]
        assert served.runs() == []
        assert not isinstance(await served.store.decide(request_id, "approve", RITA), str)
        changed = await client.call_tool("deploy", {"env": "staging"})  # another call: refused
        assert changed.is_error is True and served.runs() == []
        retry = await client.call_tool("deploy", {"env": "prod"})
        assert retry.is_error is False and served.runs() == ["deploy"]
        again = await client.call_tool("deploy", {"env": "prod"})  # single use: a new request
        assert again.is_error is True and served.runs() == ["deploy"]
        text = await served.metrics()
    assert 'mcp_preconditions_approvals_total{approval="release",result="used"} 1.0' in text
    assert 'mcp_preconditions_approvals_total{approval="release",result="requested"} 3.0' in text
    assert "alice" not in text
    deploys = [r["approval"] for r in served.records() if r["tool"] == "deploy"]
    assert [d["result"] for d in deploys] == ["requested", "requested", "used", "requested"]
    assert deploys[0]["id"] == deploys[2]["id"] == request_id != deploys[3]["id"]


async def test_without_url_elicitation_an_approvers_remedy_is_undisclosed(served: Served) -> None:
    async with served.client(declared=False) as client:
        result = await client.call_tool("deploy", {"env": "prod"})
    assert envelope(result) == ("undisclosed", [])
    (record,) = [r for r in served.records() if r["tool"] == "deploy"]
    assert record["approval"]["result"] == "requested"  # the request exists all the same


async def test_an_approvers_refusal_is_unavailable_and_final(served: Served) -> None:
    async with served.client() as client:
        found = envelope(await client.call_tool("deploy", {"env": "qa"}))
        assert found is not None
        request_id = found[1][0]["url"].rsplit("/", 1)[1]
        assert not isinstance(await served.store.decide(request_id, "refuse", RITA), str)
        results = [await client.call_tool("deploy", {"env": "qa"}) for _ in range(2)]
    assert [envelope(r) for r in results] == [("unavailable", [])] * 2
    assert served.runs() == []
    assert [(r["approval"]["id"], r["approval"]["result"]) for r in served.records()
            if r["tool"] == "deploy"] == [(request_id, "requested")] + [(request_id, "refused")] * 2


async def test_an_expired_approval_is_refused(served: Served) -> None:
    async with served.client() as client:
        first = await client.call_tool("brief", {})
        found = envelope(first)
        assert found is not None
        request_id = found[1][0]["url"].rsplit("/", 1)[1]
        store = served.store
        assert not isinstance(await store.decide(request_id, "approve", RITA), str)
        served.clock.advance(1.5)  # past its second of life (expires_seconds = 1)
        retry = await client.call_tool("brief", {})
    again = envelope(retry)  # refused: a new request, for a new approval
    assert retry.is_error is True and again is not None and again[0] == "available"
    assert again[1][0]["url"] != found[1][0]["url"]
    assert served.runs() == []
    expired = await store.get(request_id)
    assert expired is not None and expired.state is State.EXPIRED
    briefs = [r["approval"] for r in served.records() if r["tool"] == "brief"]
    assert [b["result"] for b in briefs] == ["requested", "requested"]
    assert briefs[0]["id"] == request_id != briefs[1]["id"]


@pytest.mark.interop
async def test_two_replicas_sharing_redis_honour_one_approval_once(
        processes: Processes, store: RedisApprovalStore) -> None:
    served = processes
    async with served.client() as one, \
            served.client(pages=f"http://127.0.0.1:{free_port()}") as two:
        first = await one.call_tool("deploy", {"env": "prod"})
        found = envelope(first)
        assert found is not None
        request_id = found[1][0]["url"].rsplit("/", 1)[1]
        seen = await two.call_tool("deploy", {"env": "prod"})  # the same request, on the other
        assert envelope(seen) == found
        assert not isinstance(await store.decide(request_id, "approve", RITA), str)
        results = await asyncio.gather(*(c.call_tool("deploy", {"env": "prod"})
                                         for c in (one, two, one, two)))
    assert sorted(r.is_error for r in results) == [False, True, True, True]
    assert served.runs() == ["deploy"]


@pytest.mark.interop
async def test_another_callers_call_is_not_approved(processes: Processes,
                                                    store: RedisApprovalStore) -> None:
    served = processes
    async with served.client() as alice:
        found = envelope(await alice.call_tool("deploy", {"env": "prod"}))
        assert found is not None
        request_id = found[1][0]["url"].rsplit("/", 1)[1]
        assert not isinstance(await store.decide(request_id, "approve", RITA), str)
    served.claims.write_text(json.dumps({**ALICE, "sub": "bob"}), encoding="utf-8")
    async with served.client() as bob:
        theirs = await bob.call_tool("deploy", {"env": "prod"})
    again = envelope(theirs)
    assert theirs.is_error is True and again is not None and again[1] != found[1]
    assert served.runs() == []
    approved = await store.get(request_id)
    assert approved is not None and approved.state is State.APPROVED  # still alice's to use


def test_a_stdio_gateway_without_pages_refuses_an_approver_decided_approval(
        served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["gateway", "--policy", str(served.policy), "--claims", str(served.claims), "--",
            *MemoryServers().add("listed", lambda _env, _die: build(TOOLS, served.ran.append))]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"mcp-preconditions: error: {served.policy}: approvals.release: approvers decide it on the "
        "gateway's approval pages, which a stdio gateway serves only with --pages-listen "
        "http://127.0.0.1:PORT"]
