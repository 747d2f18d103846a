"""Doubles for the credential unit tests: an authorization server answering from a script through
httpx2's MockTransport (recording every request it gets), a clock a test moves, and verified
callers. Integration tests use the real oidc-provider instead.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

import httpx2

from mcp_preconditions.principal import Identity, Principal

ISSUER = "https://idp.test"
TOKEN_ENDPOINT = f"{ISSUER}/token"


@dataclass
class Clock:
    now: float = 1_000_000.0

    def __call__(self) -> float:
        return self.now


Answer = tuple[int, Any]  # status, JSON body (bytes: sent as they are)


@dataclass
class AuthServer:
    """Answers each request with `answer(form)` (after `delay` seconds, or once `hold` is set);
    keeps what it received (`arrived`: set when a request has)."""

    answer: Callable[[dict[str, str]], Answer] = lambda form: (200, {})
    delay: float = 0.0
    requests: list[httpx2.Request] = field(default_factory=list)
    hold: asyncio.Event | None = None
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def forms(self) -> list[dict[str, str]]:
        return [dict(parse_qsl(r.content.decode())) for r in self.requests]

    def transport(self) -> httpx2.MockTransport:
        async def handle(request: httpx2.Request) -> httpx2.Response:
            await request.aread()
            self.requests.append(request)
            self.arrived.set()
            if self.hold is not None:
                await self.hold.wait()
            if self.delay:
                await asyncio.sleep(self.delay)  # a source slow by design
            status, body = self.answer(dict(parse_qsl(request.content.decode())))
            content = body if isinstance(body, bytes) else json.dumps(body).encode()
            return httpx2.Response(status, content=content,
                                   headers={"Content-Type": "application/json"})
        return httpx2.MockTransport(handle)


def exchanged(token: str = "upstream-token", expires_in: Any = 600, **extra: Any) -> dict[str, Any]:
    """A valid RFC 8693 answer."""
    return {"access_token": token, "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
            "token_type": "Bearer", "expires_in": expires_in, **extra}


def caller(subject: str = "alice", expires_at: float | None = 1_003_600.0, issuer: str = ISSUER
           ) -> Identity:
    claims: dict[str, Any] = {"iss": issuer, "sub": subject}
    if expires_at is not None:
        claims["exp"] = expires_at
    return Identity(Principal.from_claims(claims, kind="jwt"))


def basic(request: httpx2.Request) -> tuple[str, str]:
    scheme, _, value = request.headers["authorization"].partition(" ")
    assert scheme == "Basic"
    client_id, _, secret = base64.b64decode(value).decode().partition(":")
    return client_id, secret


Route = Callable[[httpx2.Request], tuple[int, Any, dict[str, str]]]


@dataclass
class Site:
    """A server and its authorization server in one double, answering by method and URL: each
    route a (status, JSON body, headers) or a function of the request giving one; anything else
    is 404. Keeps every request it got, in order."""

    routes: dict[tuple[str, str], tuple[int, Any, dict[str, str]] | Route] = field(default_factory=dict)
    requests: list[httpx2.Request] = field(default_factory=list)

    def answer(self, method: str, url: str, status: int = 200, body: Any = None,
               headers: dict[str, str] | None = None) -> None:
        self.routes[(method, url)] = (status, body, headers or {})

    @property
    def asked(self) -> list[str]:
        return [f"{r.method} {r.url}" for r in self.requests]

    def transport(self) -> httpx2.MockTransport:
        async def handle(request: httpx2.Request) -> httpx2.Response:
            await request.aread()
            self.requests.append(request)
            route = self.routes.get((request.method, str(request.url)))
            if route is None:
                return httpx2.Response(404, content=b"not here")
            status, body, headers = route(request) if callable(route) else route
            content = body if isinstance(body, bytes) else json.dumps(body).encode()
            return httpx2.Response(status, content=content,
                                   headers={"Content-Type": "application/json", **headers})
        return httpx2.MockTransport(handle)
