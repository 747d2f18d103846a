"""Opaque access tokens: RFC 7662 introspection with authlib's async OAuth 2.0 client.

The client authenticates with `client_secret_basic`, its id and secret read from the environment
variables the policy names. `active: false` is a bad token; an endpoint that is down, slow, or answers
garbage is a backend error (the call fails closed). An answer without `iss` takes the configured
issuer (`[auth] issuer`), so a person is the same caller whatever form their token takes.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

from ..errors import AuthBackendError, TokenError
from ..policy.model import Introspection
from ..principal import Principal
from ..tls import client_context
from .claims import check_audience, check_issuer, check_times
from .fetch import describe


class Introspector:
    """Asks the authorization server whether an opaque token is active, and whose it is."""

    def __init__(self, settings: Introspection, *, issuer: str | None = None,
                 audiences: Collection[str] = (), leeway: float = 30.0,
                 clock: Callable[[], float] = time.time,
                 environ: Mapping[str, str] | None = None) -> None:
        self.endpoint = settings.endpoint
        self._id_env = settings.client_id_env
        self._secret_env = settings.client_secret_env
        self._timeout = settings.timeout_seconds
        self._issuer = issuer
        self._audiences = frozenset(audiences)
        self._leeway = leeway
        self._clock = clock
        self._environ = environ if environ is not None else os.environ

    def missing_credentials(self) -> list[str]:
        """The policy-named environment variables that are not set (or empty)."""
        return [name for name in (self._id_env, self._secret_env) if not self._environ.get(name)]

    async def introspect(self, token: str) -> Principal:
        """The principal of an active token; TokenError if inactive or not for us, AuthBackendError
        when the endpoint cannot answer (or our client credentials are missing)."""
        missing = self.missing_credentials()
        if missing:
            raise AuthBackendError("token introspection is not configured: environment variable(s) "
                                   f"{', '.join(missing)} not set (auth.introspection)")
        document = await self._ask(token, self._environ[self._id_env],
                                   self._environ[self._secret_env])
        return self.principal_from(document)

    async def _ask(self, token: str, client_id: str, client_secret: str) -> Any:
        # Imported on first use: without httpx2 installed, importing authlib's client always warns
        # (it falls back to httpx), and a policy without introspection should not pay or print that.
        from authlib.integrations.httpx_client import AsyncOAuth2Client

        where = f"introspection endpoint {self.endpoint}"
        try:
            async with asyncio.timeout(self._timeout), AsyncOAuth2Client(
                    client_id, client_secret, token_endpoint_auth_method="client_secret_basic",
                    timeout=self._timeout, verify=client_context(), follow_redirects=False) as client:
                response = await client.introspect_token(self.endpoint, token=token,
                                                         token_type_hint="access_token")
        except TimeoutError:
            raise AuthBackendError(f"{where} did not answer within {self._timeout:g} s") from None
        except Exception as exc:  # authlib's and its HTTP library's (httpx or httpx2) errors alike
            raise AuthBackendError(f"{where} unreachable: {describe(exc)}") from None
        if response.status_code != 200:
            raise AuthBackendError(f"{where} answered HTTP {response.status_code}")
        try:
            return response.json()
        except (ValueError, RecursionError):
            raise AuthBackendError(f"{where} did not return JSON") from None

    def principal_from(self, document: Any) -> Principal:
        """Interpret an introspection response (RFC 7662 §2.2)."""
        if not isinstance(document, dict):
            raise AuthBackendError(f"introspection endpoint {self.endpoint} did not return an object")
        if document.get("active") is not True:
            raise TokenError("token is not active")
        claims = {k: v for k, v in document.items() if k != "active"}
        # The server vouches for activity; exp/iss/aud still bind the token to us and bound caching.
        check_times(claims, self._clock(), self._leeway)
        if self._issuer is not None and "iss" in claims:
            check_issuer(claims, self._issuer)
        elif self._issuer is not None:
            # An answer without `iss` is the configured issuer's: one person is one caller,
            # (issuer, subject), whether their token is opaque or a JWT (SPEC §14). Without it the
            # same person would be ("", sub) here and (issuer, sub) with a JWT: two callers, and
            # one could approve the other's call.
            claims["iss"] = self._issuer
        if self._audiences:
            if "aud" not in claims:
                raise TokenError("introspection response has no 'aud' claim; the policy requires "
                                 "an audience")
            check_audience(claims, self._audiences)
        return Principal.from_claims(claims, kind="opaque")
