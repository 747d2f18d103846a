"""A connected account's record (`kind = "oauth"`): its tokens and times, the grant it was
authorized with (where and as whom to refresh it, grant.py), and the scopes its server asked for
since (a step-up under way). Kept sealed in the vault (accounts.py); never shown but its times.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import CredentialBackendError
from .challenge import scopes
from .endpoint import bearer_of
from .grant import Grant

REFRESH_AHEAD_SECONDS = 60.0


@dataclass(frozen=True)
class Connection:
    """A connected account's tokens and times (wall clock). `grant` None: connected before grants
    were kept (its server's settings say where it refreshes). `wanted`: the scopes its server asked
    for in a step-up, which the next authorization asks for."""

    access_token: str = field(repr=False)
    refresh_token: str | None = field(repr=False)
    connected_at: float
    expires_at: float | None
    grant: Grant | None = None
    wanted: tuple[str, ...] = ()

    def fresh(self, now: float) -> bool:
        """Usable without a refresh: no expiry, or more than 60 s left."""
        return self.expires_at is None or now < self.expires_at - REFRESH_AHEAD_SECONDS

    def valid(self, now: float) -> bool:
        return self.expires_at is None or now < self.expires_at

    def wanting(self, more: tuple[str, ...]) -> Connection:
        """This connection, its server having asked for `more` scope (added to what it has)."""
        had = self.grant.scope if self.grant is not None else ()
        return replace(self, wanted=tuple(dict.fromkeys((*had, *self.wanted, *more))))

    def to_bytes(self) -> bytes:
        return json.dumps({"access_token": self.access_token, "refresh_token": self.refresh_token,
                           "connected_at": self.connected_at, "expires_at": self.expires_at,
                           "grant": None if self.grant is None else self.grant.to_json(),
                           "wanted": list(self.wanted)}).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Connection:
        raw = json.loads(data)
        grant = raw.get("grant")
        return cls(str(raw["access_token"]), raw.get("refresh_token"), float(raw["connected_at"]),
                   None if raw.get("expires_at") is None else float(raw["expires_at"]),
                   None if grant is None else Grant.from_json(grant),
                   tuple(str(s) for s in raw.get("wanted") or ()))

    def listing(self, server: str) -> dict[str, Any]:
        """`GET /connections`' entry: the server and the times, never a token."""
        return {"server": server, "connected_at": self.connected_at, "expires_at": self.expires_at}


def connection_from(answer: dict[str, Any], where: str, now: float,
                    before: Connection | None = None, grant: Grant | None = None) -> Connection:
    """The tokens of a token answer (a redeemed code with its `grant`, or a refresh of `before`:
    its refresh token stays when the answer rotates none, and so do the time it was connected and
    its grant). A `scope` in the answer is what was granted (RFC 6749 §5.1), kept in the grant."""
    access_token, expires_in = bearer_of(answer, where, expiry_required=False)
    refresh = answer.get("refresh_token")
    if refresh is not None and (not isinstance(refresh, str) or not refresh or len(refresh) > 16384):
        raise CredentialBackendError(f"token endpoint {where} answered an unusable refresh_token")
    if before is not None:
        refresh = refresh if refresh is not None else before.refresh_token
        grant = before.grant
    granted = scopes(answer["scope"]) if isinstance(answer.get("scope"), str) else None
    if grant is not None and granted is not None:
        grant = replace(grant, scope=granted)
    return Connection(access_token, refresh, before.connected_at if before else now,
                      None if expires_in is None else now + expires_in, grant,
                      before.wanted if before is not None else ())
