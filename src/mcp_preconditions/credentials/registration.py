"""How the gateway is known to a server's authorization server (SPEC §17), in the MCP authorization
spec's order: pre-registered (the config's `client_id`), else a Client ID Metadata Document the
gateway serves (its URL is the client_id, where the authorization server takes one and the gateway's
address is https), else registered on the spot (RFC 7591 dynamic registration, where offered).

A registered client is kept per (server, issuer): one authorization server's client is never shown
to another (SEP-2352). It is sealed (it may hold a secret), kept REGISTRATION_SECONDS at most, and
a server keeps at most MAX_CLIENTS (the oldest goes first), in the connect flow's store (memory, or
Redis for replicas).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any, get_args

import httpx2

from ..errors import CredentialBackendError, SealError
from .authorization import Found
from .challenge import unsafe
from .fetch import send
from .pkce import digest
from .sealing import Sealer
from .settings import Client, ClientAuth, OAuthSettings
from .stores import Tickets

CLIENT_METADATA_PATH = "/client-metadata.json"
CALLBACK_PATH = "/oauth/callback"
CLIENT_NAME = "mcp-preconditions gateway"
REGISTRATION_SECONDS = 7 * 86400.0
MAX_CLIENTS = 8
_PREFERRED: tuple[ClientAuth, ...] = ("client_secret_basic", "client_secret_post", "none")
_CLIENT_ID = re.compile(r"[\x21-\x7e]{1,1024}")  # printable, no space: safe in a form and a header
_SECRET = re.compile(r"[\x20-\x7e]{1,1024}")


def client_metadata(base_url: str) -> dict[str, Any]:
    """The gateway's Client ID Metadata Document, served at CLIENT_METADATA_PATH of `base_url`: a
    public web client whose redirect URI is the gateway's callback, that wants refresh tokens."""
    base = base_url.rstrip("/")
    return {"client_id": base + CLIENT_METADATA_PATH, "client_name": CLIENT_NAME, "client_uri": base,
            "redirect_uris": [base + CALLBACK_PATH], "grant_types": ["authorization_code",
                                                                      "refresh_token"],
            "response_types": ["code"], "token_endpoint_auth_method": "none",
            "application_type": "web"}


class Registration:
    """The gateway's client at one server's authorization servers."""

    def __init__(self, server: str, settings: OAuthSettings, sealer: Sealer, tickets: Tickets,
                 base_url: str, *, transport: httpx2.AsyncBaseTransport | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.server = server
        self.settings = settings
        self._sealer = sealer
        self._tickets = tickets
        self._base = base_url.rstrip("/")
        self._transport = transport
        self._clock = clock

    async def client(self, found: Found) -> Client:
        """The client to authorize with at `found`'s authorization server."""
        if self.settings.client is not None:
            return self.settings.client
        server = found.server
        if server.client_id_metadata_documents and self._base.startswith("https://"):
            return Client(self._base + CLIENT_METADATA_PATH, "", "none")
        if server.issuer is None or server.registration_endpoint is None:
            raise CredentialBackendError(
                f"server '{self.server}': its authorization server offers neither dynamic client "
                "registration nor Client ID Metadata Documents (to an https gateway): register the "
                "gateway there and set client_id")
        kept = await self._kept(server.issuer)
        if kept is not None:
            return kept
        made, lifetime = await self._register(server.registration_endpoint, server.auth_methods)
        key = self._key(server.issuer)
        sealed = self._sealer.seal(json.dumps({"client_id": made.client_id,
                                               "client_secret": made.client_secret,
                                               "auth": made.auth}).encode(), key.encode())
        await self._tickets.put_for("clients:" + digest(self.server), key, sealed, lifetime,
                                    MAX_CLIENTS)
        return made

    async def forget(self, issuer: str | None) -> None:
        """The authorization server refused the gateway's registered client: register again."""
        if issuer is not None and self.settings.client is None:
            await self._tickets.delete(self._key(issuer))

    def _key(self, issuer: str) -> str:
        return "client:" + digest(f"{self.server}\0{issuer}")

    async def _kept(self, issuer: str) -> Client | None:
        key = self._key(issuer)
        sealed = await self._tickets.get(key)
        if sealed is None:
            return None
        try:
            found = json.loads(self._sealer.open(sealed, key.encode()))
            auth = found["auth"]
            if auth not in get_args(ClientAuth):
                raise ValueError(auth)
            return Client(str(found["client_id"]), str(found["client_secret"]), auth)
        except (SealError, ValueError, KeyError, TypeError):
            await self._tickets.delete(key)  # another key, or tampered with: registered again
            return None

    async def _register(self, endpoint: str, methods: tuple[str, ...] | None
                        ) -> tuple[Client, float]:
        """RFC 7591 §3: the gateway's metadata POSTed; its client and how long to keep it."""
        why = unsafe(endpoint)
        if why is not None:
            raise CredentialBackendError(f"registration endpoint {endpoint[:200]!r}: {why}")
        wanted = _method(methods, endpoint)
        metadata = client_metadata(self._base)
        del metadata["client_id"]
        metadata["token_endpoint_auth_method"] = wanted
        answer = await send("POST", endpoint, timeout=self.settings.timeout_seconds,
                            json_body=metadata, transport=self._transport)
        body = answer.body
        if answer.status not in (200, 201) or not isinstance(body, dict):
            code = body.get("error") if isinstance(body, dict) else None
            shown = f" ({code[:64]})" if isinstance(code, str) and code.isprintable() else ""
            raise CredentialBackendError(f"registration at {endpoint} answered HTTP "
                                         f"{answer.status}{shown}")
        return _registered(body, wanted, endpoint, self._clock())


def _method(supported: tuple[str, ...] | None, endpoint: str) -> ClientAuth:
    """The client authentication to register with: a secret where the authorization server takes
    one, else none (RFC 8414 §2: client_secret_basic when it says nothing)."""
    if supported is None:
        return "client_secret_basic"
    for method in _PREFERRED:
        if method in supported:
            return method
    raise CredentialBackendError(f"the authorization server of {endpoint} takes none of the client "
                                 f"authentications the gateway has ({', '.join(_PREFERRED)})")


def _registered(body: dict[str, Any], wanted: ClientAuth, endpoint: str, now: float
                ) -> tuple[Client, float]:
    client_id = body.get("client_id")
    if not isinstance(client_id, str) or not _CLIENT_ID.fullmatch(client_id):
        raise CredentialBackendError(f"registration at {endpoint} answered without a usable "
                                     "client_id")
    method = body.get("token_endpoint_auth_method", wanted)
    if method not in get_args(ClientAuth):
        raise CredentialBackendError(f"registration at {endpoint} answered an authentication "
                                     "the gateway has not")
    secret = body.get("client_secret")
    if method == "none":
        secret = ""
    elif not isinstance(secret, str) or not _SECRET.fullmatch(secret):
        raise CredentialBackendError(f"registration at {endpoint} answered {method} without a "
                                     "usable client_secret")
    lifetime = REGISTRATION_SECONDS
    expires = body.get("client_secret_expires_at")
    if secret and isinstance(expires, int) and expires > 0:  # RFC 7591 §3.2.1: 0 is never
        lifetime = min(lifetime, expires - now)
        if lifetime <= 0:
            raise CredentialBackendError(f"registration at {endpoint} answered an expired secret")
    return Client(client_id, secret, method), lifetime
