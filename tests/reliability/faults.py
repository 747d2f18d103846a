"""Fault injection for the reliability matrix: a stand-in for any built-in resolver, failing live
sources and authenticators, and a loopback JWKS server that answers, hangs or sends garbage.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

import mcp_preconditions.snapshot as snapshot_module
from mcp_preconditions import CallContext, Credentials, Identity, Outcome
from mcp_preconditions.namespaces import build_registry
from mcp_preconditions.resolvers import Registry

FAULTS = ("raises", "times out", "backend down", "returns garbage")
GARBAGE: tuple[Any, ...] = ("yes", None, 1, {"ok": True}, Outcome.satisfied("other:thing", "forged"))
HANG_SECONDS = 30.0  # far beyond any lookup timeout of the matrix


class Substitute:
    """Stands in for a built-in resolver: the same namespace, forms and validation, but every
    decision fails the chosen way. `at_compile` makes the snapshot's pre-decision fail instead."""

    def __init__(self, inner: Any, fault: str, garbage: Any = None, at_compile: bool = False) -> None:
        self.namespace = inner.namespace
        self.forms = getattr(inner, "forms", ())
        self._inner = inner
        self.fault = fault
        self.garbage = garbage
        self.at_compile = at_compile

    def validate(self, requirement: str) -> str | None:
        result: str | None = self._inner.validate(requirement)
        return result

    def static_outcome(self, requirement: str) -> Outcome | None:
        if self.at_compile:
            raise RuntimeError("injected fault while pre-deciding")
        return None

    def resolve(self, requirement: str, context: CallContext) -> Any:
        if self.fault == "raises":
            raise RuntimeError("injected fault")
        if self.fault == "returns garbage":
            return self.garbage
        return self._slow_or_down()

    async def _slow_or_down(self) -> Any:
        if self.fault == "times out":
            await asyncio.sleep(HANG_SECONDS)  # a backend that hangs
        raise ConnectionRefusedError(111, "Connection refused")


def substitute(monkeypatch: pytest.MonkeyPatch, namespace: str,
               make: Callable[[Any], Any]) -> None:
    """Build every snapshot's registry with `make(built_in)` in place of `namespace`'s resolver.

    The registry refuses two resolvers for one namespace (as it should), so the substitution
    happens where the snapshot builds it, through the registry's public constructor."""
    real = build_registry

    def build(*args: Any, **kwargs: Any) -> Registry:
        registry = real(*args, **kwargs)
        return Registry([make(r) if r.namespace == namespace else r for r in registry])

    monkeypatch.setattr(snapshot_module, "build_registry", build)


class FailingSource:
    """A StateSource and FlagSource at once (`get` / `evaluate`), failing the chosen way."""

    name = "faulty"

    def __init__(self, fault: str, garbage: Any = "true") -> None:
        self.fault = fault
        self.garbage = garbage

    async def _fail(self) -> Any:
        if self.fault == "raises":
            raise RuntimeError("injected fault")
        if self.fault == "times out":
            await asyncio.sleep(HANG_SECONDS)  # a backend that hangs
        if self.fault == "backend down":
            raise ConnectionRefusedError(111, "Connection refused")
        return self.garbage

    async def get(self, key: str) -> Any:
        return await self._fail()

    async def evaluate(self, key: str, context: Any) -> Any:
        return await self._fail()


class HealthySource:
    """The same sources, answering `True` for every key: the matrix's control."""

    name = "healthy"

    async def get(self, key: str) -> bool:
        return True

    async def evaluate(self, key: str, context: Any) -> bool:
        return True


class FailingAuthenticator:
    """An Authenticator that raises, or returns something that is not an Identity."""

    def __init__(self, result: Any = None) -> None:
        self.result = result

    async def authenticate(self, credentials: Credentials) -> Identity:
        if self.result is None:
            raise RuntimeError("injected authenticator fault")
        return self.result  # type: ignore[no-any-return]


# -- a real token and a loopback JWKS endpoint ---------------------------------------------------
ISSUER = "https://issuer.test"
AUDIENCE = "urn:mcp:reliability"
_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def jwks() -> dict[str, Any]:
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(_KEY.public_key()))
    return {"keys": [{**public, "kid": "k1", "use": "sig", "alg": "RS256"}]}


def token(**claims: Any) -> str:
    now = int(time.time())
    body = {"iss": ISSUER, "aud": AUDIENCE, "iat": now, "nbf": now, "exp": now + 600, **claims}
    return jwt.encode(body, _KEY, algorithm="RS256", headers={"kid": "k1", "typ": "at+jwt"})


class _Handler(BaseHTTPRequestHandler):
    routes: ClassVar[dict[str, tuple[str, bytes]]] = {
        "/jwks": ("application/json", json.dumps(jwks()).encode()),
        "/not-json": ("application/json", b"<html>gateway error</html>"),
        "/no-keys": ("application/json", b'{"keys": "rotate later"}'),
    }

    def do_GET(self) -> None:
        kind, body = self.routes.get(self.path, ("text/plain", b"not found"))
        self.send_response(200 if self.path in self.routes else 404)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return None


@contextlib.contextmanager
def jwks_server() -> Iterator[str]:
    """A loopback HTTP server for the JWKS routes; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def black_hole() -> Iterator[str]:
    """A port that completes TCP handshakes (the kernel's backlog) but never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


def closed_port() -> int:
    """A loopback port with nothing listening (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port
