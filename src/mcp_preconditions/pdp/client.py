"""The HTTP side of the enforcement point: one decision point's endpoint (its `url` and `token`),
asked for a batch of evaluations in one `POST /access/v1/evaluations`, or one `POST
/access/v1/evaluation` each when its metadata announces no batch endpoint. Answers are read
strictly (pdp/wire.py): another status, a body over 1 MiB, malformed JSON, a missing boolean
`decision` or a timeout is a `DecisionPointError` for every evaluation of the request (fail
closed). The token is sent only to this endpoint and appears in no message.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import httpx2

from ..auth.fetch import describe
from ..errors import DecisionPointError, Malformed
from ..tls import client_context
from .wire import (
    EVALUATION_PATH,
    EVALUATIONS_PATH,
    METADATA_PATH,
    AccessDecision,
    decision_of,
    decisions_of,
    metadata_of,
)

MAX_ANSWER_BYTES = 1 << 20


class Endpoint:
    """One decision point as a set of tables reaches it (same `url`, same token): their batches."""

    def __init__(self, url: str, token: str | None, timeout: float,
                 transport: httpx2.AsyncBaseTransport | None = None) -> None:
        self.url = url
        self._headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self.timeout = timeout
        self._transport = transport
        self.batches: bool | None = None  # from the metadata, once read (None: not yet)
        # One client per event loop (its pooled connections belong to that loop).
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx2.AsyncClient] = \
            weakref.WeakKeyDictionary()

    def __repr__(self) -> str:  # never the token
        return f"Endpoint({self.url!r})"

    async def decide(self, items: Sequence[Mapping[str, Any]]) -> tuple[AccessDecision, ...]:
        """One decision per item, in order; DecisionPointError when there is none to be had."""
        try:
            async with asyncio.timeout(self.timeout):
                return await self._decide(items)
        except TimeoutError:
            raise DecisionPointError(f"the decision point {self.url} did not answer within "
                                     f"{self.timeout:g} s") from None
        except httpx2.HTTPError as exc:
            raise DecisionPointError(f"cannot reach the decision point {self.url}: "
                                     f"{describe(exc)}") from None
        except OSError as exc:
            raise DecisionPointError(f"cannot reach the decision point {self.url}: "
                                     f"{exc.strerror or type(exc).__name__}") from None

    async def _decide(self, items: Sequence[Mapping[str, Any]]) -> tuple[AccessDecision, ...]:
        if self.batches is None:
            self.batches = await self._announces_batches()
        if self.batches:
            body = await self._post(EVALUATIONS_PATH, {"evaluations": list(items)})
            return _read(body, len(items))
        found: list[AccessDecision] = []
        for item in items:  # no batch endpoint: one evaluation each (AuthZEN 1.0 §7)
            found.extend(_read(await self._post(EVALUATION_PATH, item), None))
        return tuple(found)

    async def _announces_batches(self) -> bool:
        """Whether the metadata announces a batch endpoint. A decision point without metadata (404,
        not JSON) is taken to serve the batch path, which then answers for itself."""
        status, body = await self._send("GET", METADATA_PATH, None)
        if status != 200:
            return True
        try:
            return metadata_of(body).access_evaluations_endpoint is not None
        except Malformed:
            return True

    async def _post(self, path: str, payload: Mapping[str, Any]) -> Any:
        status, body = await self._send("POST", path, json.dumps(payload).encode())
        if status != 200:
            raise DecisionPointError(f"the decision point {self.url} answered {status} to {path}")
        if body is _NOT_JSON:
            raise DecisionPointError(f"the decision point {self.url} answered {path} with a body "
                                     "that is not JSON")
        return body

    async def _send(self, method: str, path: str, content: bytes | None) -> tuple[int, Any]:
        client = self._client()
        async with client.stream(method, self.url + path, content=content,
                                 headers=self._headers) as response:
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_ANSWER_BYTES:
                    raise DecisionPointError(f"the decision point {self.url} sent more than "
                                             f"{MAX_ANSWER_BYTES} bytes")
            status = response.status_code
        try:
            return status, json.loads(bytes(body))
        except (ValueError, RecursionError):
            return status, _NOT_JSON

    def _client(self) -> httpx2.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = self._clients[loop] = httpx2.AsyncClient(
                timeout=self.timeout, verify=client_context(), follow_redirects=False,
                transport=self._transport)
        return client

    async def aclose(self) -> None:
        """Close this loop's client (a gateway's shutdown, a test's end)."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()


_NOT_JSON = object()


def _read(body: Any, asked: int | None) -> tuple[AccessDecision, ...]:
    """A batch's decisions (`asked` of them), or an evaluation's one (None)."""
    try:
        return decisions_of(body, asked) if asked is not None else (decision_of(body),)
    except Malformed as exc:
        raise DecisionPointError(f"the decision point's answer is malformed: {exc}") from None
