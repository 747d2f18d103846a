"""What a caller's request to a server carries (a `Credential`: one header), and the answer of one
attempt to get it (`Obtained`: the `credential:KEY` outcome, the credential when there is one, and
what a decision record and a metric may say about it).

A Credential is deliberately not a dataclass and never shows its value: not in a repr, an outcome's
reason, a record, a metric or a span. Only `headers()` gives it, to the upstream request. What every
call with one credential carries is built once (its header block, its `Obtained` when it is at hand,
whom it is sent as): a cached credential's call builds nothing of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..outcomes import Outcome, Status

Result = Literal["obtained", "cached", "refused", "error"]


class Credential:
    """One header for one caller's requests to one server, until `expires_at` (None: no expiry
    known)."""

    __slots__ = ("_headers", "_value", "at_hand", "expires_at", "header", "held", "kind")

    def __init__(self, header: str, value: str, kind: str, expires_at: float | None = None) -> None:
        self.header = header
        self._value = value
        self.kind = kind
        self.expires_at = expires_at
        self._headers: Mapping[str, str] = {header: value}  # built once: read by every request
        # Built once, for every call this credential is at hand for: its `Obtained`
        # (resolver.obtain_now), and what a call holds of it (stage.py `HeldCredential`, and in it
        # whom the gateway sends the request as), the latter for one principal object only.
        self.at_hand: Obtained | None = None
        self.held: Any = None

    @classmethod
    def bearer(cls, token: str, kind: str, expires_at: float | None = None) -> Credential:
        return cls("Authorization", f"Bearer {token}", kind, expires_at)

    def headers(self) -> Mapping[str, str]:
        """The header to put on the upstream request (and nowhere else): one mapping, the same
        for every request (read, never changed)."""
        return self._headers

    def same(self, other: Credential | None) -> bool:
        """Whether `other` carries the same header value (a renewed credential may not)."""
        return other is not None and other.header == self.header and other._value == self._value

    def __repr__(self) -> str:
        return f"Credential({self.kind}, {self.header}: <redacted>)"

    def __reduce__(self) -> str | tuple[object, ...]:
        raise TypeError("a Credential is not pickled or copied out of the process")


@dataclass(frozen=True, slots=True)
class Obtained:
    """One attempt at a caller's credential for one server: the `credential:KEY` outcome (its reason
    names no secret), the credential when the outcome is satisfied, the kind, and whether an
    authorization server was asked for this call (`cached` False)."""

    outcome: Outcome
    kind: str
    cached: bool
    credential: Credential | None = field(default=None, repr=False, compare=False)
    # The label of `mcp_preconditions_credentials_total{result}` (computed once: an Obtained at
    # hand is counted on every call it serves).
    result: Result = field(init=False, repr=False, compare=False)
    # What a decision record says, `{"kind": KIND, "cached": BOOL}`: built once (an Obtained at
    # hand notes it on every call it serves), read and never changed.
    note: Mapping[str, object] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        status = self.outcome.status
        if status is Status.SATISFIED:
            result: Result = "cached" if self.cached else "obtained"
        else:
            result = "refused" if status is Status.UNSATISFIED else "error"
        object.__setattr__(self, "result", result)
        object.__setattr__(self, "note", {"kind": self.kind, "cached": self.cached})

    def record(self) -> dict[str, object]:
        """What a decision record says: `{"kind": KIND, "cached": BOOL}` (a copy of `note`)."""
        return dict(self.note)
