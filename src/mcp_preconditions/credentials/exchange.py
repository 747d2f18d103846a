"""`kind = "token-exchange"`: the caller's verified bearer token exchanged (RFC 8693) at the
configured token endpoint for a token issued for the server (its `audience` / `resource`), cached
until the earlier of both tokens' expiry, less 30 s.

The caller's own token goes nowhere else: only here, as `subject_token`, to that endpoint. An answer
without `access_token`, an `issued_token_type` of an access token or JWT, `token_type` Bearer and a
positive `expires_in` is garbage (`error`), never a credential.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx2

from ..errors import CredentialBackendError, NoCredentialError
from ..principal import Identity, Principal
from .cache import ExchangeCache
from .caller import known_caller
from .credential import Credential
from .endpoint import TokenEndpoint, bearer_of
from .settings import TOKEN_EXCHANGE, TokenExchangeSettings

GRANT_TYPE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
JWT_TYPE = "urn:ietf:params:oauth:token-type:jwt"
ISSUED_TYPES = frozenset({ACCESS_TOKEN_TYPE, JWT_TYPE})
MARGIN_SECONDS = 30.0  # a cached token is given up this long before either token expires


class TokenExchange:
    """Obtains one server's credentials by token exchange, through a cache shared by servers."""

    kind = TOKEN_EXCHANGE

    def __init__(self, server: str, settings: TokenExchangeSettings, cache: ExchangeCache, *,
                 clock: Callable[[], float] = time.time,
                 transport: httpx2.AsyncBaseTransport | None = None) -> None:
        self.server = server
        self.settings = settings
        self.cache = cache
        self._clock = clock
        self._endpoint = TokenEndpoint(settings.token_endpoint, settings.client,
                                       settings.timeout_seconds, transport=transport)

    async def obtain(self, principal: Principal | None, token: str | None) -> tuple[Credential, bool]:
        """This caller's credential and whether it came from the cache (no request made for this
        call); NoCredentialError when there is none to be had, CredentialBackendError when the
        authorization server fails."""
        token, expires_at = _subject(principal, token)
        assert principal is not None  # (`_subject`)
        key = (self.cache.keys.key(principal, token), self.server)
        found = self.cache.get(key)
        if found is not None:
            return found, True
        credential, led = await self.cache.once(key, lambda: self._exchange(token, expires_at))
        return credential, not led

    def cached(self, identity: Identity, token: str | None) -> Credential | None:
        """The caller's credential when the cache holds it (within both tokens' expiry), at once;
        None when `obtain` must be awaited (an exchange to make, or none to be had: it says why)."""
        return self.cache.current(self.server, identity, token)

    async def renew(self, principal: Principal | None, token: str | None, stale: Credential,
                    challenge: str | None = None) -> tuple[Credential, bool]:
        """After the server refused `stale` (401/403): forget it and exchange once more."""
        subject, _ = _subject(principal, token)
        assert principal is not None  # (`_subject`)
        self.cache.drop((self.cache.keys.key(principal, subject), self.server), stale)
        return await self.obtain(principal, token)

    def form(self, token: str) -> dict[str, str]:
        """The RFC 8693 §2.1 request."""
        settings = self.settings
        form = {"grant_type": GRANT_TYPE, "subject_token": token,
                "subject_token_type": ACCESS_TOKEN_TYPE, "requested_token_type": ACCESS_TOKEN_TYPE}
        if settings.audience is not None:
            form["audience"] = settings.audience
        if settings.resource is not None:
            form["resource"] = settings.resource
        if settings.scope:
            form["scope"] = " ".join(settings.scope)
        return form

    async def _exchange(self, token: str, subject_expires_at: float | None
                        ) -> tuple[Credential, float]:
        # A refusal or a failure raises: the resolver logs it with its reason (resolver._settle).
        answer = await self._endpoint.request(self.form(token))
        access_token, expires_in = issued(answer, self._endpoint.url)
        now = self._clock()
        expires_at = now + expires_in
        deadline = min(expires_at, subject_expires_at or expires_at) - MARGIN_SECONDS
        return Credential.bearer(access_token, self.kind, expires_at), deadline


def _subject(principal: Principal | None, token: str | None) -> tuple[str, float | None]:
    """The token to exchange and when it expires: only a verified caller's own bearer token, of a
    token that names its subject (SPEC §14: no `sub`, no subject, no credential)."""
    if principal is None:
        raise NoCredentialError("the caller is not verified (no valid access token)")
    known_caller(principal)
    if token is None:
        raise NoCredentialError("the caller presented no access token to exchange")
    return token, principal.expires_at


def issued(answer: dict[str, Any], where: str) -> tuple[str, int]:
    """The access token and its lifetime from an RFC 8693 §2.2.1 answer; garbage raises."""
    if answer.get("issued_token_type") not in ISSUED_TYPES:
        raise CredentialBackendError(f"token endpoint {where} answered without an issued_token_type "
                                     "of an access token or a JWT")
    access_token, expires_in = bearer_of(answer, where, expiry_required=True)
    assert expires_in is not None
    return access_token, expires_in
