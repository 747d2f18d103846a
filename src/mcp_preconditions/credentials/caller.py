"""Who a credential belongs to: a verified caller, named by issuer and subject (SPEC §14). Tokens,
connections, links and `state` values are all bound to one; an anonymous caller has none, and
neither has a token that names no subject (no `sub`: never named by its `client_id`).
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

from ..errors import NoCredentialError
from ..principal import Principal


class Caller(NamedTuple):
    """A verified caller: the `iss` of their token ("" when it has none) and their subject."""

    issuer: str
    subject: str

    @property
    def key(self) -> str:
        """`"<issuer> <subject>"`, as the per-subject secrets file names a caller."""
        return f"{self.issuer} {self.subject}"

    def digest(self) -> str:
        """A fixed-length name for storage keys (Redis), where the caller's own text need not appear."""
        return hashlib.sha256(f"{len(self.issuer)}:{self.key}".encode()).hexdigest()


def caller_of(principal: Principal | None) -> Caller | None:
    """The caller a principal is, or None (no principal, or no subject to name them by)."""
    if principal is None or principal.subject is None:
        return None
    issuer = principal.claims.get("iss")
    return Caller(issuer if isinstance(issuer, str) else "", principal.subject)


def known_caller(principal: Principal | None) -> Caller:
    """The caller a credential is for; NoCredentialError (the call is `unsatisfied`) for an
    unverified caller and for a token that names no subject."""
    caller = caller_of(principal)
    if caller is not None:
        return caller
    if principal is None:
        raise NoCredentialError("the caller is not verified: a credential is kept per known caller")
    raise NoCredentialError("the caller's token names no subject (no 'sub' claim): a credential is "
                            "kept per known caller")
