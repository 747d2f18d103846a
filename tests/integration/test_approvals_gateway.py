"""`approval:NAME` through real `mcp-preconditions gateway` processes over stdio (SPEC §15), in front
of a listed server whose RAN.log is the oracle of what ran, reached through the MCP SDK's client:
a `self` approval asked with `elicitation/create` runs the call exactly once on accept and never on
decline, and a client without elicitation gets `undisclosed`; an approver's approval, given in the
Redis store the gateways share, lets exactly one retry run (two replicas racing included), and a
changed argument or an expired approval is refused; each envelope matches SPEC §15's table; the
records carry `approval` and the metric counts results; a stdio gateway without pages refuses to
start on an approver-decided approval.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from mcp_preconditions.approvals import Party, State
from mcp_preconditions.approvals.store_redis import RedisApprovalStore
from tests.fixtures.approvals import envelope, gateway_store
from tests.fixtures.mcp_servers import CLI, MODES, ROOT, server_env
from tests.fixtures.ports import free_port
from tests.fixtures.redis import RedisServer

pytestmark = pytest.mark.integration

TOOLS = [{"name": n, "inputSchema": {"type": "object"}} for n in ("wipe", "deploy", "brief", "hurry")]
# Redis timeouts of seconds, not the defaults' fraction of one: a loaded machine can make a healthy
# Redis that late, and an approval's store then fails (closed) where the test expects its answer.
POLICY = """# run {run}
[guard]
lookup_timeout_seconds = 5
[state.redis]
url = "{redis}"
connect_timeout_seconds = 3
read_timeout_seconds = 3
[approvals.confirm]
approvers = "self"
timeout_seconds = 30
[approvals.quick]
approvers = "self"
timeout_seconds = 1
[approvals.release]
approvers = ["auth:claim:role:release_manager"]
store = "redis"
[approvals.short]
approvers = ["auth:claim:role:release_manager"]
expires_seconds = 1
store = "redis"
[tools.wipe]
requirements = ["approval:confirm"]
[tools.deploy]
requirements = ["approval:release"]
[tools.brief]
requirements = ["approval:short"]
[tools.hurry]
requirements = ["approval:quick"]
"""
ALICE = {"iss": "https://idp.example", "sub": "alice"}
RITA = Party("https://idp.example", "rita")
Elicit = Callable[[Any, mcp_types.ElicitRequestParams], Awaitable[mcp_types.ElicitResult]]


class Served:
    """The files of one gateway set-up: policy, listing, claims, RAN.log, stderr, pages port."""

    def __init__(self, tmp_path: Path, redis_url: str) -> None:
        self.policy, self.tools = tmp_path / "policy.toml", tmp_path / "tools.json"
        self.claims, self.ran = tmp_path / "claims.json", tmp_path / "ran.log"
        self.errors, self.decisions = tmp_path / "stderr.log", tmp_path / "decisions.jsonl"
        self.policy.write_text(POLICY.format(run=uuid.uuid4().hex, redis=redis_url), encoding="utf-8")
        self.tools.write_text(json.dumps(TOOLS), encoding="utf-8")
        self.claims.write_text(json.dumps(ALICE), encoding="utf-8")
        self.pages = f"http://127.0.0.1:{free_port()}"

    def command(self, *options: str) -> list[str]:
        return [*CLI, "gateway", "--policy", str(self.policy), "--claims", str(self.claims),
                *options, "--", sys.executable, "-m", "tests.fixtures.listed_server",
                str(self.tools), str(self.ran)]

    def runs(self) -> list[str]:
        return self.ran.read_text(encoding="utf-8").split() if self.ran.exists() else []

    def records(self) -> list[dict[str, Any]]:
        """The operator's records (`--decision-log`): a stdio gateway's stderr is the caller's."""
        return [json.loads(line) for line in
                self.decisions.read_text(encoding="utf-8").splitlines()]

    @asynccontextmanager
    async def client(self, *, elicit: Elicit | None = None, declared: bool = True,
                     version: str = "2025-11-25", metrics: str | None = None,
                     pages: str | None = None) -> AsyncIterator[Client]:
        """A gateway process and its client. `pages`: where this replica serves its pages (its
        own port; the url hints name `self.pages`, the address browsers reach, as behind a
        balancer)."""
        options = ["--pages-listen", pages or self.pages, "--public-url", self.pages,
                   "--decision-log", str(self.decisions),
                   *(["--metrics-listen", metrics] if metrics else [])]
        command = self.command(*options)
        params = StdioServerParameters(command=command[0], args=command[1:], env=server_env(),
                                       cwd=ROOT)
        callbacks: dict[str, Any] = {"elicitation_callback": elicit or _accept} if declared else {}
        with self.errors.open("a", encoding="utf-8") as errlog:
            async with Client(stdio_client(params, errlog=errlog), mode=MODES[version],
                              **callbacks) as client:
                yield client


async def _accept(_ctx: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
    return mcp_types.ElicitResult(action="accept", content={})


@pytest.fixture
def served(tmp_path: Path, redis_server: RedisServer) -> Served:
    return Served(tmp_path, redis_server.url)


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
        await asyncio.sleep(60)  # far past the approval's timeout_seconds = 1
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


async def test_an_approvers_approval_lets_exactly_one_retry_run(
        served: Served, store: RedisApprovalStore) -> None:
    metrics = f"http://127.0.0.1:{free_port()}"
    async with served.client(metrics=metrics) as client:
        first = await client.call_tool("deploy", {"env": "prod"})
        found = envelope(first)
        assert found is not None and found[0] == "available"
        (hint,) = found[1]
        assert hint["type"] == "url" and hint["url"].startswith(served.pages + "/approvals/")
        request_id = hint["url"].rsplit("/", 1)[1]
        assert served.runs() == []
        assert not isinstance(await store.decide(request_id, "approve", RITA), str)
        changed = await client.call_tool("deploy", {"env": "staging"})  # another call: refused
        assert changed.is_error is True and served.runs() == []
        retry = await client.call_tool("deploy", {"env": "prod"})
        assert retry.is_error is False and served.runs() == ["deploy"]
        again = await client.call_tool("deploy", {"env": "prod"})  # single use: a new request
        assert again.is_error is True and served.runs() == ["deploy"]
        text = httpx2.get(metrics + "/metrics", timeout=10).text
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


async def test_an_approvers_refusal_is_unavailable_and_final(
        served: Served, store: RedisApprovalStore) -> None:
    async with served.client() as client:
        found = envelope(await client.call_tool("deploy", {"env": "qa"}))
        assert found is not None
        request_id = found[1][0]["url"].rsplit("/", 1)[1]
        assert not isinstance(await store.decide(request_id, "refuse", RITA), str)
        results = [await client.call_tool("deploy", {"env": "qa"}) for _ in range(2)]
    assert [envelope(r) for r in results] == [("unavailable", [])] * 2
    assert served.runs() == []
    assert [(r["approval"]["id"], r["approval"]["result"]) for r in served.records()
            if r["tool"] == "deploy"] == [(request_id, "requested")] + [(request_id, "refused")] * 2


async def test_an_expired_approval_is_refused(served: Served, store: RedisApprovalStore) -> None:
    async with served.client() as client:
        first = await client.call_tool("brief", {})
        found = envelope(first)
        assert found is not None
        request_id = found[1][0]["url"].rsplit("/", 1)[1]
        assert not isinstance(await store.decide(request_id, "approve", RITA), str)
        while (request := await store.get(request_id)) is not None and \
                request.state is State.APPROVED:
            await asyncio.sleep(0.1)  # its second of life, by Redis's clock
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


async def test_two_replicas_sharing_redis_honour_one_approval_once(
        served: Served, store: RedisApprovalStore) -> None:
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


async def test_another_callers_call_is_not_approved(served: Served, store: RedisApprovalStore,
                                                    tmp_path: Path) -> None:
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


def test_a_stdio_gateway_without_pages_refuses_an_approver_decided_approval(served: Served) -> None:
    done = subprocess.run(served.command(), env=server_env(), cwd=ROOT, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"mcp-preconditions: error: {served.policy}: approvals.release: approvers decide it on the "
        "gateway's approval pages, which a stdio gateway serves only with --pages-listen "
        "http://127.0.0.1:PORT"]
