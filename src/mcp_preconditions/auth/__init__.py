"""Access-token verification: JWT (RFC 9068) via JWKS, opaque tokens via RFC 7662 introspection.

`build_authenticator(policy_source)` returns what the policy's `[auth]` section asks for; every
authenticator turns Credentials into an Identity and never raises.
"""

from __future__ import annotations

from .base import Authenticator, PassThroughAuthenticator
from .build import build_authenticator, verification_configured
from .cache import IdentityCache
from .header import MALFORMED_HEADER, MalformedCredentials, credentials_from_authorization_header
from .introspection import Introspector
from .jwt_verifier import JwtVerifier
from .keys import KeySet, VerificationKey
from .verifier import TokenAuthenticator

__all__ = [
    "MALFORMED_HEADER", "Authenticator", "IdentityCache", "Introspector", "JwtVerifier", "KeySet",
    "MalformedCredentials", "PassThroughAuthenticator", "TokenAuthenticator", "VerificationKey",
    "build_authenticator", "credentials_from_authorization_header", "verification_configured",
]
