"""Access-token verification: JWT (RFC 9068) via JWKS, opaque tokens via RFC 7662 introspection.

`build_authenticator(policy_source)` returns what the policy's `[auth]` section asks for; every
authenticator turns Credentials into an Identity and never raises.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .base import Authenticator, PassThroughAuthenticator
from .build import build_authenticator, verification_configured
from .cache import IdentityCache
from .header import MALFORMED_HEADER, MalformedCredentials, credentials_from_authorization_header

if TYPE_CHECKING:
    from .introspection import Introspector
    from .jwt_verifier import JwtVerifier
    from .keys import KeySet, VerificationKey
    from .verifier import TokenAuthenticator

# Imported on first use (PEP 562): they need httpx2, PyJWT and cryptography, which a policy without
# token verification never loads.
_LAZY = {"Introspector": ".introspection", "JwtVerifier": ".jwt_verifier", "KeySet": ".keys",
         "VerificationKey": ".keys", "TokenAuthenticator": ".verifier"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "MALFORMED_HEADER", "Authenticator", "IdentityCache", "Introspector", "JwtVerifier", "KeySet",
    "MalformedCredentials", "PassThroughAuthenticator", "TokenAuthenticator", "VerificationKey",
    "build_authenticator", "credentials_from_authorization_header", "verification_configured",
]
