"""A server's request while no client call is in flight (`Downstream.ask`), in front of a stdio
client: the client is asked only what it declared it can answer. Without the capability,
`roots/list` gets the gateway's empty list (as before any client connects: never wider) and
sampling or elicitation an error naming the method; the client is sent nothing. server-filesystem
asks for roots as it starts; when the client's `initialize` came first, it used to be asked, answered
"List roots not supported", and the server logged a failure (a CI run caught it)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mcp_preconditions.gateway.callers import Downstream
from mcp_preconditions.gateway.clients import Call, Client
from mcp_preconditions.gateway.jsonrpc import METHOD_NOT_FOUND, Message, RpcError
from mcp_preconditions.gateway.rounds import Rounds


class Pipe:
    """The stdio pipe to the client: what was written to it."""

    def __init__(self) -> None:
        self.sent: list[Message] = []

    def push(self, message: Message) -> None:
        self.sent.append(message)

    @property
    def open(self) -> bool:
        return True


def connected(capabilities: dict[str, Any] | None) -> tuple[Downstream, Client, Pipe]:
    """A gateway's downstream with its stdio client, initialized with `capabilities` (None: it
    has not sent `initialize` yet)."""
    pipe = Pipe()
    client = Client(pipe, http=False)
    downstream = Downstream(Rounds(), lambda: [])
    if capabilities is not None:
        client.params = {"capabilities": capabilities}
        client.initialized = True
        downstream.seen(Call("initialize", client.params, 1, "2025-11-25", pipe, client))
    return downstream, client, pipe


ROOTS = {"roots": [{"uri": "file:///work", "name": "work"}]}


async def answered_by_the_client(downstream: Downstream, client: Client, pipe: Pipe,
                                 method: str, params: dict[str, Any]) -> dict[str, Any]:
    asking = asyncio.create_task(downstream.ask("fs", method, params, 10))
    for _ in range(100):
        if pipe.sent:
            break
        await asyncio.sleep(0)
    request = pipe.sent[-1]
    assert isinstance(request, dict) and request["method"] == method
    client.answered({"jsonrpc": "2.0", "id": request["id"], "result": ROOTS})  # its answer
    return await asking


@pytest.mark.parametrize("capabilities", [None, {}, {"sampling": {}}])
async def test_roots_from_a_client_without_them_are_the_gateways_empty_list(
        capabilities: dict[str, Any] | None) -> None:
    downstream, _client, pipe = connected(capabilities)
    assert await downstream.ask("fs", "roots/list", {}, 10) == {"roots": []}
    assert pipe.sent == []  # never asked


@pytest.mark.parametrize(("method", "params"), [
    ("sampling/createMessage", {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
                                "maxTokens": 10}),
    ("elicitation/create", {"message": "Which?", "requestedSchema": {"type": "object", "properties": {}}}),
])
async def test_a_client_that_cannot_answer_is_not_asked_and_the_server_told_why(
        method: str, params: dict[str, Any]) -> None:
    downstream, _client, pipe = connected({"roots": {}})
    with pytest.raises(RpcError) as refused:
        await downstream.ask("fs", method, params, 10)
    assert refused.value.code == METHOD_NOT_FOUND
    assert method in refused.value.message
    assert pipe.sent == []


async def test_a_client_that_declared_roots_is_asked_and_its_answer_passed_on() -> None:
    downstream, client, pipe = connected({"roots": {"listChanged": True}})
    assert await answered_by_the_client(downstream, client, pipe, "roots/list", {}) == ROOTS
