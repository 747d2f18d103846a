"""`kind = "oauth"`: the tokens of the accounts callers connected to one server, kept per (caller,
server), sealed (AES-GCM) in a vault (memory, or Redis for replicas), refreshed 60 s before they
expire. A refresh the authorization server refuses ends the connection (`unsatisfied`: connect
again); one that cannot be made is `error` once the token has expired.

A caller reaches only their own connection: every read and write is keyed by, and sealed to, them.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx2

from ..errors import CredentialBackendError, NoCredentialError, SealError
from ..principal import Identity, Principal
from .caller import Caller, known_caller
from .credential import Credential
from .discovery import Discovery
from .endpoint import TokenEndpoint, bearer_of
from .flight import Flights
from .sealing import Sealer
from .settings import OAUTH, OAuthSettings
from .stores import Vault

log = logging.getLogger("mcp_preconditions.credentials")

REFRESH_AHEAD_SECONDS = 60.0


@dataclass(frozen=True)
class Connection:
    """A connected account's tokens and times (wall clock)."""

    access_token: str = field(repr=False)
    refresh_token: str | None = field(repr=False)
    connected_at: float
    expires_at: float | None

    def fresh(self, now: float) -> bool:
        """Usable without a refresh: no expiry, or more than 60 s left."""
        return self.expires_at is None or now < self.expires_at - REFRESH_AHEAD_SECONDS

    def valid(self, now: float) -> bool:
        return self.expires_at is None or now < self.expires_at

    def to_bytes(self) -> bytes:
        return json.dumps({"access_token": self.access_token, "refresh_token": self.refresh_token,
                           "connected_at": self.connected_at, "expires_at": self.expires_at}).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Connection:
        raw = json.loads(data)
        return cls(str(raw["access_token"]), raw.get("refresh_token"), float(raw["connected_at"]),
                   None if raw.get("expires_at") is None else float(raw["expires_at"]))

    def listing(self, server: str) -> dict[str, Any]:
        """`GET /connections`' entry: the server and the times, never a token."""
        return {"server": server, "connected_at": self.connected_at, "expires_at": self.expires_at}


def connection_from(answer: dict[str, Any], where: str, now: float,
                    before: Connection | None = None) -> Connection:
    """The tokens of a token answer (a redeemed code, or a refresh of `before`: its refresh token
    stays when the answer rotates none, and so does the time it was connected)."""
    access_token, expires_in = bearer_of(answer, where, expiry_required=False)
    refresh = answer.get("refresh_token")
    if refresh is not None and (not isinstance(refresh, str) or not refresh or len(refresh) > 16384):
        raise CredentialBackendError(f"token endpoint {where} answered an unusable refresh_token")
    if refresh is None and before is not None:
        refresh = before.refresh_token
    return Connection(access_token, refresh, before.connected_at if before else now,
                      None if expires_in is None else now + expires_in)


class ConnectedAccounts:
    """One server's connected accounts."""

    kind = OAUTH

    def __init__(self, server: str, settings: OAuthSettings, vault: Vault, *,
                 discovery: Discovery | None = None, clock: Callable[[], float] = time.time,
                 transport: httpx2.AsyncBaseTransport | None = None) -> None:
        self.server = server
        self.settings = settings
        self.vault = vault
        self.sealer = Sealer(settings.encryption_key)
        self.discovery = discovery if discovery is not None else Discovery.of(settings, transport=transport)
        self._clock = clock
        self._transport = transport
        self._refreshes: Flights[Connection] = Flights()

    # -- what a call uses ---------------------------------------------------------------------------
    async def obtain(self, principal: Principal | None, token: str | None) -> tuple[Credential, bool]:
        """The caller's credential for this server (refreshed first when it is due), and whether
        no authorization server was asked for this call."""
        caller = _caller(principal)
        connection = await self.load(caller)
        if connection is None:
            raise NoCredentialError(f"no account connected for server '{self.server}'")
        if connection.fresh(self._clock()):
            return self._credential(connection), True
        renewed, led = await self._refreshes.once(caller, lambda: self._refresh(caller, connection))
        return self._credential(renewed), not led

    def cached(self, identity: Identity, token: str | None) -> Credential | None:
        """Never at once: a connection is read from the vault (Redis, for replicas) and unsealed,
        awaited by `obtain`."""
        return None

    async def renew(self, principal: Principal | None, token: str | None, stale: Credential
                    ) -> tuple[Credential, bool]:
        """After the server refused `stale` (401/403): refresh once (or use a newer connection
        another call already stored); without a refresh token the connection ends."""
        caller = _caller(principal)
        connection = await self.load(caller)
        if connection is None:
            raise NoCredentialError(f"no account connected for server '{self.server}'")
        current = self._credential(connection)
        if not current.same(stale):
            return current, True
        renewed, led = await self._refreshes.once(caller, lambda: self._refresh(caller, connection,
                                                                                 forced=True))
        return self._credential(renewed), not led

    # -- the vault ----------------------------------------------------------------------------------
    async def load(self, caller: Caller) -> Connection | None:
        """The caller's connection; one that does not open (tampered, moved, another key) is
        removed and counts as none."""
        sealed = await self.vault.load(caller.digest(), self.server)
        if sealed is None:
            return None
        try:
            return Connection.from_bytes(self.sealer.open(sealed, self._context(caller)))
        except (SealError, ValueError, KeyError, TypeError):
            log.warning("credential for server %s: a stored connection does not open (tampered with, "
                        "or sealed with another key): removed", self.server)
            await self.vault.remove(caller.digest(), self.server)
            return None

    async def save(self, caller: Caller, connection: Connection) -> None:
        sealed = self.sealer.seal(connection.to_bytes(), self._context(caller))
        await self.vault.save(caller.digest(), self.server, sealed)

    async def remove(self, caller: Caller) -> bool:
        return await self.vault.remove(caller.digest(), self.server)

    async def redeem(self, caller: Caller, code: str, verifier: str, redirect_uri: str) -> Connection:
        """Redeem an authorization code (with its PKCE verifier) and keep the caller's tokens."""
        endpoint = await self._endpoint()
        form = {"grant_type": "authorization_code", "code": code, "code_verifier": verifier,
                "redirect_uri": redirect_uri}
        if self.settings.resource is not None:
            form["resource"] = self.settings.resource
        connection = connection_from(await endpoint.request(form), endpoint.url, self._clock())
        await self.save(caller, connection)
        log.info("credential for server %s: an account was connected", self.server)
        return connection

    # -- refresh ------------------------------------------------------------------------------------
    async def _refresh(self, caller: Caller, connection: Connection, forced: bool = False
                       ) -> Connection:
        now = self._clock()
        if connection.refresh_token is None:
            if connection.valid(now) and not forced:
                return connection  # no way to refresh: used until it expires
            await self.remove(caller)
            raise NoCredentialError(f"the account connected for server '{self.server}' expired "
                                    "and cannot be refreshed: connect again")
        try:
            endpoint = await self._endpoint()
            answer = await endpoint.request({"grant_type": "refresh_token",
                                             "refresh_token": connection.refresh_token})
            renewed = connection_from(answer, endpoint.url, self._clock(), connection)
        except NoCredentialError:
            return await self._refused(caller, connection)
        except CredentialBackendError as exc:
            if connection.valid(self._clock()) and not forced:
                log.warning("credential for server %s: refresh failed (%s); the token is used while "
                            "it is valid", self.server, exc)
                return connection  # still good; the next call tries again
            raise  # the resolver logs it, with its reason
        await self.save(caller, renewed)
        return renewed

    async def _refused(self, caller: Caller, connection: Connection) -> Connection:
        """A refused refresh: another replica may have refreshed (rotating the refresh token)
        first; else the connection is over."""
        latest = await self.load(caller)
        if latest is not None and latest.access_token != connection.access_token and \
                latest.fresh(self._clock()):
            return latest
        await self.remove(caller)
        raise NoCredentialError(f"the authorization server of server '{self.server}' refused to "
                                "refresh the connected account (the connection was removed): "
                                "connect again")

    async def _endpoint(self) -> TokenEndpoint:
        endpoints = await self.discovery.endpoints()
        return TokenEndpoint(endpoints.token_endpoint, self.settings.client,
                             self.settings.timeout_seconds, transport=self._transport)

    def _credential(self, connection: Connection) -> Credential:
        return Credential.bearer(connection.access_token, self.kind, connection.expires_at)

    def _context(self, caller: Caller) -> bytes:
        return f"connection\0{caller.digest()}\0{self.server}".encode()


def _caller(principal: Principal | None) -> Caller:
    return known_caller(principal)
