"""The upstream's own requests (sampling, elicitation, roots) through the gateway, across protocol
versions: a 2026-07-28 client gets them as `input_required` and its retry continues the same
upstream call; a 2026-07-28 upstream's `input_required` reaches a 2025-11-25 client as requests.
They go only to the client whose call caused them, and a retry is decided by the guard again.

In-process (tests/fixtures/inprocess.py): the gateway wired from its command line in the test's event
loop, its upstream in memory (tests/fixtures/requesting_upstream.py, whose tools ask as npm
server-everything's do, and tests/fixtures/asking_upstream.py), the SDK clients on its app over the
streaming bridge; each wait is on the event (a log line, the upstream's log, the progress reported).
npm server-everything's own requests through a real stdio gateway stay interop (one test: the real
server, whose own roots request at start-up no test here controls).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import anyio
import mcp_types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from tests.fixtures import asking_upstream
from tests.fixtures.inprocess import WAIT_SECONDS, InProcess, cli_gateway, until
from tests.fixtures.memory_upstream import MemoryServers
from tests.fixtures.requesting_upstream import NAME, requesting
from tests.fixtures.upstreams import everything_stdio, gateway_stdio
from tests.integration.test_gateway_calls import RAW

IN_PROCESS = pytest.mark.asyncio(loop_scope="module")  # one event loop for the module's gateways
HTTP = ("--listen", "http://127.0.0.1:0")

# What the gateway logs when a client never retried a call the upstream asks about (rounds.py).
FORGOTTEN = "a client did not answer the upstream's request within"
POLICY = '[tools.deny_me]\nrequirements = ["auth:claim:role:admin"]\n'
SHORT = 2.0  # a call timeout this test waits out


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(POLICY, encoding="utf-8")
    return path


class Asked:
    """Sampling, elicitation and roots callbacks that record what they were asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def sampling(self, context: Any, params: mcp_types.CreateMessageRequestParams) -> Any:
        self.asked.append("sampling: " + params.messages[0].content.text)  # type: ignore[union-attr]
        return mcp_types.CreateMessageResult(role="assistant", model="test",
                                             content=mcp_types.TextContent(type="text", text="four"))

    async def elicitation(self, context: Any, params: mcp_types.ElicitRequestParams) -> Any:
        self.asked.append("elicitation")
        return mcp_types.ElicitResult(action="decline")

    async def roots(self, context: Any) -> Any:
        self.asked.append("roots")
        return mcp_types.ListRootsResult(roots=[mcp_types.Root(uri="file:///work/project",
                                                               name="project")])

    def callbacks(self) -> dict[str, Any]:
        return {"sampling_callback": self.sampling, "elicitation_callback": self.elicitation,
                "list_roots_callback": self.roots}


def _stdio(argv: list[str]) -> StdioServerParameters:
    return StdioServerParameters(command=argv[0], args=argv[1:])


@asynccontextmanager
async def gateway(policy: Path, *options: str, upstream: str = "requesting", log: Path | None = None,
                  modern_only: bool = False) -> AsyncIterator[InProcess]:
    """`gateway --policy P OPTIONS -- UPSTREAM` in-process, UPSTREAM in memory: the requesting
    upstream, or the asking one recording in `log`; once it is listed."""
    servers = MemoryServers()
    with servers.installed():
        if upstream == "requesting":
            command = servers.add("upstream", requesting)
        else:
            env = {"ASKING_UPSTREAM_LOG": str(log)}
            if modern_only:
                env["ASKING_UPSTREAM_MODERN_ONLY"] = "1"
            command = servers.asking_upstream(**env)
        async with cli_gateway(["--policy", str(policy), *options, "--", *command]) as gw:
            await gw.until_ready()
            yield gw


def _text(result: mcp_types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, mcp_types.TextContent))


@pytest.mark.interop
async def test_a_2026_client_answers_server_everythings_requests(policy: Path) -> None:
    """Interop: npm server-everything itself behind a real stdio gateway process."""
    asked = Asked()
    async with Client(_stdio(gateway_stdio(policy, everything_stdio())), mode="auto",
                      **asked.callbacks()) as client:
        assert client.protocol_version == "2026-07-28"
        with anyio.fail_after(10):
            sampled = await client.call_tool("trigger-sampling-request",
                                             {"prompt": "2+2", "maxTokens": 5})
            elicited = await client.call_tool("trigger-elicitation-request", {})
            roots = await client.call_tool("get-roots-list", {})
    # server-everything asks for roots on its own, ~350 ms after it starts, and caches the answer.
    # During one of these calls, that request is this client's (an input round); between calls no
    # client's call caused it, so nobody is asked and the server gets no roots (never a guess: a
    # 2026-07-28 client is reachable only through its own call). The machine's load decides which
    # happens; both are right, and each is checked. `get-roots-list` asks again when nothing is
    # cached yet, and server-everything checks its cache before the startup request is answered
    # (roots.js `syncRoots`), so with that request still out the server itself asks twice; both
    # asks come during this client's calls. That the gateway puts one upstream request to a client
    # once is checked against a server that logs what it asks (test_a_retry_is_decided_again...).
    assert not sampled.is_error and '"text": "four"' in _text(sampled)
    assert "declined" in _text(elicited)
    if "roots" in asked.asked:
        assert "file:///work/project" in _text(roots)
    else:
        assert "file:///work/project" not in _text(roots)
    assert sorted(a for a in asked.asked if a != "roots") == [
        "elicitation", "sampling: Resource trigger-sampling-request context: 2+2"]
    assert asked.asked.count("roots") <= 2


@IN_PROCESS
@pytest.mark.parametrize("listener", ["stdio", "http"])
async def test_a_2026_client_answers_the_upstreams_requests(policy: Path, listener: str) -> None:
    asked = Asked()
    async with gateway(policy, *(HTTP if listener == "http" else ())) as gw, \
            gw.client("auto", **asked.callbacks()) as client:
        assert client.protocol_version == "2026-07-28"
        sampled = await client.call_tool("trigger-sampling-request",
                                         {"prompt": "2+2", "maxTokens": 5})
        elicited = await client.call_tool("trigger-elicitation-request", {})
        roots = await client.call_tool("get-roots-list", {})
    assert not sampled.is_error and '"text": "four"' in _text(sampled)
    assert _text(elicited) == "declined"
    assert _text(roots) == "file:///work/project"
    assert asked.asked == ["sampling: Resource trigger-sampling-request context: 2+2",
                           "elicitation", "roots"]  # each once, in order


@IN_PROCESS
async def test_another_client_is_never_asked(policy: Path) -> None:
    caller, bystander_2026, bystander_2025 = Asked(), Asked(), Asked()
    async with gateway(policy, *HTTP) as gw, gw.client("auto", **bystander_2026.callbacks()) as modern, \
                gw.client("legacy", **bystander_2025.callbacks()) as legacy, \
                gw.client("auto", **caller.callbacks()) as client:
        await modern.list_tools()
        await legacy.list_tools()
        result = await client.call_tool("trigger-sampling-request", {"prompt": "mine"})
    assert "sampling: Resource trigger-sampling-request context: mine" in caller.asked
    assert '"text": "four"' in _text(result)
    assert bystander_2026.asked == [] and bystander_2025.asked == []


@IN_PROCESS
async def test_calls_of_two_clients_in_flight_are_never_guessed(policy: Path) -> None:
    """The shared upstream session does not say whose call asks: with two clients' calls in flight
    the upstream gets an error, and neither client is asked."""
    first, second = Asked(), Asked()
    upstream = anyio.Event()

    async def progressed(progress: float, total: float | None, message: str | None) -> None:
        upstream.set()  # the server reports a step of the long call: it is running there

    async with gateway(policy, *HTTP) as gw, gw.client("legacy", **first.callbacks()) as one, \
                gw.client("auto", **second.callbacks()) as two, \
                anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(
            one.call_tool, "trigger-long-running-operation", {"steps": 3},
            progress_callback=progressed))
        with anyio.fail_after(WAIT_SECONDS):
            await upstream.wait()
            result = await two.call_tool("trigger-sampling-request", {"prompt": "whose?"})
        tg.cancel_scope.cancel()  # the long call has served its purpose
    assert result.is_error
    assert not [a for a in first.asked + second.asked if a.startswith("sampling")]


@IN_PROCESS
async def test_a_retry_is_decided_again_and_bound_to_its_call(tmp_path: Path, policy: Path) -> None:
    log = tmp_path / "upstream.jsonl"
    # A sampling callback declares the capability; the raw calls below never reach it.
    async with gateway(policy, upstream="asking", log=log) as gw, \
            gw.client("auto", sampling_callback=Asked().sampling) as client:
        first = await _raw_call(client, "ask")
        state = first["requestState"]
        assert first["resultType"] == "input_required"
        [(key, request)] = first["inputRequests"].items()
        assert request["method"] == "sampling/createMessage"
        answer = {key: {"role": "assistant", "model": "m", "content": {"type": "text", "text": "5"}}}
        # The guard decides a retry like any call: `deny_me` is denied, and nothing goes upstream.
        denied = await _raw_call(client, "deny_me", state=state, responses=answer)
        assert denied["isError"] and denied["structuredContent"]["unmet"] == ["auth:claim:role:admin"]
        # A retry must name the call it continues.
        with pytest.raises(MCPError, match="Invalid or expired requestState"):
            await _raw_call(client, "ask", {"other": 1}, state=state, responses=answer)
        with pytest.raises(MCPError, match="Invalid or expired requestState"):
            await _raw_call(client, "ask", state="mcp-preconditions-gateway:guess", responses=answer)
        final = await _raw_call(client, "ask", state=state, responses=answer)
    assert final["content"] == [{"type": "text", "text": "the answer is 5"}]
    assert asking_upstream.read_log(log) == [{"asked": "answer", "text": "5"}]


@IN_PROCESS
async def test_a_client_that_never_retries_leaves_nothing_pending(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    # The call timeout bounds `ask`'s first round and `other` too, and the gateway forgets a round
    # no client retried a call timeout after its last request: short, as an answer in this
    # process takes milliseconds.
    policy.write_text(f"[gateway]\ncall_timeout_seconds = {SHORT}\n", encoding="utf-8")
    log = tmp_path / "upstream.jsonl"
    # A sampling callback declares the capability; the raw calls below never reach it.
    async with gateway(policy, upstream="asking", log=log) as gw, \
            gw.client("auto", sampling_callback=Asked().sampling) as client:
        first = await _raw_call(client, "ask")
        # The call is forgotten a call timeout after the client's last request, and the
        # gateway says so.
        await gw.logged(FORGOTTEN)
        after = await _retry_late_then_other(client, first)
        # The upstream's call is cut off at the call timeout, as any call is.
        await until(lambda: asking_upstream.read_log(log) == [{"asked": "cancelled"}],
                    f"the upstream's call was not cut off: {asking_upstream.read_log(log)}")
    assert after["content"] == [{"type": "text", "text": "other done"}]


async def _retry_late_then_other(client: Client, first: dict[str, Any]) -> dict[str, Any]:
    [key] = first["inputRequests"]
    with pytest.raises(MCPError, match="Invalid or expired requestState"):
        await _raw_call(client, "ask", state=first["requestState"],
                        responses={key: {"role": "assistant", "model": "m",
                                         "content": {"type": "text", "text": "late"}}})
    return await _raw_call(client, "other")


@IN_PROCESS
async def test_a_2026_upstreams_input_required_reaches_a_2025_client(
        tmp_path: Path, policy: Path) -> None:
    asked = Asked()
    log = tmp_path / "upstream.jsonl"
    async with gateway(policy, upstream="asking", log=log, modern_only=True) as gw, \
            gw.client("legacy", **asked.callbacks()) as client:
        assert client.protocol_version == "2025-11-25"
        result = await client.call_tool("ask", {})
    assert asked.asked == ["sampling: 2+2?"]
    assert _text(result) == "the answer is four"
    assert asking_upstream.read_log(log) == [{"asked": "answer", "text": "four", "state": "asked"}]


@IN_PROCESS
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_client_that_cannot_answer_is_never_asked(
        policy: Path, mode: Literal["legacy", "auto"]) -> None:
    """A client that declared roots only: the upstream's sampling request is refused at once, never
    put to a client that did not say it can answer it. At 2025-11-25 the tool reports the error;
    a 2026-07-28 call fails with the client's missing capability (-32021, SEP-2575's
    `requiredCapabilities`), as the conformance suite's `server-stateless` requires."""
    asked = Asked()
    async with gateway(policy) as gw, gw.client(mode, list_roots_callback=asked.roots) as client:
        if mode == "legacy":
            result = await client.call_tool("trigger-sampling-request", {"prompt": "x"})
            assert result.is_error
            assert "the calling client cannot answer sampling/createMessage" in _text(result)
        else:
            with pytest.raises(MCPError) as refused:
                await client.call_tool("trigger-sampling-request", {"prompt": "x"})
            assert refused.value.error.code == -32021
            assert refused.value.error.data == {"requiredCapabilities": {"sampling": {}}}
    assert not [a for a in asked.asked if a != "roots"]


@IN_PROCESS
async def test_a_2026_client_sees_the_upstreams_server_info(policy: Path) -> None:
    """`server/discover` names the server the client asked for (the SDK would stamp its own)."""
    async with gateway(policy) as gw, gw.client("auto") as client:
        info = client.session.server_info
    assert info is not None and info.name == NAME


async def _raw_call(client: Client, name: str, arguments: dict[str, Any] | None = None, *,
                    state: str | None = None, responses: dict[str, Any] | None = None
                    ) -> dict[str, Any]:
    """A tools/call exactly as sent and answered (the SDK client's own driver would retry)."""
    params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
    if state is not None:
        params["requestState"] = state
    if responses is not None:
        params["inputResponses"] = responses
    request = mcp_types.CallToolRequest(params=mcp_types.CallToolRequestParams.model_validate(params))
    result: dict[str, Any] = await client.session.send_request(request, RAW)
    return result

