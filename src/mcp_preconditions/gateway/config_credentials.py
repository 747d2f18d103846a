"""`[servers.KEY.credentials]` of a gateway.toml (SPEC §14): how each caller's own credential for a
server is obtained (`token-exchange`, `oauth`, `per-subject`). The tables are checked like the rest of
the file (every problem by key path); then their `env:VAR` references are read, the encryption key
decoded and the secrets file checked, giving the settings `mcp_preconditions.credentials` serves.

    [servers.crm.credentials]
    kind = "token-exchange"
    token_endpoint = "https://idp.example.com/oauth2/token"
    client_id = "env:GW_CLIENT_ID"
    client_secret = "env:GW_CLIENT_SECRET"
    audience = "https://crm.example.com"
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from ..credentials.per_subject import load_secrets
from ..credentials.settings import (
    Client,
    CredentialSettings,
    OAuthSettings,
    PerSubjectSettings,
    TokenExchangeSettings,
)
from ..errors import InputError
from ..policy.load import key_path
from .config_values import ENV_REF, HEADER_NAME, Strict, env_value, http_url

_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")  # RFC 6749 §3.3


def _secret_ref(value: str) -> str:
    if not ENV_REF.fullmatch(value):  # never shown: it may be the secret itself
        raise ValueError("must be env:VAR, naming an environment variable (a secret is never written "
                         "in this file)")
    return value


def _scope(value: list[str]) -> list[str]:
    for token in value:
        if not _SCOPE_TOKEN.fullmatch(token):
            raise ValueError(f"not a scope token (RFC 6749 §3.3): {token!r}")
    return value


def located(field_name: str, message: str) -> ValidationError:
    """A problem of a whole table reported at one of its keys, whether the file sets it or not
    (the loader keeps a key path's last part, absent from the file, for a "missing" error)."""
    return ValidationError.from_exception_data("credentials", [InitErrorDetails(
        type=PydanticCustomError("missing", message), loc=(field_name,), input=None)])


Url = Annotated[str, Field(min_length=1), AfterValidator(http_url)]
SecretRef = Annotated[str, AfterValidator(_secret_ref)]
Scope = Annotated[list[str], AfterValidator(_scope)]
Timeout = Annotated[float, Field(gt=0, le=600, allow_inf_nan=False)]
TEXT_OR_ENV = 'literal, or "env:VAR" (the gateway\'s $VAR)'
ClientAuth = Literal["client_secret_basic", "client_secret_post"]
OAuthClientAuth = Literal["client_secret_basic", "client_secret_post", "none"]


class TokenExchangeEntry(Strict):
    """`kind = "token-exchange"`: RFC 8693 at the caller's authorization server."""

    kind: Literal["token-exchange"]
    token_endpoint: Url
    client_id: str = Field(min_length=1, description=TEXT_OR_ENV)
    client_secret: SecretRef = Field(description='"env:VAR"')
    token_endpoint_auth: ClientAuth = "client_secret_basic"
    audience: str | None = Field(default=None, min_length=1)
    resource: Url | None = Field(default=None, description="RFC 8707 resource indicator")
    scope: Scope = Field(default_factory=list)
    timeout_seconds: Timeout = 10.0

    @model_validator(mode="after")
    def _targeted(self) -> TokenExchangeEntry:
        if self.audience is None and self.resource is None:  # a token for anything: refused
            raise located("audience", "set audience or resource (or both): the token the server "
                                       "gets must be issued for it")
        return self


class OAuthEntry(Strict):
    """`kind = "oauth"`: each caller connects an account of their own, once. With nothing else
    set, everything is discovered from the server (SPEC §17) and the gateway registers itself."""

    kind: Literal["oauth"]
    issuer: Url | None = Field(default=None, description="RFC 8414 discovery (default: the server "
                                                          "names its authorization server)")
    authorization_endpoint: Url | None = None
    token_endpoint: Url | None = None
    client_id: str | None = Field(default=None, min_length=1, description=TEXT_OR_ENV + " (default: "
                                  "a Client ID Metadata Document, or dynamic registration)")
    client_secret: SecretRef | None = Field(default=None, description='"env:VAR"')
    token_endpoint_auth: OAuthClientAuth = "client_secret_basic"
    scope: Scope = Field(default_factory=list, description="default: what the server asks for")
    resource: Url | None = Field(default=None, description="RFC 8707 resource indicator (default: "
                                                            "the server's URL)")
    encryption_key: SecretRef = Field(description='"env:VAR": 32 bytes, base64 (tokens are kept '
                                                  'encrypted with it)')
    store: Literal["memory", "redis"] = Field(default="memory",
                                              description='"redis": the policy\'s [state.redis]')
    timeout_seconds: Timeout = 10.0

    @model_validator(mode="after")
    def _one_server(self) -> OAuthEntry:
        endpoints = (self.authorization_endpoint, self.token_endpoint)
        if endpoints != (None, None):
            if self.issuer is not None:
                raise located("issuer", "set issuer (discovery) or the two endpoints, not both")
            if None in endpoints:
                missing = "authorization_endpoint" if endpoints[0] is None else "token_endpoint"
                raise located(missing, "set both authorization_endpoint and token_endpoint (or "
                                       "neither: they are discovered)")
            if self.client_id is None:
                raise located("client_id", "required with the two endpoints: nothing is discovered, "
                                           "so the gateway cannot register itself")
        return self

    @model_validator(mode="after")
    def _one_client(self) -> OAuthEntry:
        if self.client_id is None and self.client_secret is not None:
            raise located("client_id", "required with client_secret")
        if self.client_id is not None and self.client_secret is None and \
                self.token_endpoint_auth != "none":
            raise located("client_secret", 'required with client_id (or token_endpoint_auth = '
                                           '"none": a public client)')
        if self.client_secret is not None and self.token_endpoint_auth == "none":
            raise located("client_secret", 'a public client (token_endpoint_auth = "none") has no '
                                           'secret')
        return self


class PerSubjectEntry(Strict):
    """`kind = "per-subject"`: a secret per verified caller, from a JSON file."""

    kind: Literal["per-subject"]
    header: str = Field(default="Authorization", description="the header the secret is sent in")
    secrets: str = Field(min_length=1, description='a JSON file {"<issuer> <subject>": "..."}, '
                                                   'relative to this file, or "env:VAR" naming it')

    @field_validator("header")
    @classmethod
    def _header(cls, value: str) -> str:
        if not HEADER_NAME.fullmatch(value):
            raise ValueError(f"not an HTTP header name: {value!r}")
        return value


CREDENTIAL_KINDS = ("token-exchange", "oauth", "per-subject")


def _known_kind(value: Any) -> Any:
    """An unknown or missing kind, reported at `credentials.kind` (not at the whole table)."""
    if isinstance(value, dict) and value.get("kind") not in CREDENTIAL_KINDS:
        kind = value.get("kind")
        expected = ", ".join(repr(k) for k in CREDENTIAL_KINDS)
        error = (PydanticCustomError("missing", "Field required (one of {expected})", {"expected": expected})
                 if kind is None else
                 PydanticCustomError("credentials_kind", "Input should be one of {expected}, got {got}",
                                     {"expected": expected, "got": repr(kind)}))
        raise ValidationError.from_exception_data("credentials", [InitErrorDetails(
            type=error, loc=("kind",), input=kind)])
    return value


CredentialsEntry = Annotated[TokenExchangeEntry | OAuthEntry | PerSubjectEntry,
                             Field(discriminator="kind"), BeforeValidator(_known_kind)]


def credential_settings(entry: TokenExchangeEntry | OAuthEntry | PerSubjectEntry, where: tuple[str, ...],
                        base: Path, problems: list[str], url: str | None = None
                        ) -> CredentialSettings | None:
    """The settings of a checked `credentials` table, its references read (`where`: its key path;
    `base`: the directory relative paths start from; `url`: the server's); None, with the problems
    added, when one cannot be read."""
    before = len(problems)
    if isinstance(entry, PerSubjectEntry):
        secrets = env_value(entry.secrets, (*where, "secrets"), problems)
        if secrets is None:
            return None
        path = str(base / secrets)
        try:
            load_secrets(path)
        except InputError as exc:
            problems.append(f"{key_path((*where, 'secrets'))}: {exc}")
            return None
        return PerSubjectSettings(path, entry.header)
    if isinstance(entry, TokenExchangeEntry):
        client = _client(entry.client_id, entry.client_secret, entry.token_endpoint_auth, where,
                         problems)
        return None if client is None or len(problems) > before else TokenExchangeSettings(
            entry.token_endpoint, client, entry.audience, entry.resource, tuple(entry.scope),
            entry.timeout_seconds)
    client = None
    if entry.client_id is not None:
        client = _client(entry.client_id, entry.client_secret, entry.token_endpoint_auth, where,
                         problems)
    key = _encryption_key(entry.encryption_key, (*where, "encryption_key"), problems)
    if key is None or len(problems) > before:
        return None
    return OAuthSettings(client, key, entry.issuer, entry.authorization_endpoint, entry.token_endpoint,
                         tuple(entry.scope), entry.resource, entry.store, entry.timeout_seconds, url)


def _client(client_id: str, secret_ref: str | None, auth: OAuthClientAuth, where: tuple[str, ...],
            problems: list[str]) -> Client | None:
    """The configured client, its references read (a public client has no secret)."""
    found = env_value(client_id, (*where, "client_id"), problems)
    secret = "" if secret_ref is None else env_value(secret_ref, (*where, "client_secret"), problems)
    return None if found is None or secret is None else Client(found, secret, auth)


def _encryption_key(reference: str, where: tuple[str, ...], problems: list[str]) -> bytes | None:
    text = env_value(reference, where, problems)
    if text is None:
        return None
    from ..credentials.sealing import key_from_text  # cryptography: only for a config that seals

    try:
        return key_from_text(text)
    except ValueError as exc:  # the key itself is never shown
        problems.append(f"{key_path(where)}: ${reference.removeprefix('env:')} {exc}")
        return None
