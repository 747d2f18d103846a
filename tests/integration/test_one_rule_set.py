"""One rule set (issue 31): a hosted server and the gateway list, decide and refuse by the same code,
so each rule the two paths used to disagree on is held here by one test, run on both paths through
the MCP SDK's client: the same server (tests/fixtures/listed_server.py, whose `tools/list` is
exactly the JSON it is given) guarded in-process by `guard_server`, and behind `mcp-preconditions
gateway` wired from its command line for stdio (`--claims`) in the test's event loop, the server in
memory as its stdio server (tests/fixtures/inprocess.py). Every expected value is the same on both
paths, but for who a refusal says it is ("the server's" / "the gateway's" policy).

No notification is waited for by time: each `list_changed` a client must not get is followed by one
it must get, on the same ordered stream, and the count is read when that one arrives.

| rule | decided (docs/mcp.md, docs/gateway.md) |
|---|---|
| denial of a tool with an `outputSchema` | payload under `_meta`, no structuredContent |
| a listing's own requirements | their union with the policy's, listed and enforced |
| a near-miss `[tools.NAME]` | the server's calls refused, the list still answered, the log says why |
| `list_changed` after a reload | only when the caller's visible view changed |
| who builds a refusal's Decision | `Guard.refuse`: subject, revision, a measured duration |
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_preconditions.client import DENIAL_META_KEY
from mcp_preconditions.guard import Guard
from mcp_preconditions.integrations.client_mcp import denial_of
from mcp_preconditions.integrations.mcp_sdk import guard_server
from mcp_preconditions.policy.load import load_policy, revision_of
from mcp_preconditions.principal import Credentials, Principal
from mcp_preconditions.wire import META_KEY
from tests.fixtures.inprocess import cli_gateway
from tests.fixtures.listed_server import build
from tests.fixtures.mcp_servers import raw_tools
from tests.fixtures.memory_upstream import MemoryServers
from tests.integration.test_mcp_list_changed import Inbox

pytestmark = pytest.mark.asyncio(loop_scope="module")

PATHS = ("hosted", "gateway")
CLAIMS = {"sub": "alice", "role": "pilot"}
ALICE = Credentials(principal=Principal.from_claims(CLAIMS))
UNUSABLE = {"hosted": "the server's policy is unusable", "gateway": "the gateway's policy is unusable"}
DECISIONS = "mcp_preconditions.decisions: "


def tool(name: str, mirror: Any = None, **extra: Any) -> dict[str, Any]:
    return {"name": name, "inputSchema": {"type": "object"}, **extra,
            **({"_meta": {META_KEY: mirror}} if mirror is not None else {})}


@dataclass
class Served:
    """One path: the client, what ran on the server, the logs, and how to reload the policy."""

    path: str
    client: Client
    inbox: Inbox
    policy: Path
    ran: Callable[[], list[str]]
    log: Callable[[], str]
    reload: Callable[[bytes, Callable[[], Awaitable[bool]]], Awaitable[None]]
    extra: dict[str, Any] = field(default_factory=dict)

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line.split(DECISIONS, 1)[1]) for line in self.log().splitlines()
                if DECISIONS in line]


WAIT_SECONDS = 10.0  # the safety net of a wait for a reload's effect


async def _until(ready: Callable[[], Awaitable[bool]]) -> None:
    """Until `ready()` (a call or a notification count) says the reload is in force."""
    with anyio.fail_after(WAIT_SECONDS):
        while not await ready():
            await anyio.sleep(0.01)


@asynccontextmanager
async def hosted(tmp_path: Path, tools: list[dict[str, Any]], policy: bytes,
                 caplog: pytest.LogCaptureFixture) -> AsyncIterator[Served]:
    path = tmp_path / "policy.toml"
    path.write_bytes(policy)
    ran: list[str] = []
    server = build(tools, ran.append)
    pre = guard_server(server, Guard(load_policy(path), entry_points=False),
                       credentials=lambda _request: ALICE)

    async def reload(text: bytes, ready: Callable[[], Awaitable[bool]]) -> None:
        path.write_bytes(text)
        await pre.reload(load_policy(path))
        await _until(ready)

    caplog.set_level("INFO", logger="mcp_preconditions")
    inbox = Inbox()
    async with Client(server, mode="legacy", message_handler=inbox) as client:
        yield Served("hosted", client, inbox, path, lambda: list(ran),
                     lambda: "\n".join(f"{r.name}: {r.getMessage()}" for r in caplog.records), reload)


@asynccontextmanager
async def gateway(tmp_path: Path, tools: list[dict[str, Any]], policy: bytes,
                  list_delay: float = 0.0) -> AsyncIterator[Served]:
    path, claims = tmp_path / "policy.toml", tmp_path / "claims.json"
    path.write_bytes(policy)
    claims.write_text(json.dumps(CLAIMS), encoding="utf-8")
    ran: list[str] = []
    servers = MemoryServers()
    with servers.installed():
        command = servers.add("listed", lambda _env, _die: build(tools, ran.append, list_delay))
        async with cli_gateway(["--policy", str(path), "--claims", str(claims),
                                "--policy-poll-seconds", "0.1", "--", *command]) as gw:

            async def reload(text: bytes, ready: Callable[[], Awaitable[bool]]) -> None:
                seen = len(gw.log.lines)
                path.write_bytes(text)  # the gateway polls its file
                await gw.log.wait_for(r"policy .* reloaded: revision", after=seen)
                await _until(ready)

            inbox = Inbox()
            async with gw.client("legacy", message_handler=inbox) as client:
                yield Served("gateway", client, inbox, path, lambda: list(ran), gw.output, reload)


# -- the rules ---------------------------------------------------------------------------------------
STAGING = b'environment = ["staging"]\n'


async def output_schema_denial(served: Served) -> None:
    result = await served.client.call_tool("report", {})
    payload = {"error": "unmet_requirements", "tool": "report", "unmet": ["env:production"],
               "withheld": 0}
    assert (result.is_error, result.structured_content) == (True, None)
    assert result.meta is not None and result.meta[DENIAL_META_KEY] == payload
    assert [c.text for c in result.content] == [  # type: ignore[union-attr]
        "Tool 'report' was not run: unmet requirements: env:production. Ask an operator."]
    assert denial_of(result) == payload
    assert served.ran() == []


async def own_requirements_and_the_policys(served: Served) -> None:
    union = ["auth:claim:role:admin", "env:production"]
    listed = {t["name"]: t for t in await raw_tools(served.client.session)}
    assert listed["secret"]["_meta"][META_KEY] == union
    assert listed["secret"]["execution"]["requirements"] == union
    denied = await served.client.call_tool("secret", {})
    assert denial_of(denied) == {"error": "unmet_requirements", "tool": "secret", "unmet": union,
                                 "withheld": 0}
    assert served.ran() == []


async def near_miss(served: Served) -> None:
    assert [t["name"] for t in await raw_tools(served.client.session)] == ["write_note", "echo"]
    for name in ("write_note", "echo"):
        refused = await served.client.call_tool(name, {})
        assert refused.is_error is True
        assert refused.structured_content is None and denial_of(refused) is None
        assert refused.meta is None  # the service's fault, not an authorization denial: no envelope
        assert [c.text for c in refused.content] == [UNUSABLE[served.path]]  # type: ignore[union-attr]
    assert served.ran() == []
    assert "Write_Note" in served.log() and "nearly matches" in served.log()


async def list_changed_only_when_seen(served: Served) -> None:
    await served.client.list_tools()  # the caller has been shown a list

    async def withheld() -> bool:  # the confidential requirement is in force, not shown
        denial = denial_of(await served.client.call_tool("echo", {}))
        return denial is not None and denial["withheld"] == 1
    await served.reload(STAGING + b'confidential = ["env:testing"]\n'
                        b'[tools.echo]\nrequirements = ["env:testing"]\n', withheld)
    assert served.inbox.count == 0

    def told(count: int) -> Callable[[], Awaitable[bool]]:
        async def arrived() -> bool:
            return served.inbox.count >= count
        return arrived
    await served.reload(STAGING + b'confidential = ["env:testing"]\n'
                        b'[tools.echo]\nrequirements = ["env:testing", "env:production"]\n', told(1))
    # The one it must get came after any the first reload sent, on the same stream: none was.
    assert served.inbox.count == 1
    listed = await raw_tools(served.client.session)  # shown again
    assert listed[0]["_meta"][META_KEY] == ["env:production"]
    await served.reload(STAGING + b'confidential = ["env:testing"]\n'
                        b'[tools.echo]\nrequirements = ["env:testing"]\n', told(2))
    assert served.inbox.count == 2  # and the second reload sent it once


async def refusals_are_decisions(served: Served) -> None:
    assert [t["name"] for t in await raw_tools(served.client.session)] == ["bad", "deploy"]
    twice = await served.client.call_tool("dup", {})  # SPEC §10's refusal of an unlisted name
    assert (twice.is_error, twice.structured_content) == (True, {
        "error": "unlisted_tool", "tool": "dup", "unmet": [], "withheld": 0})
    assert [c.text for c in twice.content] == [  # type: ignore[union-attr]
        "Tool 'dup' was not run: its server lists more than one tool of that name. Ask an operator."]
    bad = await served.client.call_tool("bad", {})
    assert denial_of(bad) == {"error": "unmet_requirements", "tool": "bad",
                              "unmet": ["(malformed requirements)"], "withheld": 0}
    static = await served.client.call_tool("deploy", {})  # static requirements only (29.2)
    assert denial_of(static) == {"error": "unmet_requirements", "tool": "deploy",
                                 "unmet": ["env:production"], "withheld": 0}
    revision = revision_of(served.policy.read_bytes())
    records = {r["tool"]: r for r in served.records()}
    assert [(records[n]["subject"], records[n]["allowed"], records[n]["unmet"], records[n]["revision"])
            for n in ("dup", "bad", "deploy")] == [
        ("alice", False, [], revision), ("alice", False, ["(malformed requirements)"], revision),
        ("alice", False, ["env:production"], revision)]
    assert all(records[n]["duration_us"] > 0 for n in ("dup", "bad", "deploy"))
    assert served.ran() == []


@dataclass(frozen=True)
class Rule:
    name: str
    tools: list[dict[str, Any]]
    policy: bytes
    check: Callable[[Served], Awaitable[None]]


RULES = [
    Rule("outputSchema denial", [tool("report", ["env:production"], outputSchema={
        "type": "object", "properties": {"result": {"type": "string"}}, "required": ["result"]})],
        STAGING, output_schema_denial),
    Rule("own requirements", [tool("secret", ["auth:claim:role:admin"])],
         STAGING + b'[tools.secret]\nrequirements = ["env:production"]\n',
         own_requirements_and_the_policys),
    Rule("near miss", [tool("write_note"), tool("echo")],
         STAGING + b'[tools.Write_Note]\nrequirements = ["env:production"]\n', near_miss),
    Rule("list_changed", [tool("echo")], STAGING + b'confidential = ["env:testing"]\n',
         list_changed_only_when_seen),
    Rule("refusals are decisions", [tool("dup"), tool("dup"), tool("bad", "env:production"),
                                    tool("deploy", ["env:production"])], STAGING,
         refusals_are_decisions),
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("rule", RULES, ids=[r.name for r in RULES])
async def test_one_rule_set_on_both_paths(rule: Rule, path: str, tmp_path: Path,
                                          caplog: pytest.LogCaptureFixture,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)
    serving = (hosted(tmp_path, rule.tools, rule.policy, caplog) if path == "hosted"
               else gateway(tmp_path, rule.tools, rule.policy))
    async with serving as served:
        await rule.check(served)


async def test_a_first_listing_asked_while_the_gateway_lists_its_server_is_not_followed_by_list_changed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A caller's first `tools/list` that reaches the gateway while it is still listing its server
    (slow here: 1 s) waits for that listing and shows the server's tools. The caller saw nothing
    before, so no `list_changed` follows: the view it is watched with is the one it was shown, not
    the empty one of the moment its request arrived (a race a loaded CI run lost, stop 37). A reload
    that changes its view then tells it once: nothing came before that on its stream."""
    monkeypatch.delenv("MCP_PRECONDITIONS_ENVIRONMENT", raising=False)
    async with gateway(tmp_path, [tool("echo")], STAGING, list_delay=1.0) as served:
        assert [t.name for t in (await served.client.list_tools()).tools] == ["echo"]
        assert served.inbox.count == 0
        assert [t.name for t in (await served.client.list_tools()).tools] == ["echo"]

        async def told() -> bool:
            return served.inbox.count > 0
        await served.reload(STAGING + b'[tools.echo]\nrequirements = ["env:production"]\n', told)
        assert served.inbox.count == 1
