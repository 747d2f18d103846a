"""The two metadata documents an MCP client reads before it authorizes (SPEC §17), where to find them
and what makes one usable: a server's protected resource metadata (RFC 9728: the `resource` it is,
its `authorization_servers`, its `scopes_supported`) and an authorization server's metadata (RFC
8414, or OpenID Connect Discovery), looked for in the MCP authorization spec's order and naming
exactly the issuer it was looked for (RFC 8414 §3.3). Anything else is bad metadata: a
CredentialBackendError that names the document and why, never used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..errors import CredentialBackendError
from .challenge import scopes, unsafe

RESOURCE_METADATA = "/.well-known/oauth-protected-resource"
OAUTH_METADATA = "/.well-known/oauth-authorization-server"
OPENID_METADATA = "/.well-known/openid-configuration"
CIMD_SUPPORTED = "client_id_metadata_document_supported"
ISS_SUPPORTED = "authorization_response_iss_parameter_supported"


@dataclass(frozen=True)
class ResourceMetadata:
    """A server's protected resource metadata: the authorization server it names first, and the
    scopes it says it supports (None: it says nothing)."""

    resource: str
    authorization_server: str
    scopes_supported: tuple[str, ...] | None


@dataclass(frozen=True)
class ServerMetadata:
    """What the gateway uses of an authorization server's metadata. `issuer` None: the endpoints
    were configured, no metadata was read (nothing to check an answer's `iss` against)."""

    issuer: str | None
    authorization_endpoint: str
    token_endpoint: str
    registration_endpoint: str | None = None
    scopes_supported: tuple[str, ...] = ()
    auth_methods: tuple[str, ...] | None = None  # token_endpoint_auth_methods_supported
    client_id_metadata_documents: bool = False  # a URL may be a client_id (CIMD)
    iss_parameter: bool = False  # every authorization answer names the issuer (RFC 9207)
    jwks_uri: str | None = None


def resource_metadata_urls(server_url: str, named: str | None) -> list[str]:
    """Where a server's protected resource metadata is: the URL its challenge named, else the
    well-known URI with the server's path (RFC 9728 §3.1), then at the root."""
    if named is not None:
        return [named]
    parts = urlsplit(server_url)
    path = parts.path.rstrip("/")
    at = [f"{RESOURCE_METADATA}{path}"] if path else []
    return [urlunsplit((parts.scheme, parts.netloc, p, "", "")) for p in [*at, RESOURCE_METADATA]]


def server_metadata_urls(issuer: str) -> list[str]:
    """Where an issuer's metadata is, in the MCP authorization spec's order: with a path, RFC 8414
    path insertion, then OpenID Connect Discovery with insertion, then appended; without one, RFC
    8414 then OpenID Connect Discovery."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    paths = ([f"{OAUTH_METADATA}{path}", f"{OPENID_METADATA}{path}", f"{path}{OPENID_METADATA}"]
             if path else [OAUTH_METADATA, OPENID_METADATA])
    return [urlunsplit((parts.scheme, parts.netloc, p, "", "")) for p in paths]


def serves(resource: str, server_url: str) -> bool:
    """Whether a protected resource identifier covers the server's URL: the same origin, and its
    path the server's or a parent of it (metadata at the root names the origin)."""
    try:
        mine, theirs = urlsplit(server_url), urlsplit(resource)
        same_origin = (mine.scheme.lower(), mine.hostname, mine.port) == \
            (theirs.scheme.lower(), theirs.hostname, theirs.port)
    except ValueError:
        return False
    if not same_origin or theirs.fragment or theirs.query:
        return False
    parent = theirs.path.rstrip("/")
    return mine.path.rstrip("/") == parent or mine.path.startswith(parent + "/")


def read_resource_metadata(url: str, document: Any, server_url: str) -> ResourceMetadata:
    """The usable parts of the protected resource metadata at `url`, for the server at
    `server_url`: its `resource` must cover that server (RFC 9728 §3.3, or the document is another
    resource's, a mix-up), and its first authorization server must be https (or loopback http)."""
    if not isinstance(document, dict):
        raise CredentialBackendError(f"protected resource metadata at {url} is not a JSON object")
    resource = document.get("resource")
    if not isinstance(resource, str) or not serves(resource, server_url):
        raise CredentialBackendError(f"protected resource metadata at {url} names resource "
                                     f"{_shown(resource)}, not the server at {server_url}")
    servers = document.get("authorization_servers")
    if not isinstance(servers, list) or not servers:
        raise CredentialBackendError(f"protected resource metadata at {url} names no "
                                     "authorization server")
    issuer = servers[0]
    why = unsafe(issuer)
    if why is not None or urlsplit(str(issuer)).query:
        raise CredentialBackendError(f"protected resource metadata at {url} names authorization "
                                     f"server {_shown(issuer)}: {why or 'an issuer has no query'}")
    return ResourceMetadata(resource, issuer, _scopes(document, url))


def read_server_metadata(url: str, document: Any, issuer: str) -> ServerMetadata:
    """The usable parts of the authorization server metadata at `url`, looked for as `issuer`'s:
    it must name exactly that issuer (RFC 8414 §3.3), its endpoints must be https (or loopback
    http), and it must say it takes PKCE with S256 (the MCP authorization spec: otherwise a
    client refuses to go on)."""
    if not isinstance(document, dict):
        raise CredentialBackendError(f"authorization server metadata at {url} is not a JSON object")
    named = document.get("issuer")
    if named != issuer:
        raise CredentialBackendError(f"authorization server metadata at {url} names issuer "
                                     f"{_shown(named)}, not {issuer!r}")
    endpoints = {name: _endpoint(document, name, url)
                 for name in ("authorization_endpoint", "token_endpoint")}
    methods = document.get("code_challenge_methods_supported")
    if not isinstance(methods, list) or "S256" not in methods:
        raise CredentialBackendError(f"authorization server metadata at {url} does not say it "
                                     "supports PKCE with S256 (code_challenge_methods_supported)")
    registration = document.get("registration_endpoint")
    auth = document.get("token_endpoint_auth_methods_supported")
    jwks = document.get("jwks_uri")
    return ServerMetadata(
        issuer, endpoints["authorization_endpoint"], endpoints["token_endpoint"],
        registration if isinstance(registration, str) else None, _scopes(document, url) or (),
        tuple(m for m in auth if isinstance(m, str)) if isinstance(auth, list) else None,
        document.get(CIMD_SUPPORTED) is True, document.get(ISS_SUPPORTED) is True,
        jwks if unsafe(jwks) is None else None)


def _endpoint(document: Mapping[str, Any], name: str, url: str) -> str:
    value = document.get(name)
    if value is None:
        raise CredentialBackendError(f"authorization server metadata at {url} has no {name!r}")
    why = unsafe(value)
    if why is not None:
        raise CredentialBackendError(f"authorization server metadata at {url}: {name} "
                                     f"{_shown(value)}: {why}")
    return str(value)


def _scopes(document: Mapping[str, Any], url: str) -> tuple[str, ...] | None:
    value = document.get("scopes_supported")
    if value is None:
        return None
    found = scopes(" ".join(value)) if isinstance(value, list) and all(
        isinstance(s, str) and s and " " not in s for s in value) else None
    if found is None and value != []:
        raise CredentialBackendError(f"metadata at {url} has an unusable scopes_supported")
    return found or ()


def _shown(value: object) -> str:
    """A value from a document, for a log line: a short repr, never more."""
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."

