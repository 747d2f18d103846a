"""What a caller's request to a server carries (a `Credential`: one header), and the answer of one
attempt to get it (`Obtained`: the `credential:KEY` outcome, the credential when there is one, and
what a decision record and a metric may say about it).

A Credential is deliberately not a dataclass and never shows its value: not in a repr, an outcome's
reason, a record, a metric or a span. Only `headers()` gives it, to the upstream request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..outcomes import Outcome, Status

Result = Literal["obtained", "cached", "refused", "error"]


class Credential:
    """One header for one caller's requests to one server, until `expires_at` (None: no expiry
    known)."""

    __slots__ = ("_value", "expires_at", "header", "kind")

    def __init__(self, header: str, value: str, kind: str, expires_at: float | None = None) -> None:
        self.header = header
        self._value = value
        self.kind = kind
        self.expires_at = expires_at

    @classmethod
    def bearer(cls, token: str, kind: str, expires_at: float | None = None) -> Credential:
        return cls("Authorization", f"Bearer {token}", kind, expires_at)

    def headers(self) -> dict[str, str]:
        """The header to put on the upstream request (and nowhere else)."""
        return {self.header: self._value}

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

    @property
    def result(self) -> Result:
        """The label of `mcp_preconditions_credentials_total{result}`."""
        status = self.outcome.status
        if status is Status.SATISFIED:
            return "cached" if self.cached else "obtained"
        return "refused" if status is Status.UNSATISFIED else "error"

    def record(self) -> dict[str, object]:
        """What a decision record says: `{"kind": KIND, "cached": BOOL}`."""
        return {"kind": self.kind, "cached": self.cached}
