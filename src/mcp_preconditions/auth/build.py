"""From a policy's `[auth]` section to an Authenticator: the settings are checked as a whole (every
problem listed by key path, like the policy loader) and static keys are loaded once, at start-up.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ..errors import FileReadError, PolicyError
from ..files import read_bounded
from ..policy.load import PolicySource
from ..policy.model import HMAC_ALGORITHMS, Auth
from .base import Authenticator, PassThroughAuthenticator
from .cache import IdentityCache

if TYPE_CHECKING:  # the verifiers (httpx2, PyJWT, cryptography: 30 MB) are imported when a policy
    # asks for verification, never for one without [auth]
    from .keys import VerificationKey

log = logging.getLogger("mcp_preconditions.auth")


def verification_configured(auth: Auth) -> bool:
    """True when `[auth]` asks for token verification (not only claim aliases / scope rules)."""
    return bool(auth.issuer or auth.jwks_uri or auth.discovery or auth.keys or auth.public_keys_pem
                or auth.introspection)


def build_authenticator(source: PolicySource) -> Authenticator:
    """The authenticator a policy's `[auth]` section asks for: a TokenAuthenticator when it configures
    an issuer, keys or introspection, else a PassThroughAuthenticator. Raises PolicyError naming
    every inconsistent setting."""
    auth = source.policy.auth
    if not verification_configured(auth):
        return PassThroughAuthenticator()
    from .introspection import Introspector
    from .jwt_verifier import JwtVerifier
    from .keys import KeySet
    from .verifier import TokenAuthenticator

    problems = settings_problems(auth)
    static = static_keys(source, problems)
    if problems:
        raise PolicyError(source.source, problems)
    jwt_verifier = None
    if wants_jwt(auth):
        keys = KeySet(static, jwks_uri=auth.jwks_uri, issuer=auth.issuer, discovery=auth.discovery,
                      timeout=auth.fetch_timeout_seconds,
                      refetch_interval=auth.jwks_refetch_interval_seconds)
        jwt_verifier = JwtVerifier(auth, keys)
    introspector = None
    if auth.introspection is not None:
        aud = auth.audience
        introspector = Introspector(auth.introspection, issuer=auth.issuer,
                                    audiences=[aud] if isinstance(aud, str) else aud or [],
                                    leeway=auth.leeway_seconds)
        missing = introspector.missing_credentials()
        if missing:  # not fatal here: JWTs still verify, and opaque tokens fail closed until set
            log.warning("%s: auth.introspection: environment variable(s) %s not set; opaque tokens "
                        "will be refused", source.source, ", ".join(missing))
    return TokenAuthenticator(jwt_verifier=jwt_verifier, introspector=introspector,
                              max_token_bytes=auth.max_token_bytes,
                              cache=IdentityCache(auth.cache_max_entries, auth.cache_ttl_seconds))


def wants_jwt(auth: Auth) -> bool:
    return bool(auth.jwks_uri or auth.discovery or auth.keys or auth.public_keys_pem)


def settings_problems(auth: Auth) -> list[str]:
    """What makes an `[auth]` section unusable for verification, by key path."""
    problems: list[str] = []
    if wants_jwt(auth):
        if auth.issuer is None:
            problems.append("auth.issuer: required to verify JWT access tokens (their 'iss' must match)")
        if auth.audience is None:
            problems.append("auth.audience: required to verify JWT access tokens (their 'aud' must "
                            "name this server)")
        if auth.discovery and auth.jwks_uri:
            problems.append("auth.discovery: set either jwks_uri or discovery = true, not both")
        hmac = sorted(set(auth.algorithms) & HMAC_ALGORITHMS)
        if hmac:
            problems.append(f"auth.algorithms: {', '.join(hmac)} need(s) a shared secret, which a "
                            "policy file must not hold; use asymmetric algorithms")
    elif auth.introspection is None:
        problems.append("auth: issuer is set but nothing verifies tokens: set jwks_uri, "
                        "discovery = true, keys or public_keys_pem, or [auth.introspection]")
    if auth.introspection is not None and auth.audience is None:
        # Without it, any active token of the authorization server would do, whatever it was
        # issued for (token passthrough, confused deputy).
        problems.append("auth.audience: required with auth.introspection (the token's 'aud' must "
                        "name this server)")
    urls = {"auth.jwks_uri": auth.jwks_uri,
            "auth.issuer": auth.issuer if auth.discovery else None,
            "auth.introspection.endpoint": auth.introspection.endpoint if auth.introspection else None}
    for path, url in urls.items():
        if url is not None and not _http_url(url):
            problems.append(f"{path}: must be an http(s) URL, not {url!r}")
    return problems


def static_keys(source: PolicySource, problems: list[str]) -> list[VerificationKey]:
    """The policy's `keys` (JWKs) and `public_keys_pem` (PEM text, or a file relative to the policy);
    unusable ones are added to `problems`."""
    from .keys import key_from_jwk

    auth = source.policy.auth
    keys: list[tuple[str, VerificationKey]] = []
    for index, jwk in enumerate(auth.keys):
        path = f"auth.keys[{index}]"
        if jwk.get("kty") == "oct" or "d" in jwk:
            problems.append(f"{path}: a secret or private key must not sit in a policy file; "
                            "give the public key")
            continue
        try:
            keys.append((path, key_from_jwk(jwk)))
        except ValueError as exc:
            problems.append(f"{path}: {exc}")
    pems = auth.public_keys_pem
    for path, entry in ([("auth.public_keys_pem", pems)] if isinstance(pems, str) else
                        [(f"auth.public_keys_pem[{i}]", pem) for i, pem in enumerate(pems)]):
        key = _pem_key(source, path, entry, problems)
        if key is not None:
            keys.append((path, key))
    for path, key in keys:
        if all(key.unfit_for(alg) for alg in auth.algorithms):
            problems.append(f"{path}: this {key.kty} key cannot verify any allowed algorithm "
                            f"({', '.join(auth.algorithms)})")
    return [key for _, key in keys]


def _pem_key(source: PolicySource, path: str, entry: str, problems: list[str]) -> VerificationKey | None:
    """One `public_keys_pem` entry: PEM text, else a file relative to the policy holding one."""
    if entry.lstrip().startswith("-----BEGIN"):
        data, where = entry.encode(), ""
    else:
        file = source.resolve_path(entry)
        shown = f"{entry!r}" if str(file) == entry else f"{entry!r} ({file})"
        try:
            data = read_bounded(file)
        except FileReadError as exc:
            problems.append(f"{path}: {shown} is neither PEM text ('-----BEGIN PUBLIC KEY-----') "
                            f"nor a readable file ({exc.problem})")
            return None
        where = f"{shown}: "
    from .keys import key_from_pem

    try:
        return key_from_pem(data)
    except ValueError as exc:
        problems.append(f"{path}: {where}{exc}")
        return None


def _http_url(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.netloc)
