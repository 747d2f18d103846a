"""Credentials from a raw HTTP `Authorization` header (RFC 6750 §2.1, the `Bearer` scheme).

A malformed header is not the same as no header: it becomes MalformedCredentials, which every
authenticator in this package turns into the denial reason "malformed Authorization header (...)".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..principal import ANONYMOUS, Credentials

MALFORMED_HEADER = "malformed Authorization header (expected 'Bearer <token>')"

# RFC 6750 b64token after a case-insensitive scheme and one space; surrounding blanks are tolerated.
_BEARER = re.compile(r"[ \t]*bearer ([A-Za-z0-9\-._~+/]+=*)[ \t]*", re.IGNORECASE | re.ASCII)


@dataclass(frozen=True, slots=True)
class MalformedCredentials(Credentials):
    """A call whose Authorization header could not be read; it carries no token, only the reason."""

    failure: str = MALFORMED_HEADER


def credentials_from_authorization_header(value: str | None) -> Credentials:
    """`Credentials(token=...)` from `Bearer <token>`; None (no header) is anonymous; anything else
    (another scheme, no token, two tokens, bad characters) is MalformedCredentials."""
    if value is None:
        return ANONYMOUS
    match = _BEARER.fullmatch(value)
    if match is None:
        return MalformedCredentials()
    return Credentials(token=match.group(1))
