"""What an approval is bound to (SPEC §15): the approval's name, the visible tool name, the canonical
JSON (RFC 8785) of the call's arguments, the caller (issuer and subject) and the policy revision. An
approval serves a call only when all of these are equal, code point for code point.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..canonical import canonical_json
from ..principal import Identity

# Arguments larger than this (as canonical JSON) are not bound: an approver could not read them,
# and a store would keep them for every pending request.
MAX_ARGUMENTS_BYTES = 65_536


@dataclass(frozen=True, slots=True)
class Party:
    """A verified person or client: the token's issuer (`iss`, "" when it has none) and subject
    (`sub`, else `client_id`: the subject every decision record names)."""

    issuer: str
    subject: str

    @classmethod
    def of(cls, identity: Identity) -> Party | None:
        """The party of a verified identity; None for an anonymous or unverified caller."""
        principal = identity.principal
        if principal is None or principal.subject is None:
            return None
        issuer = principal.claims.get("iss")
        return cls(issuer if isinstance(issuer, str) else "", principal.subject)

    def to_dict(self) -> dict[str, str]:
        return {"issuer": self.issuer, "subject": self.subject}


@dataclass(frozen=True, slots=True)
class Binding:
    """One call as an approval sees it. `key` (a SHA-256 of the canonical JSON of every part) is
    what a store files it under: no subject or argument appears in a store key. `caller` is None
    for an anonymous caller, whom only a `self` approval serves (the question goes to that very
    connection)."""

    approval: str
    tool: str
    arguments: str  # canonical JSON
    caller: Party | None
    revision: str
    key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        who = [self.caller.issuer, self.caller.subject] if self.caller is not None else None
        parts = canonical_json([self.approval, self.tool, self.arguments, who, self.revision])
        object.__setattr__(self, "key", hashlib.sha256(parts.encode()).hexdigest())


def bind(approval: str, tool: str, arguments: Mapping[str, Any] | None, identity: Identity,
         revision: str) -> Binding | str:
    """The binding of one call, or why the call cannot be bound (its arguments have no canonical
    form or are too large). Absent arguments are `{}`."""
    try:
        text = canonical_json(dict(arguments or {}))
    except ValueError as exc:
        return f"its arguments have no canonical JSON form (RFC 8785): {exc}"
    size = len(text.encode())
    if size > MAX_ARGUMENTS_BYTES:
        return (f"its arguments are too large to approve ({size} bytes of canonical JSON, at most "
                f"{MAX_ARGUMENTS_BYTES})")
    return Binding(approval, tool, text, Party.of(identity), revision)
