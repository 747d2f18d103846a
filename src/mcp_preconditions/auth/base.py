"""The Authenticator protocol: turn what a call carried (Credentials) into an Identity, once per call.

Failures never raise out of `authenticate`: a bad token is an Identity with a readable failure, and
a backend that is down is an Identity with `error=True` (auth requirements then end as `error`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from ..principal import ANONYMOUS_IDENTITY, Credentials, Identity, verified_identity
from .header import MalformedCredentials


@runtime_checkable
class Authenticator(Protocol):
    """`authenticate` is all an authenticator needs. It may also offer
    `authenticate_now(credentials) -> Identity | None`: the Identity when it is known without I/O
    (a principal the host verified, no token, a cached token), else None; the guard calls it first
    and awaits `authenticate` only on None. Both must give the same answer."""

    async def authenticate(self, credentials: Credentials) -> Identity: ...


# The optional synchronous fast path of an Authenticator (see `Authenticator`).
AuthenticateNow = Callable[[Credentials], "Identity | None"]


def authenticate_now_of(authenticator: Authenticator) -> AuthenticateNow | None:
    """`authenticator.authenticate_now` when it has a callable one, else None."""
    now = getattr(authenticator, "authenticate_now", None)
    return now if callable(now) else None


class PassThroughAuthenticator:
    """Accepts principals already verified by the host (MCP SDK / fastmcp auth, offline claims);
    refuses raw bearer tokens, since no verification is configured."""

    async def authenticate(self, credentials: Credentials) -> Identity:
        return self.authenticate_now(credentials)

    def authenticate_now(self, credentials: Credentials) -> Identity:
        if credentials.principal is not None:
            return verified_identity(credentials.principal)
        if isinstance(credentials, MalformedCredentials):
            return Identity(failure=credentials.failure)
        if credentials.token is not None:
            return Identity(failure="a bearer token was presented but the policy configures no token "
                                    "verification ([auth] issuer and keys)")
        return ANONYMOUS_IDENTITY
