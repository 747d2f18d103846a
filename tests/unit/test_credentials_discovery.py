"""`kind = "oauth"` finds a server's authorization server as an MCP client does (SPEC §17), with a
double of the server and its authorization server (httpx2 MockTransport): the server's challenge to
a request without a credential (`resource_metadata`, `scope`), its protected resource metadata
(RFC 9728, at the URL it names or the well-known ones in order), its authorization server's metadata
(RFC 8414 / OpenID Connect Discovery in the MCP order, exactly that issuer's), and the scopes to ask
for. Bad metadata is a CredentialBackendError naming why, remembered for a few seconds.
"""

from __future__ import annotations

from typing import Any

import pytest

from mcp_preconditions.credentials import OAuthSettings
from mcp_preconditions.credentials.authorization import PROBE, AuthorizationDiscovery, Found
from mcp_preconditions.credentials.challenge import Challenge, bearer_challenge, unsafe
from mcp_preconditions.credentials.metadata import (
    ServerMetadata,
    resource_metadata_urls,
    server_metadata_urls,
    serves,
)
from mcp_preconditions.errors import CredentialBackendError
from tests.unit.credentials_doubles import Clock, Site

MCP = "https://mcp.test/mcp"
PRM = "https://mcp.test/.well-known/oauth-protected-resource/mcp"
AS = "https://as.test"
AS_METADATA = "https://as.test/.well-known/oauth-authorization-server"
KEY = bytes(32)


def as_metadata(issuer: str = AS, **extra: Any) -> dict[str, Any]:
    return {"issuer": issuer, "authorization_endpoint": f"{issuer}/authorize",
            "token_endpoint": f"{issuer}/token", "registration_endpoint": f"{issuer}/register",
            "code_challenge_methods_supported": ["S256"], **extra}


def site(challenge: str | None = f'Bearer resource_metadata="{PRM}", scope="mcp:basic"',
         prm: dict[str, Any] | None = None, metadata: dict[str, Any] | None = None) -> Site:
    """A server answering 401 with `challenge`, its resource metadata at PRM, its authorization
    server's at AS_METADATA."""
    made = Site()
    made.answer("POST", MCP, 401, {"error": "invalid_token"},
                {"WWW-Authenticate": challenge} if challenge is not None else {})
    made.answer("GET", PRM, 200, prm if prm is not None else
                {"resource": MCP, "authorization_servers": [AS], "scopes_supported": ["mcp:all"]})
    made.answer("GET", AS_METADATA, 200, metadata if metadata is not None else as_metadata())
    return made


def discovery(where: Site, clock: Clock | None = None, **settings: Any) -> AuthorizationDiscovery:
    return AuthorizationDiscovery(OAuthSettings(None, KEY, server_url=MCP, **settings),
                                  transport=where.transport(), clock=clock or Clock())


# -- the challenge ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("header", "expected"), [
    ('Bearer resource_metadata="https://a.test/m", scope="a b"',
     Challenge(None, ("a", "b"), "https://a.test/m")),
    ('Bearer error="insufficient_scope", scope="mcp:write", error_description="more"',
     Challenge("insufficient_scope", ("mcp:write",), None)),
    ('Bearer realm="x", scope=a', Challenge(None, ("a",), None)),  # a token value, unquoted
    ('Basic realm="x", Bearer scope="b"', Challenge(None, ("b",), None)),  # the Bearer one
    ('Negotiate abc123==, bearer scope="c"', Challenge(None, ("c",), None)),  # token68, any case
    ('Bearer scope="a \\"b\\""', Challenge()),  # an escaped quote: no scope token, no scope
    ('Bearer scope="a", scope="b"', Challenge(None, ("a",), None)),  # the first counts
    ('Bearer scope="  "', Challenge(None, None, None)),  # no scope at all
    ("Bearer", Challenge()),
    ('Basic realm="x"', None),
    ("", None),
    (None, None),
    ('Bearer scope="' + "a" * 9000 + '"', None),  # past MAX_HEADER: not read
])
def test_a_challenge_is_read_strictly(header: str | None, expected: Challenge | None) -> None:
    assert bearer_challenge(header) == expected


def test_a_step_up_is_an_insufficient_scope_naming_a_scope() -> None:
    assert Challenge("insufficient_scope", ("a",)).insufficient_scope
    assert not Challenge("insufficient_scope", None).insufficient_scope
    assert not Challenge("invalid_token", ("a",)).insufficient_scope


@pytest.mark.parametrize(("url", "problem"), [
    ("https://as.test/x", None),
    ("http://127.0.0.1:8080/x", None),
    ("http://localhost:3000", None),
    ("http://[::1]:3000/", None),
    ("http://as.test/x", "http where https is required (only a loopback host may use http)"),
    ("http://10.0.0.1/x", "http where https is required (only a loopback host may use http)"),
    ("ftp://as.test/x", "not an absolute http(s) URL"),
    ("/relative", "not an absolute http(s) URL"),
    ("https://user:pw@as.test/", "carries credentials or a fragment"),
    ("https://as.test/#f", "carries credentials or a fragment"),
    ("https://as.test:notaport/", "not a URL"),
    (42, "not a URL"),
])
def test_what_may_be_asked(url: object, problem: str | None) -> None:
    assert unsafe(url) == problem


# -- where the documents are --------------------------------------------------------------------------
def test_resource_metadata_is_where_the_challenge_says_else_path_based_then_root() -> None:
    assert resource_metadata_urls(MCP, "https://mcp.test/custom.json") == ["https://mcp.test/custom.json"]
    assert resource_metadata_urls(MCP, None) == [PRM, "https://mcp.test/.well-known/oauth-protected-resource"]
    assert resource_metadata_urls("https://mcp.test", None) == [
        "https://mcp.test/.well-known/oauth-protected-resource"]


def test_authorization_server_metadata_in_the_mcp_order() -> None:
    assert server_metadata_urls("https://as.test/tenant1") == [
        "https://as.test/.well-known/oauth-authorization-server/tenant1",
        "https://as.test/.well-known/openid-configuration/tenant1",
        "https://as.test/tenant1/.well-known/openid-configuration"]
    assert server_metadata_urls("https://as.test") == server_metadata_urls("https://as.test/") == [
        AS_METADATA, "https://as.test/.well-known/openid-configuration"]


@pytest.mark.parametrize(("resource", "covers"), [
    (MCP, True), ("https://mcp.test", True), ("https://mcp.test/", True), ("https://MCP.test/mcp", True),
    ("https://mcp.test/mc", False), ("https://mcp.test/mcp/more", False), ("http://mcp.test/mcp", False),
    ("https://mcp.test:8443/mcp", False), ("https://evil.test/mcp", False), ("https://mcp.test/mcp#x", False),
])
def test_a_resource_covers_the_server_at_or_above_its_path(resource: str, covers: bool) -> None:
    assert serves(resource, MCP) is covers


# -- discovery ----------------------------------------------------------------------------------------
async def test_the_challenge_leads_to_the_metadata_and_its_scope_is_asked_for() -> None:
    where = site()
    found = await discovery(where).found()
    assert found == Found(ServerMetadata(AS, f"{AS}/authorize", f"{AS}/token", f"{AS}/register"),
                          ("mcp:basic",), MCP)
    assert where.asked == [f"POST {MCP}", f"GET {PRM}", f"GET {AS_METADATA}"]
    probe = where.requests[0]
    assert "authorization" not in probe.headers and probe.read() == \
        b'{"jsonrpc":"2.0","id":"mcp-preconditions-discovery","method":"tools/list"}'
    assert PROBE["method"] == "tools/list"  # never a call: it could run something


async def test_without_a_named_document_the_path_based_one_is_asked_first_and_the_root_never() -> None:
    where = site('Bearer realm="mcp"')
    where.answer("GET", "https://mcp.test/.well-known/oauth-protected-resource", 500)  # a trap
    found = await discovery(where).found()
    assert found.scope == ("mcp:all",)  # no scope in the challenge: the metadata's
    assert where.asked == [f"POST {MCP}", f"GET {PRM}", f"GET {AS_METADATA}"]


async def test_metadata_at_the_root_names_the_origin() -> None:
    where = site(None)
    del where.routes[("GET", PRM)]
    where.answer("GET", "https://mcp.test/.well-known/oauth-protected-resource", 200,
                 {"resource": "https://mcp.test", "authorization_servers": [AS]})
    found = await discovery(where).found()
    assert (found.resource, found.scope) == ("https://mcp.test", ())  # no scope anywhere: none
    assert where.asked[1:3] == [f"GET {PRM}", "GET https://mcp.test/.well-known/oauth-protected-resource"]


async def test_an_issuer_with_a_path_is_looked_for_in_order() -> None:
    tenant = "https://as.test/tenant1"
    where = site(prm={"resource": MCP, "authorization_servers": [tenant]})
    appended = "https://as.test/tenant1/.well-known/openid-configuration"
    where.answer("GET", appended, 200, as_metadata(tenant))
    where.answer("GET", AS_METADATA, 200, as_metadata())  # the root is never asked: a trap
    found = await discovery(where).found()
    assert found.server.issuer == tenant
    assert where.asked[2:] == ["GET https://as.test/.well-known/oauth-authorization-server/tenant1",
                               "GET https://as.test/.well-known/openid-configuration/tenant1",
                               f"GET {appended}"]


async def test_a_configured_issuer_or_endpoints_skip_the_server() -> None:
    where = site()
    assert (await discovery(where, issuer=AS).found()).server.issuer == AS
    assert where.asked == [f"GET {AS_METADATA}"]
    fixed = await discovery(where, authorization_endpoint=f"{AS}/a", token_endpoint=f"{AS}/t").found()
    assert fixed == Found(ServerMetadata(None, f"{AS}/a", f"{AS}/t"))
    assert len(where.requests) == 1


def _broken(kind: str) -> Site:
    prm: dict[str, Any] = {"resource": MCP, "authorization_servers": [AS]}
    if kind == "another resource":
        prm["resource"] = "https://evil.test/mcp"
    elif kind == "no authorization server":
        prm["authorization_servers"] = []
    elif kind == "an http issuer":
        prm["authorization_servers"] = ["http://as.test"]
    metadata = as_metadata()
    if kind == "another issuer":
        metadata["issuer"] = "https://attacker.test"
    elif kind == "a normalized issuer":
        metadata["issuer"] = AS + "/"
    elif kind == "no token endpoint":
        del metadata["token_endpoint"]
    elif kind == "an http endpoint":
        metadata["authorization_endpoint"] = "http://as.test/authorize"
    elif kind == "no pkce":
        del metadata["code_challenge_methods_supported"]
    elif kind == "bad scopes":
        prm["scopes_supported"] = ["a b"]
    challenge = 'Bearer resource_metadata="http://mcp.test/prm"' if kind == "an http document" else \
        f'Bearer resource_metadata="{PRM}"'
    where = site(challenge, prm, metadata)
    if kind == "no document":
        where.routes.pop(("GET", PRM))
    return where


@pytest.mark.parametrize(("kind", "reason"), [
    ("another resource", f"protected resource metadata at {PRM} names resource "
                         f"'https://evil.test/mcp', not the server at {MCP}"),
    ("no authorization server", f"protected resource metadata at {PRM} names no authorization server"),
    ("an http issuer", f"protected resource metadata at {PRM} names authorization server "
                       "'http://as.test': http where https is required (only a loopback host may use "
                       "http)"),
    ("another issuer", f"authorization server metadata at {AS_METADATA} names issuer "
                       "'https://attacker.test', not 'https://as.test'"),
    ("a normalized issuer", f"authorization server metadata at {AS_METADATA} names issuer "
                            "'https://as.test/', not 'https://as.test'"),
    ("no token endpoint", f"authorization server metadata at {AS_METADATA} has no 'token_endpoint'"),
    ("an http endpoint", f"authorization server metadata at {AS_METADATA}: authorization_endpoint "
                         "'http://as.test/authorize': http where https is required (only a "
                         "loopback host may use http)"),
    ("no pkce", f"authorization server metadata at {AS_METADATA} does not say it supports PKCE "
                "with S256 (code_challenge_methods_supported)"),
    ("bad scopes", f"metadata at {PRM} has an unusable scopes_supported"),
    ("an http document", f"the server at {MCP} names its resource metadata at "
                         "'http://mcp.test/prm': http where https is required (only a loopback host "
                         "may use http)"),
    ("no document", f"no protected resource metadata for the server at {MCP} ({PRM} answered HTTP "
                    "404): set issuer, or the endpoints"),
])
async def test_bad_metadata_is_never_used_and_says_why(kind: str, reason: str) -> None:
    with pytest.raises(CredentialBackendError) as failed:
        await discovery(_broken(kind)).found()
    assert str(failed.value) == reason


async def test_a_failed_look_up_is_remembered_for_five_seconds_then_made_again() -> None:
    where, clock = _broken("another issuer"), Clock()
    found = discovery(where, clock)
    for _ in range(3):
        with pytest.raises(CredentialBackendError, match="names issuer"):
            await found.found()
    assert len(where.requests) == 3  # one look-up (probe, resource, server) for three calls
    clock.now += 5
    where.answer("GET", AS_METADATA, 200, as_metadata())  # fixed meanwhile
    assert (await found.found()).server.issuer == AS
    assert len(where.requests) == 6


async def test_what_was_found_is_kept_until_forgotten() -> None:
    """SEP-2352: the server's authorization server may move; after a refused credential the
    gateway looks again (accounts.py forgets when a connection ends)."""
    where = site()
    found = discovery(where)
    await found.found()
    await found.found()
    assert len(where.requests) == 3
    moved = "https://as2.test"
    where.answer("GET", PRM, 200, {"resource": MCP, "authorization_servers": [moved]})
    where.answer("GET", "https://as2.test/.well-known/oauth-authorization-server", 200,
                 as_metadata(moved))
    assert (await found.found()).server.issuer == AS
    found.forget()
    assert (await found.found()).server.issuer == moved


async def test_an_unreachable_server_is_a_backend_failure() -> None:
    where = Site()  # nothing answers but 404: no challenge, no metadata
    with pytest.raises(CredentialBackendError, match="no protected resource metadata"):
        await discovery(where).found()
    assert where.asked[0] == f"POST {MCP}"
