"""Signing a person in to the gateway's pages (`[auth.sign_in]`, SPEC §14 and §15): the gateway is an
OpenID Connect client of `[auth]`'s issuer, with the authorization code flow and PKCE (S256), a
`state` bound to the browser and a `nonce` bound to the ID token. The person is the ID token's
issuer and subject, kept in a sealed, short-lived cookie. Connect links and `/connections` use it,
and so do the approval pages, with their own redirect (`/approvals/callback`).

A flow's record is stored only once a visitor starts a sign-in (`begin`), for 600 s, and the store
keeps at most 10,000 (MAX_FLOWS: the oldest go first), in memory or Redis alike (cli/_pages.py
gives it one so bounded). A signed-in page's forms carry a token bound to the person's cookie
(`form_token`): another site cannot post them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlencode

import httpx2

from ..auth.jwt_verifier import JwtVerifier, jwt_header
from ..auth.keys import KeySet
from ..errors import (
    AuthBackendError,
    CredentialBackendError,
    FlowError,
    NoCredentialError,
    SealError,
    TokenError,
)
from ..policy.model import Auth
from .caller import Caller
from .discovery import Discovery
from .endpoint import TokenEndpoint
from .pkce import challenge, digest, random_id
from .sealing import Sealer
from .settings import SignInSettings
from .stores import Tickets

log = logging.getLogger("mcp_preconditions.credentials")

FLOW_SECONDS = 600.0
MAX_FLOWS = 10_000  # sign-ins under way, in all: the store's bound (memory or Redis)
SESSION_SECONDS = 900.0
SESSION_COOKIE = "mcp_preconditions_session"


def local_path(value: str) -> bool:
    """A path on this site (never `//host`, a scheme, or a backslash trick): where a flow returns."""
    return value.startswith("/") and not value.startswith("//") and "\\" not in value and \
        value.isascii() and value.isprintable()


class SignIn:
    """Signs people in at one issuer, for any page of the gateway (each its own redirect URI)."""

    def __init__(self, settings: SignInSettings, tickets: Tickets, cookie_key: bytes, *,
                 clock: Callable[[], float] = time.time,
                 transport: httpx2.AsyncBaseTransport | None = None) -> None:
        self.settings = settings
        self.tickets = tickets
        self._sealer = Sealer(cookie_key)
        self._forms = hashlib.sha256(b"mcp-preconditions forms\0" + cookie_key).digest()
        self._clock = clock
        self._transport = transport
        self.discovery = Discovery(settings.issuer, settings.timeout_seconds, transport=transport)
        auth = Auth(issuer=settings.issuer, audience=settings.client.client_id,
                    jwks_uri=settings.jwks_uri, discovery=settings.jwks_uri is None,
                    algorithms=list(settings.algorithms), fetch_timeout_seconds=settings.timeout_seconds)
        keys = KeySet(jwks_uri=settings.jwks_uri, issuer=settings.issuer,
                      discovery=settings.jwks_uri is None, timeout=settings.timeout_seconds)
        self._verifier = JwtVerifier(auth, keys, clock=clock)

    async def begin(self, return_to: str, redirect_uri: str, binding: str) -> str:
        """The issuer's authorization URL for a person in the browser holding `binding`, who comes
        back to `redirect_uri` and then goes on to `return_to` (a local path)."""
        if not local_path(return_to):
            raise FlowError(400, "A sign-in returns only to a page of this gateway.")
        endpoints = await self.discovery.endpoints()
        state, verifier, nonce = random_id(), random_id(), random_id()
        key = "signin:" + digest(state)
        record = {"verifier": verifier, "nonce": nonce, "binding": digest(binding),
                  "return_to": return_to, "redirect_uri": redirect_uri}
        await self.tickets.put(key, self._sealer.seal(json.dumps(record).encode(), key.encode()),
                               FLOW_SECONDS)
        query = {"response_type": "code", "client_id": self.settings.client.client_id,
                 "redirect_uri": redirect_uri, "scope": "openid", "state": state, "nonce": nonce,
                 "code_challenge": challenge(verifier), "code_challenge_method": "S256"}
        where = endpoints.authorization_endpoint
        return where + ("&" if "?" in where else "?") + urlencode(query)

    async def finish(self, answer: Mapping[str, str], binding: str | None) -> tuple[Caller, str]:
        """The person who signed in, and where they go next. FlowError 400 for a state that is
        unknown, used, expired or another browser's, a refused sign-in or a bad ID token; 502 when
        the issuer cannot be reached."""
        person, _, return_to = await self.finish_with_claims(answer, binding)
        return person, return_to

    async def finish_with_claims(self, answer: Mapping[str, str], binding: str | None
                                 ) -> tuple[Caller, Mapping[str, Any], str]:
        """`finish`, with the verified ID token's claims (what the approval pages judge an
        approver by: the issuer's roles and groups of the person)."""
        record = await self._flow(answer.get("state"), binding)
        issuer = answer.get("iss")
        if issuer is not None and issuer != self.settings.issuer:  # RFC 9207: a mix-up otherwise
            raise FlowError(400, "The answer came from another issuer.")
        code = answer.get("code")
        if code is None:
            raise FlowError(400, "The sign-in did not complete.")
        try:
            endpoints = await self.discovery.endpoints()
            endpoint = TokenEndpoint(endpoints.token_endpoint, self.settings.client,
                                     self.settings.timeout_seconds, transport=self._transport)
            tokens = await endpoint.request({
                "grant_type": "authorization_code", "code": code,
                "redirect_uri": str(record["redirect_uri"]), "code_verifier": str(record["verifier"])})
            person, claims = await self._person(tokens.get("id_token"), str(record["nonce"]))
        except NoCredentialError as exc:
            raise FlowError(400, f"The sign-in was refused ({exc}).") from None
        except (CredentialBackendError, AuthBackendError) as exc:
            log.warning("sign-in at %s failed: %s", self.settings.issuer, exc)
            raise FlowError(502, "The sign-in service could not be reached; try again.") from None
        return person, claims, str(record["return_to"])

    async def _flow(self, state: str | None, binding: str | None) -> dict[str, Any]:
        unknown = FlowError(400, "Unknown, used or expired sign-in: start again.")
        if not state:
            raise unknown
        key = "signin:" + digest(state)
        sealed = await self.tickets.get(key)
        if sealed is None:
            raise unknown
        try:
            record = json.loads(self._sealer.open(sealed, key.encode()))
        except (SealError, ValueError):
            raise unknown from None
        if binding is None or digest(binding) != record.get("binding"):
            raise FlowError(400, "This sign-in was started in another browser.")
        if await self.tickets.take(key) is None:
            raise unknown
        return dict(record)

    async def _person(self, id_token: Any, nonce: str) -> tuple[Caller, Mapping[str, Any]]:
        if not isinstance(id_token, str):
            raise FlowError(400, "The issuer answered without an ID token.")
        header = jwt_header(id_token)
        try:
            if header is None:
                raise TokenError("not a JWT")
            principal = await self._verifier.verify(id_token, header)
        except TokenError as exc:
            raise FlowError(400, f"The ID token is not valid ({exc}).") from None
        claims = principal.claims
        if claims.get("nonce") != nonce:
            raise FlowError(400, "The ID token was not issued for this sign-in (nonce).")
        audience = claims.get("aud")
        if isinstance(audience, list) and len(audience) > 1 and \
                claims.get("azp") != self.settings.client.client_id:
            raise FlowError(400, "The ID token was issued to another party (azp).")
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            raise FlowError(400, "The ID token names no subject.")
        return Caller(self.settings.issuer, subject), claims

    # -- the signed-in person's cookie --------------------------------------------------------------
    def session(self, person: Caller) -> str:
        """A cookie value naming `person` for SESSION_SECONDS, sealed: it cannot be read or forged."""
        data = json.dumps({"iss": person.issuer, "sub": person.subject,
                           "exp": self._clock() + SESSION_SECONDS}).encode()
        return base64.urlsafe_b64encode(self._sealer.seal(data, b"session")).decode("ascii")

    def person_of(self, cookie: str | None) -> Caller | None:
        """Who the cookie names, while it is valid; None for none, an expired or a forged one."""
        if not cookie:
            return None
        try:
            data = json.loads(self._sealer.open(base64.urlsafe_b64decode(cookie), b"session"))
            if float(data["exp"]) <= self._clock():
                return None
            return Caller(str(data["iss"]), str(data["sub"]))
        except (SealError, ValueError, KeyError, TypeError, binascii.Error):
            return None

    def form_token(self, cookie: str, purpose: str) -> str:
        """The token a signed-in page's form carries: bound to the person's cookie and to what
        the form is for (HMAC-SHA256 under a key derived from the cookie key)."""
        mac = hmac.new(self._forms, f"{purpose}\0{cookie}".encode(), hashlib.sha256)
        return base64.urlsafe_b64encode(mac.digest()).decode("ascii").rstrip("=")

    def form_token_ok(self, cookie: str, purpose: str, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.form_token(cookie, purpose).encode())
