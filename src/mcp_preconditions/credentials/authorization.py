"""Where a server's callers connect their accounts (`kind = "oauth"`, SPEC §14, §17): its
authorization server and the scopes it asks for. Named in the config (`issuer`, or the two
endpoints), or discovered from the server itself as an MCP client does: its 401 challenge
(`resource_metadata`, `scope`), its protected resource metadata (RFC 9728), its authorization
server's metadata (RFC 8414 or OpenID Connect Discovery, exactly that issuer's).

What is found is kept until `forget` (the server refused a credential: its authorization server may
have moved). Concurrent look-ups share one; a failed one is remembered for RETRY_SECONDS, so a
storm of calls against bad metadata costs one look-up, and then asked again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx2

from ..errors import CredentialBackendError
from .challenge import Challenge, bearer_challenge, unsafe
from .fetch import send
from .flight import Flights
from .metadata import (
    ResourceMetadata,
    ServerMetadata,
    read_resource_metadata,
    read_server_metadata,
    resource_metadata_urls,
    server_metadata_urls,
)
from .settings import OAuthSettings

RETRY_SECONDS = 5.0
# What the gateway asks a server, without a credential, to learn how it is authorized: the request
# its own session makes first of those a server guards (never a call: it could run something).
PROBE = {"jsonrpc": "2.0", "id": "mcp-preconditions-discovery", "method": "tools/list"}
PROBE_HEADERS = {"Accept": "application/json, text/event-stream"}


@dataclass(frozen=True)
class Found:
    """A server's authorization server, the scopes the server asks for (its challenge's, else its
    metadata's `scopes_supported`, else none) and the resource it says it is (RFC 9728: what its
    tokens are asked for, exactly as published; None when no metadata of its was read)."""

    server: ServerMetadata
    scope: tuple[str, ...] = ()
    resource: str | None = None


class AuthorizationDiscovery:
    """The authorization server of one `oauth` server (SPEC §17)."""

    def __init__(self, settings: OAuthSettings, *, transport: httpx2.AsyncBaseTransport | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if settings.issuer is None and settings.token_endpoint is None and settings.server_url is None:
            raise ValueError("an issuer, the endpoints, or the server's URL to discover them from")
        self.settings = settings
        self._transport = transport
        self._clock = clock
        self._found: Found | None = None
        self._failed: tuple[str, float] | None = None  # why the last look-up failed, and when
        self._flights: Flights[Found] = Flights()

    @property
    def issuer(self) -> str | None:
        """The configured issuer (None: discovered, or endpoints named without one)."""
        return self.settings.issuer

    async def found(self) -> Found:
        found = self._found
        if found is not None:
            return found
        failed = self._failed
        if failed is not None and self._clock() - failed[1] < RETRY_SECONDS:
            raise CredentialBackendError(failed[0])
        return (await self._flights.once("found", self._look))[0]

    def forget(self) -> None:
        """Look again next time (the server refused a credential it was given)."""
        if self.settings.token_endpoint is None:  # (named endpoints are never looked up)
            self._found = None

    async def _look(self) -> Found:
        try:
            found = self._found = await self._discover()
        except CredentialBackendError as exc:
            self._failed = (str(exc), self._clock())
            raise
        self._failed = None
        return found

    async def _discover(self) -> Found:
        settings = self.settings
        if settings.authorization_endpoint is not None and settings.token_endpoint is not None:
            return Found(ServerMetadata(None, settings.authorization_endpoint,
                                        settings.token_endpoint))
        if settings.issuer is not None:
            return Found(await self._server(settings.issuer))
        assert settings.server_url is not None
        challenge = await self._probe(settings.server_url)
        resource = await self._resource(settings.server_url, challenge)
        server = await self._server(resource.authorization_server)
        asked = challenge.scope if challenge is not None else None
        return Found(server, asked or resource.scopes_supported or (), resource.resource)

    async def _probe(self, url: str) -> Challenge | None:
        """The server's challenge to a request without a credential (None: it gave none)."""
        answer = await send("POST", url, timeout=self.settings.timeout_seconds, json_body=PROBE,
                            headers=PROBE_HEADERS, transport=self._transport)
        return bearer_challenge(answer.challenge) if answer.status in (401, 403) else None

    async def _resource(self, server_url: str, challenge: Challenge | None) -> ResourceMetadata:
        named = challenge.resource_metadata if challenge is not None else None
        if named is not None and (why := unsafe(named)) is not None:
            raise CredentialBackendError(f"the server at {server_url} names its resource metadata "
                                         f"at {named[:200]!r}: {why}")
        last = ""
        for url in resource_metadata_urls(server_url, named):
            answer = await send("GET", url, timeout=self.settings.timeout_seconds,
                                transport=self._transport)
            if answer.status == 200:
                return read_resource_metadata(url, answer.body, server_url)
            last = f"{url} answered HTTP {answer.status}"
        raise CredentialBackendError(f"no protected resource metadata for the server at "
                                     f"{server_url} ({last}): set issuer, or the endpoints")

    async def _server(self, issuer: str) -> ServerMetadata:
        last = ""
        for url in server_metadata_urls(issuer):
            answer = await send("GET", url, timeout=self.settings.timeout_seconds,
                                transport=self._transport)
            if answer.status != 200 or not isinstance(answer.body, dict):
                last = f"{url} answered HTTP {answer.status}" + (
                    "" if answer.status != 200 else " without a JSON object")
                continue  # only a server that answered is worth asking at the other address
            return read_server_metadata(url, answer.body, issuer)
        raise CredentialBackendError(f"no metadata for authorization server {issuer!r}: {last}")
