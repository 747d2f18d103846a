"""What one connection is authorized with (SPEC §17): the authorization server (its issuer, and
whether it names itself in every answer, RFC 9207), its token endpoint, the gateway's client there,
the scopes asked for and the resource (RFC 8707). Made when a flow starts and kept, sealed, in its
`state` and then in the connection, so a code is redeemed and a token refreshed where, and as whom,
it was issued, whatever the server says later.

The scopes: the config's, else what the server asks for (its challenge, else its metadata's
`scopes_supported`), else none; after a step-up, the union with what it asked for then (SEP-2350);
and `offline_access` when the authorization server lists it (SEP-2207: the gateway refreshes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, get_args

from .authorization import Found
from .settings import Client, ClientAuth

OFFLINE_ACCESS = "offline_access"


@dataclass(frozen=True)
class Grant:
    """Where and as whom one connection was authorized. `stepped`: made by a step-up (its server
    refused the connection before for want of scope), which is not stepped up again."""

    issuer: str | None
    iss_required: bool
    token_endpoint: str
    client: Client = field(repr=False)
    scope: tuple[str, ...] = ()
    resource: str | None = None
    stepped: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"issuer": self.issuer, "iss_required": self.iss_required,
                "token_endpoint": self.token_endpoint, "client_id": self.client.client_id,
                "client_secret": self.client.client_secret, "auth": self.client.auth,
                "scope": list(self.scope), "resource": self.resource, "stepped": self.stepped}

    @classmethod
    def from_json(cls, raw: Any) -> Grant:
        """ValueError (or KeyError, TypeError) for anything but what `to_json` wrote."""
        if not isinstance(raw, dict) or raw["auth"] not in get_args(ClientAuth):
            raise ValueError("not a grant")
        issuer, resource = raw["issuer"], raw["resource"]
        return cls(None if issuer is None else str(issuer), bool(raw["iss_required"]),
                   str(raw["token_endpoint"]),
                   Client(str(raw["client_id"]), str(raw["client_secret"]), raw["auth"]),
                   tuple(str(s) for s in raw["scope"]), None if resource is None else str(resource),
                   bool(raw["stepped"]))


def scope_for(configured: tuple[str, ...], found: Found, wanted: tuple[str, ...] = ()
              ) -> tuple[str, ...]:
    """The scopes to ask for (see the module's docstring), in order, each once."""
    chosen = tuple(dict.fromkeys((*(configured or found.scope), *wanted)))
    if chosen and OFFLINE_ACCESS in found.server.scopes_supported and OFFLINE_ACCESS not in chosen:
        chosen += (OFFLINE_ACCESS,)
    return chosen
