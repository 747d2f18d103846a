"""What `[servers.KEY.credentials]` asks for (SPEC §14), its `env:VAR` references already resolved:
one frozen value per kind, built by the gateway's config loader and read by this package.

Secrets (client secrets, the encryption key) are never part of a repr.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

TOKEN_EXCHANGE = "token-exchange"
OAUTH = "oauth"
PER_SUBJECT = "per-subject"
KINDS = (TOKEN_EXCHANGE, OAUTH, PER_SUBJECT)

ClientAuth = Literal["client_secret_basic", "client_secret_post", "none"]
StoreKind = Literal["memory", "redis"]
DEFAULT_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class Client:
    """The gateway's registration at an authorization server, and how it authenticates there
    (`none`: a public client, its id in the form and no secret)."""

    client_id: str
    client_secret: str = field(repr=False)
    auth: ClientAuth = "client_secret_basic"


@dataclass(frozen=True)
class TokenExchangeSettings:
    """`kind = "token-exchange"`: RFC 8693 at the caller's authorization server."""

    kind: ClassVar[str] = TOKEN_EXCHANGE
    token_endpoint: str
    client: Client
    audience: str | None = None
    resource: str | None = None
    scope: tuple[str, ...] = ()
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS


@dataclass(frozen=True)
class OAuthSettings:
    """`kind = "oauth"`: an account each caller connects once (authorization code with PKCE). The
    authorization server is discovered from the server itself (`server_url`: its 401 challenge and
    protected resource metadata, SPEC §17), or found from `issuer` (RFC 8414), or named by its two
    endpoints. `client` None: the gateway registers itself (a Client ID Metadata Document it
    serves, or dynamic registration). `scope` empty: the scopes the server asks for; `resource`
    None: the server's URL (RFC 8707)."""

    kind: ClassVar[str] = OAUTH
    client: Client | None
    encryption_key: bytes = field(repr=False)  # 32 bytes: AES-256-GCM
    issuer: str | None = None
    authorization_endpoint: str | None = None
    token_endpoint: str | None = None
    scope: tuple[str, ...] = ()
    resource: str | None = None
    store: StoreKind = "memory"
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    server_url: str | None = None


@dataclass(frozen=True)
class PerSubjectSettings:
    """`kind = "per-subject"`: a secret per verified caller, from a JSON file."""

    kind: ClassVar[str] = PER_SUBJECT
    secrets: str  # the file's path
    header: str = "Authorization"


CredentialSettings = TokenExchangeSettings | OAuthSettings | PerSubjectSettings


@dataclass(frozen=True)
class SignInSettings:
    """`[auth.sign_in]`: the gateway as an OpenID Connect client of `[auth]`'s issuer, for people
    signing in to its pages (connect links, approvals)."""

    issuer: str
    client: Client
    algorithms: tuple[str, ...] = ("RS256", "ES256")
    jwks_uri: str | None = None  # None: from the issuer's metadata
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
