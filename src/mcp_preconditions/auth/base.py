"""The Authenticator protocol: turn what a call carried (Credentials) into an Identity, once per call.

Failures never raise out of `authenticate`: a bad token is an Identity with a readable failure, and
a backend that is down is an Identity with `error=True` (auth requirements then end as `error`).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ..principal import ANONYMOUS_IDENTITY, Credentials, Identity
from .header import MalformedCredentials


@runtime_checkable
class Authenticator(Protocol):
    async def authenticate(self, credentials: Credentials) -> Identity: ...


class PassThroughAuthenticator:
    """Accepts principals already verified by the host (MCP SDK / fastmcp auth, offline claims);
    refuses raw bearer tokens, since no verification is configured."""

    async def authenticate(self, credentials: Credentials) -> Identity:
        return self.authenticate_sync(credentials)

    def authenticate_sync(self, credentials: Credentials) -> Identity:
        if credentials.principal is not None:
            return Identity(principal=credentials.principal)
        if isinstance(credentials, MalformedCredentials):
            return Identity(failure=credentials.failure)
        if credentials.token is not None:
            return Identity(failure="a bearer token was presented but the policy configures no token "
                                    "verification ([auth] issuer and keys)")
        return ANONYMOUS_IDENTITY
