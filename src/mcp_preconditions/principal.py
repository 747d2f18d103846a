"""Who is calling: a verified principal (claims plus scopes), or the reason there is none.

Token verification (auth/) produces a Principal; the guard and resolvers only ever read one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

TokenKind = Literal["jwt", "opaque", "sdk", "claims"]


def scopes_from_claims(claims: Mapping[str, Any]) -> frozenset[str]:
    """Scopes from a space-delimited `scope` string and/or an `scp` array (exact strings)."""
    found: set[str] = set()
    scope = claims.get("scope")
    if isinstance(scope, str):
        found.update(s for s in scope.split(" ") if s)
    scp = claims.get("scp")
    if isinstance(scp, list):
        found.update(s for s in scp if isinstance(s, str) and s)
    elif isinstance(scp, str):
        found.update(s for s in scp.split(" ") if s)
    return frozenset(found)


def _finite_number(value: Any) -> float | None:
    """A NumericDate as a float; None for anything else (incl. integers too large for a float)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _subject_of(claims: Mapping[str, Any]) -> str | None:
    """The `sub` claim, or None: a token without one names no subject (SPEC §14). Never the
    `client_id` or another claim: a client registered under a person's name is not that person."""
    sub = claims.get("sub")
    return sub if isinstance(sub, str) and sub else None


@dataclass(frozen=True, slots=True)
class Principal:
    """A caller whose token was verified (or whose claims were supplied for an offline check)."""

    claims: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    scopes: frozenset[str] = frozenset()
    kind: TokenKind = "claims"
    expires_at: float | None = None
    # Who the caller is (`sub`; None without one: no subject, SPEC §14): derived from the claims
    # once, here, because every decision records it. Not a constructor argument; excluded from
    # equality and repr.
    subject: str | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.claims.__class__ is not MappingProxyType:  # a caller's dict: copied, read-only
            object.__setattr__(self, "claims", MappingProxyType(dict(self.claims)))
        object.__setattr__(self, "subject", _subject_of(self.claims))

    @classmethod
    def from_claims(cls, claims: Mapping[str, Any], kind: TokenKind = "claims",
                    scopes: frozenset[str] | None = None) -> Principal:
        frozen = MappingProxyType(dict(claims))
        expires = _finite_number(claims.get("exp"))
        return cls(frozen, scopes if scopes is not None else scopes_from_claims(claims), kind, expires)


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a call carried: a raw bearer token, an already-verified principal, or nothing."""

    token: str | None = field(default=None, repr=False)  # never shown in a repr or a log
    principal: Principal | None = None

    @property
    def anonymous(self) -> bool:
        return self.token is None and self.principal is None


ANONYMOUS = Credentials()


@dataclass(frozen=True, slots=True)
class Identity:
    """The authentication result for one call: a principal, or why there is none."""

    principal: Principal | None = None
    failure: str | None = None  # a readable reason ("token expired 312 s ago"), never the token
    error: bool = False  # True when the failure was a backend error (JWKS down), not a bad token
    # The sha256 of the bearer token this identity was verified from (`auth.cache.token_key`),
    # set only by the authenticator that verified that token and gives this identity for that
    # token alone (its cache is keyed by it): what a token's exchanged credential is cached by,
    # read instead of hashing the token again. None for every other identity. Never the token.
    token_key: bytes | None = field(default=None, repr=False, compare=False)

    @property
    def subject(self) -> str | None:
        return self.principal.subject if self.principal else None


ANONYMOUS_IDENTITY = Identity(failure="no access token")


class _VerifiedIdentity:
    """`Identity(principal=p)` without the frozen-dataclass setattr cost (built on every call of a
    caller the host verified): same slots, plain stores, then the instance becomes an Identity
    (`__class__` assignment between layout-identical classes; see outcomes.py)."""

    __slots__ = Identity.__slots__

    def __init__(self, principal: Principal) -> None:
        self.principal = principal
        self.failure = None
        self.error = False
        self.token_key = None
        self.__class__ = Identity  # type: ignore[assignment]


# `Identity(principal=principal)`, ~4x cheaper; an ordinary, immutable, equal Identity.
verified_identity: Callable[[Principal], Identity] = _VerifiedIdentity  # type: ignore[assignment]
