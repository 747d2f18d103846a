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
    """An authorization server's answer: its status, its JSON body (None when it was not JSON) and
    its `WWW-Authenticate` challenge, if any (a server's refusal: challenge.py reads it)."""

    __slots__ = ("body", "challenge", "status")

    def __init__(self, status: int, body: Any, challenge: str | None = None) -> None:
        self.status = status
        self.body = body
        self.challenge = challenge


async def send(method: str, url: str, *, timeout: float, form: Mapping[str, str] | None = None,
               headers: Mapping[str, str] | None = None, json_body: Any = None,
               transport: httpx2.AsyncBaseTransport | None = None) -> Answer:
    """One request to `url`, answered within `timeout` seconds (connect, headers and body): a
    `form`, or a `json_body`, or nothing."""
    try:
        async with asyncio.timeout(timeout):
            return await _send(method, url, timeout, form, headers, json_body, transport)
    except TimeoutError:
        raise CredentialBackendError(f"{url} did not answer within {timeout:g} s") from None
    except httpx2.HTTPError as exc:
        raise CredentialBackendError(f"cannot reach {url}: {describe(exc)}") from None
    except OSError as exc:
        raise CredentialBackendError(f"cannot reach {url}: {exc.strerror or type(exc).__name__}"
                                     ) from None


async def _send(method: str, url: str, timeout: float, form: Mapping[str, str] | None,
                headers: Mapping[str, str] | None, json_body: Any,
                transport: httpx2.AsyncBaseTransport | None) -> Answer:
    sent = {"Accept": "application/json", **(headers or {})}
    async with httpx2.AsyncClient(timeout=timeout, verify=client_context(), follow_redirects=False,
                                  transport=transport) as client, \
            client.stream(method, url, data=dict(form) if form is not None else None,
                          json=json_body, headers=sent) as response:
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > MAX_ANSWER_BYTES:
                raise CredentialBackendError(f"{url} sent more than {MAX_ANSWER_BYTES} bytes")
        status = response.status_code
        challenge = response.headers.get("www-authenticate")
    try:
        return Answer(status, json.loads(bytes(body)), challenge)
    except (ValueError, RecursionError):
        return Answer(status, None, challenge)
