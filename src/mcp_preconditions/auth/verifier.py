"""TokenAuthenticator: one bearer token in, one Identity out. A JWT-shaped token is verified locally
(when keys are configured), anything else is introspected; successes are cached by token hash until
min(TTL, `exp`).

Never raises for a bad token or a backend failure: those become an Identity with a readable failure
(and `error=True` for a backend), logged at WARNING with that reason (SPEC §15: the operator sees
why a token was refused; `gateway --log-level`). The token never appears in a reason or a log line.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable

from ..errors import AuthBackendError, TokenError
from ..principal import ANONYMOUS_IDENTITY, Credentials, Identity, Principal, verified_identity
from .base import refused
from .cache import IdentityCache, token_key
from .header import MalformedCredentials
from .introspection import Introspector
from .jwt_verifier import JwtVerifier, jwt_header

NO_JWT_KEYS = ("token is a JWT, but the policy configures no signing keys "
               "(auth.jwks_uri, auth.discovery, auth.keys or auth.public_keys_pem)")
NO_INTROSPECTION = ("token is not a JWT, and the policy configures no introspection endpoint "
                    "(auth.introspection)")


class TokenAuthenticator:
    """Verifies bearer tokens; accepts principals the host already verified (MCP SDK, fastmcp)."""

    def __init__(self, *, jwt_verifier: JwtVerifier | None = None,
                 introspector: Introspector | None = None, max_token_bytes: int = 16384,
                 cache: IdentityCache | None = None) -> None:
        self.jwt = jwt_verifier
        self.introspector = introspector
        self.max_token_bytes = max_token_bytes
        self.cache = cache if cache is not None else IdentityCache(0, 0)
        self._inflight: dict[bytes, asyncio.Task[Identity]] = {}
        self._lock = threading.Lock()

    def authenticate_now(self, credentials: Credentials) -> Identity | None:
        """The Identity when no verification has to run (a principal the host verified, no token,
        an oversized token, a cached token), else None: then `authenticate` verifies."""
        if credentials.principal is not None:
            return verified_identity(credentials.principal)
        token = credentials.token
        if token is None:
            if isinstance(credentials, MalformedCredentials):
                return refused(Identity(failure=credentials.failure))
            return ANONYMOUS_IDENTITY
        if len(token) > self.max_token_bytes or (
                not token.isascii() and len(token.encode("utf-8", "surrogatepass")) > self.max_token_bytes):
            return refused(Identity(failure=f"token is larger than {self.max_token_bytes} bytes"))
        return self.cache.get(token_key(token))

    async def authenticate(self, credentials: Credentials) -> Identity:
        known = self.authenticate_now(credentials)
        if known is not None:
            return known
        token = credentials.token
        if token is None:  # unreachable: authenticate_now answers every token-less call
            return ANONYMOUS_IDENTITY
        key = token_key(token)
        header = jwt_header(token)
        if header is not None and self.jwt is not None:
            return await self._settle(key, self.jwt.verify(token, header))
        if self.introspector is not None:  # opaque, or a JWT for an introspection-only policy
            return await self._coalesced(key, token, self.introspector)
        return refused(Identity(failure=NO_JWT_KEYS if header is not None else NO_INTROSPECTION))

    async def _settle(self, key: bytes, verification: Awaitable[Principal]) -> Identity:
        """Await a verification and turn its outcome into an Identity, caching successes."""
        try:
            principal = await verification
        except TokenError as exc:
            return refused(Identity(failure=str(exc)))
        except AuthBackendError as exc:
            return refused(Identity(failure=str(exc), error=True))
        # Keyed by this token's sha256, which it is found by: it serves this token alone.
        identity = Identity(principal=principal, token_key=key)
        self.cache.put(key, identity, principal.expires_at)
        return identity

    async def _coalesced(self, key: bytes, token: str, introspector: Introspector) -> Identity:
        """Introspect once for concurrent first sightings of one token on one event loop."""
        loop = asyncio.get_running_loop()
        with self._lock:
            task = self._inflight.get(key)
            if task is None or task.get_loop() is not loop:
                task = loop.create_task(self._settle(key, introspector.introspect(token)))
                self._inflight[key] = task
                task.add_done_callback(self._forget(key))
        return await asyncio.shield(task)  # one caller's cancellation must not cancel the others'

    def _forget(self, key: bytes) -> Callable[[asyncio.Task[Identity]], None]:
        def done(task: asyncio.Task[Identity]) -> None:
            with self._lock:
                if self._inflight.get(key) is task:
                    del self._inflight[key]
        return done

