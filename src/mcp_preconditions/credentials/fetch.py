"""HTTP to authorization servers, bounded: one request with a total timeout, a JSON answer of at most
1 MiB, no redirects followed. Every failure is a CredentialBackendError naming the address and what
went wrong; the request's form (a token, a code, a secret) never appears in one.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import httpx2

from ..auth.fetch import describe
from ..errors import CredentialBackendError
from ..tls import client_context

MAX_ANSWER_BYTES = 1 << 20


class Answer:
    """An authorization server's answer: its status and its JSON body (None when it was not JSON)."""

    __slots__ = ("body", "status")

    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.body = body


async def send(method: str, url: str, *, timeout: float, form: Mapping[str, str] | None = None,
               headers: Mapping[str, str] | None = None,
               transport: httpx2.AsyncBaseTransport | None = None) -> Answer:
    """One request to `url`, answered within `timeout` seconds (connect, headers and body)."""
    try:
        async with asyncio.timeout(timeout):
            return await _send(method, url, timeout, form, headers, transport)
    except TimeoutError:
        raise CredentialBackendError(f"{url} did not answer within {timeout:g} s") from None
    except httpx2.HTTPError as exc:
        raise CredentialBackendError(f"cannot reach {url}: {describe(exc)}") from None
    except OSError as exc:
        raise CredentialBackendError(f"cannot reach {url}: {exc.strerror or type(exc).__name__}"
                                     ) from None


async def _send(method: str, url: str, timeout: float, form: Mapping[str, str] | None,
                headers: Mapping[str, str] | None,
                transport: httpx2.AsyncBaseTransport | None) -> Answer:
    sent = {"Accept": "application/json", **(headers or {})}
    async with httpx2.AsyncClient(timeout=timeout, verify=client_context(), follow_redirects=False,
                                  transport=transport) as client, \
            client.stream(method, url, data=dict(form) if form is not None else None,
                          headers=sent) as response:
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > MAX_ANSWER_BYTES:
                raise CredentialBackendError(f"{url} sent more than {MAX_ANSWER_BYTES} bytes")
        status = response.status_code
    try:
        return Answer(status, json.loads(bytes(body)))
    except (ValueError, RecursionError):
        return Answer(status, None)
