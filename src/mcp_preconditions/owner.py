"""Whose an HTTP session is: the verified caller that opened it (client id, issuer, subject), one
type for hosted servers (integrations/_sessions.py hands it to the MCP SDK) and the gateway
(gateway/downstream/sessions.py), so both bind and bound sessions by the same identity. No SDK here.
"""

from __future__ import annotations

from dataclasses import dataclass

from .principal import Principal

# What per-principal bounds count by: (issuer, subject); for a token that names no subject (no
# `sub`), (issuer, None, client): a bound is no grant, and one such client must not exhaust
# another's; None for the anonymous callers, who share one bound.
PrincipalKey = tuple[str | None, ...] | None


@dataclass(frozen=True, slots=True)
class Owner:
    """The caller a session belongs to, as the MCP SDK's session managers compare callers: the
    token's client (`client_id`, else `azp`, else ""), issuer and subject (`sub`; None when the
    token names none: then the client, issuer and no subject own it). A refreshed token of the
    same principal is the same owner, so it keeps its sessions."""

    client: str
    issuer: str | None
    subject: str | None

    @classmethod
    def of(cls, principal: Principal) -> Owner:
        claims = principal.claims
        client = claims.get("client_id", claims.get("azp"))
        issuer = claims.get("iss")
        return cls(str(client) if client is not None else "",
                   str(issuer) if issuer is not None else None, principal.subject)

    @property
    def principal(self) -> tuple[str | None, ...]:
        """Who is counted against a per-principal bound: the issuer and subject (one principal's
        clients share its bound); a token without a subject by its issuer and client."""
        if self.subject is None:
            return self.issuer, None, self.client
        return self.issuer, self.subject


def principal_key(owner: Owner | None) -> PrincipalKey:
    """The bound `owner` counts against: its principal, or the anonymous callers' one (None)."""
    return None if owner is None else owner.principal
