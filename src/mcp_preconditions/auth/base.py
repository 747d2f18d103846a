"""The Authenticator protocol: turn what a call carried (Credentials) into an Identity, once per call.

Failures never raise out of `authenticate`: a bad token is an Identity with a readable failure, and
a backend that is down is an Identity with `error=True` (auth requirements then end as `error`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from ..principal import ANONYMOUS_IDENTITY, Credentials, Identity, Principal, verified_identity
from .header import MalformedCredentials

log = logging.getLogger("mcp_preconditions.auth")


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
    """`authenticator.authenticate_now`, when it mirrors the `authenticate` in effect; else None.

    It does only when it is defined where that `authenticate` is, or further down: a subclass (or
    an instance) that overrides `authenticate` alone must be asked through `authenticate`, never
    answered by the `authenticate_now` it inherited from a class whose `authenticate` it replaced.
    """
    try:
        now = getattr(authenticator, "authenticate_now", None)
        if not callable(now):
            return None
        return now if _level("authenticate_now", authenticator) <= _level("authenticate",
                                                                           authenticator) else None
    except Exception:  # an odd authenticator: use `authenticate` alone
        return None


def _level(name: str, obj: object) -> float:
    """Where `name` is defined for `obj`: -1 on the instance, else its class's index in the MRO."""
    if name in getattr(obj, "__dict__", {}):
        return -1
    for index, cls in enumerate(type(obj).__mro__):
        if name in vars(cls):
            return index
    return float("inf")


class PassThroughAuthenticator:
    """Accepts principals already verified by the host (MCP SDK / fastmcp auth, offline claims);
    refuses raw bearer tokens, since no verification is configured."""

    def __init__(self) -> None:
        # The identity of the last principal seen: a host that hands the same (immutable) Principal
        # on every call (a session's user) is not given a new Identity for each call.
        self._last: tuple[Principal, Identity] | None = None

    async def authenticate(self, credentials: Credentials) -> Identity:
        return self.authenticate_now(credentials)

    def authenticate_now(self, credentials: Credentials) -> Identity:
        principal = credentials.principal
        if principal is not None:
            last = self._last
            if last is not None and last[0] is principal:
                return last[1]
            identity = verified_identity(principal)
            self._last = (principal, identity)
            return identity
        if isinstance(credentials, MalformedCredentials):
            return refused(Identity(failure=credentials.failure))
        if credentials.token is not None:
            return refused(Identity(failure="a bearer token was presented but the policy configures "
                                             "no token verification ([auth] issuer and keys)"))
        return ANONYMOUS_IDENTITY


def refused(identity: Identity) -> Identity:
    """A refused token's identity, logged at WARNING with its reason, never the token (SPEC §15:
    the operator sees why; `gateway --log-level`)."""
    if identity.error:
        log.warning("bearer token not verified (a backend failed): %s", identity.failure)
    else:
        log.warning("bearer token refused: %s", identity.failure)
    return identity


# -- the identities the guard gives when it cannot, or need not, verify (guard.py) ------------------
NO_IDENTITY = Identity(failure="not needed")
CANCELLED = Identity(failure="authentication failed: the authenticator was cancelled", error=True)


def named_now(now: AuthenticateNow | None, credentials: Credentials) -> Identity | None:
    """Who is calling, to name the caller of a call that its identity does not decide: a principal
    the host verified, nobody (no token), or the authenticator's synchronous answer for a token (a
    cached one). None: the token must be verified (awaited) to know."""
    principal = credentials.principal
    if principal is not None:
        return verified_identity(principal)
    if credentials.token is None or now is None:
        return NO_IDENTITY if credentials.token is None else None
    try:
        identity = now(credentials)
    except Exception:  # fail closed does not apply (nothing is decided by it): the caller is unknown
        return NO_IDENTITY
    return identity if identity is None or isinstance(identity, Identity) else NO_IDENTITY


def failed_identity(exc: Exception) -> Identity:
    """An authenticator that raised: an `error` identity (fail closed)."""
    return Identity(failure=f"authentication failed: {type(exc).__name__}", error=True)


def not_an_identity(value: object) -> Identity:
    """An authenticator that answered something else: an `error` identity too."""
    return Identity(failure=f"authentication failed: the authenticator returned "
                            f"{type(value).__name__}, not an Identity", error=True)
