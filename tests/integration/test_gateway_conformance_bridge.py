"""What the conformance suite's 2026-07-28 server scenarios ask of the gateway in front of a 2025-11-25
server, checked one by one in process (a `Gateway` object served on 127.0.0.1, the faithful
conformance server of tests/fixtures/conformance_server.py behind it over streamable HTTP, served in
the same event loop; raw 2026-07-28 requests): input rounds keyed by what the server asks, every
question out at once in one round, a state per round that serves its caller alone and refuses
tampering, a first call that carries its answers, "resource not found" as 2026-07-28 says it,
header values read without their optional whitespace, and a call that needs a capability the client
never declared.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest
import uvicorn
from mcp import Client
from mcp.shared.exceptions import MCPError

from mcp_preconditions.gateway import Gateway, ServerSpec
from mcp_preconditions.guard import Guard
from mcp_preconditions.policy.load import parse_policy
from mcp_preconditions.principal import ANONYMOUS, Credentials, Principal
from tests.fixtures import conformance_server
from tests.fixtures.inprocess import served

pytestmark = pytest.mark.integration

VERSION = "2026-07-28"
ALL: dict[str, Any] = {"sampling": {}, "elicitation": {}, "roots": {}}
ALICE = Credentials(principal=Principal.from_claims({"iss": "https://idp", "sub": "alice"}))
BOB = Credentials(principal=Principal.from_claims({"iss": "https://idp", "sub": "bob"}))
NAMED = {"action": "accept", "content": {"name": "Alice"}}
REPLY = {"role": "assistant", "model": "m", "content": {"type": "text", "text": "Hello"},
         "stopReason": "endTurn"}
ROOTS = {"roots": [{"uri": "file:///test/root", "name": "Test Root"}]}
INVALID_STATE = "Invalid or expired requestState"


@dataclass
class Answer:
    status: int
    message: dict[str, Any]

    @property
    def result(self) -> dict[str, Any]:
        assert "result" in self.message, self.message
        found: dict[str, Any] = self.message["result"]
        return found

    @property
    def error(self) -> dict[str, Any]:
        assert "error" in self.message, self.message
        found: dict[str, Any] = self.message["error"]
        return found


@dataclass
class Bridge:
    http: httpx.AsyncClient
    url: str
    caller: list[Credentials]

    async def post(self, method: str, params: dict[str, Any], *, caps: dict[str, Any] = ALL,
                   headers: dict[str, str] | None = None) -> Answer:
        """One 2026-07-28 request, its headers as a conforming client sends them unless given."""
        name = params.get("name", params.get("uri"))
        sent = {"mcp-protocol-version": VERSION, "mcp-method": method,
                **({"mcp-name": name} if isinstance(name, str) else {}), **(headers or {})}
        meta = {"io.modelcontextprotocol/protocolVersion": VERSION,
                "io.modelcontextprotocol/clientCapabilities": caps}
        response = await self.http.post(self.url, headers=sent, json={
            "jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}})
        body = response.text
        if response.headers["content-type"].startswith("text/event-stream"):
            body = [line[5:] for line in body.splitlines() if line.startswith("data:")][-1]
        return Answer(response.status_code, json.loads(body))

    async def call(self, tool: str, **params: Any) -> Answer:
        caps = params.pop("caps", ALL)
        return await self.post("tools/call", {"name": tool, "arguments": {}, **params}, caps=caps)


@asynccontextmanager
async def asgi_served(app: Any) -> AsyncIterator[str]:
    """Serve `app` on a free port of 127.0.0.1 in this event loop until the block ends (as
    tests/fixtures/inprocess.py's `asgi_served` on main); yields its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            with anyio.fail_after(10):
                while not server.started:  # uvicorn has no event for it
                    await anyio.sleep(0.005)
            yield f"http://127.0.0.1:{sock.getsockname()[1]}"
            server.should_exit = server.force_exit = True
    finally:
        sock.close()


@asynccontextmanager
async def bridge() -> AsyncIterator[Bridge]:
    caller = [ALICE]
    guard = Guard(parse_policy(b"# every tool open\n", "gateway.toml"))
    async with asgi_served(conformance_server.http_app()) as upstream:
        spec = ServerSpec("conformance", "", url=upstream + "/mcp")
        gateway = Gateway(guard, [spec], lambda _call: caller[0])
        async with bridged(gateway, caller) as ready:
            yield ready


@asynccontextmanager
async def bridged(gateway: Gateway, caller: list[Credentials]) -> AsyncIterator[Bridge]:
    async with served(gateway) as url, httpx.AsyncClient(timeout=10, headers={
            "accept": "application/json, text/event-stream"}) as http:
        ready = Bridge(http, url, caller)
        assert (await ready.post("tools/list", {})).status == 200  # (waits for the server)
        yield ready


def keys(answer: Answer) -> dict[str, str]:
    result = answer.result
    assert result["resultType"] == "input_required", result
    return {key: ask["method"] for key, ask in result["inputRequests"].items()}


def texts(answer: Answer) -> str:
    result = answer.result
    assert result.get("resultType") == "complete" and not result.get("isError"), result
    return "".join(c["text"] for c in result["content"])


async def test_three_questions_out_at_once_are_one_round_keyed_by_what_they_ask() -> None:
    async with bridge() as b:
        first = await b.call("test_input_required_result_multiple_inputs")
        assert keys(first) == {"user_name": "elicitation/create", "model_reply": "sampling/createMessage",
                               "client_roots": "roots/list"}
        done = await b.call("test_input_required_result_multiple_inputs",
                            requestState=first.result["requestState"],
                            inputResponses={"user_name": NAMED, "model_reply": REPLY,
                                            "client_roots": ROOTS})
    assert texts(done) == "Name: Alice; Greeting: Hello; Roots: 1"


async def test_each_round_has_a_state_of_its_own() -> None:
    async with bridge() as b:
        first = await b.call("test_input_required_result_multi_round")
        assert keys(first) == {"user_name": "elicitation/create"}
        second = await b.call("test_input_required_result_multi_round",
                              requestState=first.result["requestState"],
                              inputResponses={"user_name": NAMED})
        assert keys(second) == {"user_color": "elicitation/create"}
        assert second.result["requestState"] != first.result["requestState"]
        stale = await b.call("test_input_required_result_multi_round",
                             requestState=first.result["requestState"],
                             inputResponses={"user_color": {"action": "accept",
                                                            "content": {"color": "red"}}})
        assert (stale.status, stale.error["message"]) == (400, INVALID_STATE)
        done = await b.call("test_input_required_result_multi_round",
                            requestState=second.result["requestState"],
                            inputResponses={"user_color": {"action": "accept",
                                                           "content": {"color": "blue"}}})
    assert texts(done) == "Multi-round complete for Alice who likes blue"


@pytest.mark.parametrize("tamper", [lambda s: s + "-TAMPERED", lambda s: s.replace(".", ".x", 1),
                                    lambda s: s[::-1]])
async def test_a_tampered_state_is_refused(tamper: Callable[[str], str]) -> None:
    async with bridge() as b:
        first = await b.call("test_input_required_result_tampered_state")
        state = first.result["requestState"]
        answer = {"user_ok": {"action": "accept", "content": {"ok": True}}}
        assert keys(first) == {"user_ok": "elicitation/create"}
        refused = await b.call("test_input_required_result_tampered_state",
                               requestState=tamper(state), inputResponses=answer)
        assert refused.status == 400
        assert refused.error == {"code": -32602, "message": INVALID_STATE,
                                 "data": {"reason": "invalid_request_state"}}
        done = await b.call("test_input_required_result_tampered_state", requestState=state,
                            inputResponses=answer)
    assert texts(done) == "integrity-ok: state verified"


async def test_one_persons_state_never_serves_another() -> None:
    async with bridge() as b:
        first = await b.call("test_input_required_result_elicitation")
        state = first.result["requestState"]
        b.caller[0] = BOB
        replayed = await b.call("test_input_required_result_elicitation", requestState=state,
                                inputResponses={"user_name": {"action": "accept",
                                                              "content": {"name": "Mallory"}}})
        assert (replayed.status, replayed.error["message"]) == (400, INVALID_STATE)
        b.caller[0] = ANONYMOUS
        anonymous = await b.call("test_input_required_result_elicitation", requestState=state,
                                 inputResponses={"user_name": NAMED})
        assert anonymous.error["message"] == INVALID_STATE
        b.caller[0] = ALICE
        done = await b.call("test_input_required_result_elicitation", requestState=state,
                            inputResponses={"user_name": NAMED})
    assert texts(done) == "Hello, Alice!"


async def test_a_first_call_may_carry_its_answers() -> None:
    """The suite's `ignore-extra-params`: a call without a state whose answers name what the
    server asks by its key completes in one request; keys nobody asks are ignored (fails on the old
    code, which dropped them). An answer that is no answer at all is refused as the schema says."""
    async with bridge() as b:
        done = await b.call("test_input_required_result_elicitation", inputResponses={
            "user_name": NAMED, "unknown_extra_key": {"action": "accept", "content": {"foo": "bar"}}})
        assert texts(done) == "Hello, Alice!"
        invalid = await b.call("test_input_required_result_elicitation",
                               inputResponses={"user_name": 12345})
    assert (invalid.status, invalid.error["code"]) == (400, -32602)


async def test_a_prompt_asks_in_rounds_too() -> None:
    async with bridge() as b:
        first = await b.post("prompts/get", {"name": "test_input_required_result_prompt"})
        assert keys(first) == {"user_context": "elicitation/create"}
        done = await b.post("prompts/get", {
            "name": "test_input_required_result_prompt", "requestState": first.result["requestState"],
            "inputResponses": {"user_context": {"action": "accept", "content": {"context": "tests"}}}})
    assert done.result["messages"][0]["content"]["text"] == "Prompt with context: tests"


async def test_a_missing_resource_is_minus_32602_at_2026_and_minus_32002_at_2025() -> None:
    uri = "test://nonexistent-resource-for-conformance-testing"
    async with bridge() as b:
        modern = await b.post("resources/read", {"uri": uri})
        async with Client(b.url, mode="legacy") as legacy:
            with pytest.raises(MCPError) as handshake_era:
                await legacy.read_resource(uri)
    assert modern.status == 400
    assert modern.error == {"code": -32602, "message": "Resource not found", "data": {"uri": uri}}
    assert handshake_era.value.error.code == -32002


async def raw_call(url: str, tool: str, arguments: dict[str, Any], headers: dict[str, str]) -> Answer:
    """A 2026-07-28 `tools/call` written byte by byte (HTTP clients refuse to send a header value
    with whitespace around it; the conformance suite's does)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": tool, "arguments": arguments, "_meta": {
            "io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientCapabilities": {}}}}).encode()
    host, port = url.removeprefix("http://").removesuffix("/mcp").split(":")
    lines = [b"POST /mcp HTTP/1.1", f"host: {host}:{port}".encode(), b"connection: close",
             b"accept: application/json, text/event-stream", b"content-type: application/json",
             f"content-length: {len(body)}".encode(),
             *(f"{name}:{value}".encode() for name, value in headers.items())]
    async with await anyio.connect_tcp(host, int(port)) as stream:
        await stream.send(b"\r\n".join(lines) + b"\r\n\r\n" + body)
        response = b""
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
            while True:
                response += await stream.receive()
    head, _, payload = response.partition(b"\r\n\r\n")
    text = payload.decode()
    if b"text/event-stream" in head:
        text = [line[5:] for line in text.splitlines() if line.startswith("data:")][-1]
    return Answer(int(head.split()[1]), json.loads(text))


async def test_header_values_are_read_without_their_optional_whitespace() -> None:
    """RFC 9110 §5.5 (the suite's `sep-2243-server-accepts-whitespace-header-value`): fails on the
    old code, which compared ` test_simple_text ` with the tool's name."""
    standard = {"mcp-protocol-version": f" {VERSION}", "mcp-method": "\ttools/call "}
    async with bridge() as b:
        spaced = await raw_call(b.url, "test_simple_text", {},
                                {**standard, "mcp-name": " \ttest_simple_text \t"})
        assert texts(spaced) == "This is a simple text response for testing."
        param = await raw_call(b.url, "test_header_param", {"region": "eu"},
                               {**standard, "mcp-name": "test_header_param", "mcp-param-region": "  eu "})
        assert texts(param) == "region=eu"
        wrong = await raw_call(b.url, "test_simple_text", {},
                               {**standard, "mcp-name": " test_image_content "})
        assert (wrong.status, wrong.error["code"]) == (400, -32020)
        inner = await raw_call(b.url, "test_simple_text", {},
                               {**standard, "mcp-name": "test_simple _text"})
        assert (inner.status, inner.error["code"]) == (400, -32020)


async def test_a_tool_that_needs_an_undeclared_capability_is_minus_32021() -> None:
    """The suite's `server-stateless` (SEP-2575): the server's sampling request for a client that
    declared no sampling is refused to the server and noted by the pending call, whose failure is
    then the client's missing capability (fails on the old code, where callers.py refused the
    question itself before the pending call could note it, and the tool's error was passed on)."""
    async with bridge() as b:
        refused = await b.call("test_missing_capability", caps={})
    assert refused.status == 400
    assert refused.error["code"] == -32021
    assert refused.error["data"] == {"requiredCapabilities": {"sampling": {}}}
