"""`kind = "oauth"`: the tokens of the accounts callers connected to one server, kept per (caller,
server), sealed (AES-GCM) in a vault (memory, or Redis for replicas), refreshed 60 s before they
expire where they were issued (their grant). A refresh the authorization server refuses ends the
connection (`unsatisfied`: connect again); one that cannot be made is `error` once the token has
expired. A server that refuses a token for want of scope (403 `insufficient_scope`) gets one
step-up: the caller connects again for the union of scopes (SEP-2350); a connection made so is
not stepped up again.

A caller reaches only their own connection: every read and write is keyed by, and sealed to, them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import httpx2

from ..errors import CredentialBackendError, NoCredentialError, SealError
from ..principal import Identity, Principal
from .authorization import AuthorizationDiscovery, Found
from .caller import Caller, known_caller
from .challenge import bearer_challenge
from .connection import REFRESH_AHEAD_SECONDS, Connection, connection_from
from .credential import Credential
from .endpoint import TokenEndpoint
from .flight import Flights
from .grant import Grant
from .listing import ListingAccount
from .pkce import digest
from .sealing import Sealer
from .settings import OAUTH, OAuthSettings
from .stores import Vault

log = logging.getLogger("mcp_preconditions.credentials")

__all__ = ["REFRESH_AHEAD_SECONDS", "ConnectedAccounts", "Connection", "connection_from"]


class ConnectedAccounts:
    """One server's connected accounts."""

    kind = OAUTH

    def __init__(self, server: str, settings: OAuthSettings, vault: Vault, *,
                 discovery: AuthorizationDiscovery | None = None,
                 clock: Callable[[], float] = time.time,
                 transport: httpx2.AsyncBaseTransport | None = None) -> None:
        self.server = server
        self.settings = settings
        self.vault = vault
        self.sealer = Sealer(settings.encryption_key)
        self.discovery = discovery if discovery is not None else \
            AuthorizationDiscovery(settings, transport=transport)
        self.transport = transport
        # The gateway's own session's account, when the server gave it no credential (listing.py).
        self.listing: ListingAccount | None = None
        self._clock = clock
        self._refreshes: Flights[Connection] = Flights()
        self._lent: tuple[Caller, str] | None = None  # the listing's account renewed, its new token
        self._renewing: set[asyncio.Task[None]] = set()

    def lend(self, listing: ListingAccount) -> None:
        """Lend connected accounts to the gateway's own session with this server (listing.py)."""
        self.listing = listing
        listing.on_refused = self._lent_refused

    def _lent_refused(self, caller: Caller, challenge: str) -> None:
        """The server refused the account lent to the gateway's own session: renewed once, in the
        background (a token it lacks scope for is not: no person is there to grant more)."""
        asked = bearer_challenge(challenge)
        if asked is not None and asked.error == "insufficient_scope":
            log.warning("credential for server %s: the server wants more scope (%s) for the "
                        "gateway's own session than the account lent to it has", self.server,
                        " ".join(asked.scope or ())[:200])
            return
        if self._renewing:
            return  # one renewal at a time
        task = asyncio.get_running_loop().create_task(self._renew_lent(caller))
        self._renewing.add(task)
        task.add_done_callback(self._renewing.discard)

    async def _renew_lent(self, caller: Caller) -> None:
        try:
            connection = await self.load(caller)
            if connection is None or self.listing is None:
                return
            if self._lent == (caller, digest(connection.access_token)):  # renewed, still refused
                log.warning("credential for server %s: the server refuses the account lent to the "
                            "gateway's own session even renewed: it is not used until it changes",
                            self.server)
                self.listing.give_up(caller)
                return
            renewed, _ = await self._refreshes.once(
                caller, lambda: self._refresh(caller, connection, forced=True))
            self._lent = (caller, digest(renewed.access_token))
        except (NoCredentialError, CredentialBackendError) as exc:
            log.warning("credential for server %s: the account lent to the gateway's own session "
                        "was refused and cannot be renewed: %s", self.server, exc)
        except Exception as exc:  # a background task: one line, its type only
            log.error("credential for server %s: renewing the gateway's own session's account "
                      "failed: %s", self.server, type(exc).__name__)

    def resource(self, found: Found) -> str | None:
        """The resource indicator its tokens are asked for (RFC 8707): the configured one, else
        the one its protected resource metadata publishes, else the server's URL."""
        return self.settings.resource or found.resource or self.settings.server_url

    # -- what a call uses ---------------------------------------------------------------------------
    async def obtain(self, principal: Principal | None, token: str | None) -> tuple[Credential, bool]:
        """The caller's credential for this server (refreshed first when it is due), and whether
        no authorization server was asked for this call. With no connection, the server's
        authorization server is looked up first: metadata that cannot be used is `error` (no
        connect link would work), not `unsatisfied`."""
        caller = _caller(principal)
        connection = await self.load(caller)
        if connection is None:
            await self.discovery.found()
            raise NoCredentialError(f"no account connected for server '{self.server}'")
        if connection.fresh(self._clock()):
            return self._credential(connection), True
        renewed, led = await self._refreshes.once(caller, lambda: self._refresh(caller, connection))
        return self._credential(renewed), not led

    def cached(self, identity: Identity, token: str | None) -> Credential | None:
        """Never at once: a connection is read from the vault (Redis, for replicas) and unsealed,
        awaited by `obtain`."""
        return None

    async def renew(self, principal: Principal | None, token: str | None, stale: Credential,
                    challenge: str | None = None) -> tuple[Credential, bool]:
        """After the server refused `stale` (401/403 with `challenge`, its WWW-Authenticate): a
        step-up when it asks for more scope; else refresh once (or use a newer connection another
        call already stored); without a refresh token the connection ends."""
        caller = _caller(principal)
        connection = await self.load(caller)
        if connection is None:
            raise NoCredentialError(f"no account connected for server '{self.server}'")
        current = self._credential(connection)
        if not current.same(stale):
            return current, True
        asked = bearer_challenge(challenge)
        if asked is not None and asked.insufficient_scope and asked.scope:
            await self._step_up(caller, connection, asked.scope)
        renewed, led = await self._refreshes.once(caller, lambda: self._refresh(caller, connection,
                                                                                 forced=True))
        return self._credential(renewed), not led

    async def _step_up(self, caller: Caller, connection: Connection, scope: tuple[str, ...]) -> None:
        """The server refused the token for want of `scope`: once, the connection remembers what
        it asked for (the next authorization asks for the union); never raises but NoCredentialError."""
        shown = " ".join(scope)[:200]
        if connection.grant is not None and connection.grant.stepped:
            raise NoCredentialError(f"server '{self.server}' refuses the connected account for want "
                                    f"of scope ({shown}) after one step-up")
        await self.save(caller, connection.wanting(scope))
        raise NoCredentialError(f"server '{self.server}' asks for more scope ({shown}): connect "
                                "the account again to grant it")

    # -- the vault ----------------------------------------------------------------------------------
    async def load(self, caller: Caller) -> Connection | None:
        """The caller's connection; one that does not open (tampered, moved, another key) is
        removed and counts as none."""
        sealed = await self.vault.load(caller.digest(), self.server)
        if sealed is None:
            return None
        try:
            connection = Connection.from_bytes(self.sealer.open(sealed, self._context(caller)))
        except (SealError, ValueError, KeyError, TypeError):
            log.warning("credential for server %s: a stored connection does not open (tampered with, "
                        "or sealed with another key): removed", self.server)
            await self.remove(caller)
            return None
        if self.listing is not None:
            self.listing.offer(caller, self._credential(connection))
        return connection

    async def save(self, caller: Caller, connection: Connection) -> None:
        sealed = self.sealer.seal(connection.to_bytes(), self._context(caller))
        await self.vault.save(caller.digest(), self.server, sealed)
        if self.listing is not None:
            self.listing.offer(caller, self._credential(connection))

    async def remove(self, caller: Caller) -> bool:
        if self.listing is not None:
            self.listing.release(caller)
        return await self.vault.remove(caller.digest(), self.server)

    async def redeem(self, caller: Caller, code: str, verifier: str, redirect_uri: str,
                     grant: Grant) -> Connection:
        """Redeem an authorization code (with its PKCE verifier) where `grant` says, and keep the
        caller's tokens."""
        endpoint = TokenEndpoint(grant.token_endpoint, grant.client, self.settings.timeout_seconds,
                                 transport=self.transport)
        form = {"grant_type": "authorization_code", "code": code, "code_verifier": verifier,
                "redirect_uri": redirect_uri}
        if grant.resource is not None:
            form["resource"] = grant.resource
        connection = connection_from(await endpoint.request(form), endpoint.url, self._clock(),
                                     grant=grant)
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
            await self._ended(caller)
            raise NoCredentialError(f"the account connected for server '{self.server}' expired "
                                    "and cannot be refreshed: connect again")
        try:
            endpoint = await self._endpoint(connection)
            form = {"grant_type": "refresh_token", "refresh_token": connection.refresh_token}
            if connection.grant is not None and connection.grant.resource is not None:
                form["resource"] = connection.grant.resource
            renewed = connection_from(await endpoint.request(form), endpoint.url, self._clock(),
                                      connection)
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
        await self._ended(caller)
        raise NoCredentialError(f"the authorization server of server '{self.server}' refused to "
                                "refresh the connected account (the connection was removed): "
                                "connect again")

    async def _ended(self, caller: Caller) -> None:
        """The connection is over: removed, and the server's authorization server looked up again
        next time (a server that refuses its tokens may have moved to another, SEP-2352)."""
        await self.remove(caller)
        self.discovery.forget()

    async def _endpoint(self, connection: Connection) -> TokenEndpoint:
        """Where the connection refreshes: its grant's token endpoint, as its grant's client (a
        connection older than grants: the settings' client at the server's authorization server)."""
        grant = connection.grant
        if grant is not None:
            return TokenEndpoint(grant.token_endpoint, grant.client, self.settings.timeout_seconds,
                                 transport=self.transport)
        if self.settings.client is None:
            raise CredentialBackendError(f"the account connected for server '{self.server}' names "
                                         "no client to refresh as")
        found = await self.discovery.found()
        return TokenEndpoint(found.server.token_endpoint, self.settings.client,
                             self.settings.timeout_seconds, transport=self.transport)

    def _credential(self, connection: Connection) -> Credential:
        return Credential.bearer(connection.access_token, self.kind, connection.expires_at)

    def _context(self, caller: Caller) -> bytes:
        return f"connection\0{caller.digest()}\0{self.server}".encode()


def _caller(principal: Principal | None) -> Caller:
    return known_caller(principal)
