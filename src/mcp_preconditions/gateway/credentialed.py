"""A caller's credential for a request no decision obtained one for (SPEC §14, the per-person
boundary on every path): `resources/read`, `prompts/get`, completions, subscriptions, listings and
every other request the gateway sends for a caller to a server with `credentials` go as that
caller, with the credential the `credential:KEY` resolver holds or obtains for them, exactly as a
`tools/call`'s decision does. A caller without one is refused with the refusal of
`credential:KEY`: a JSON-RPC error AUTHORIZATION_DENIED whose `data` carries the unmet requirement
and the SEP-2643 envelope (its remedy, a connect link, for a client that can open one); nothing
is sent. And whose a caller is (`owner`), the key their sessions and what comes back on them go by.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from typing import Any

from ..credentials.resolver import CredentialResolver
from ..credentials.stage import HeldCredential, owner_of
from ..denials import denial_meta
from ..envelope import new_context_id
from ..guard import Guard
from ..late import Sidecar
from ..outcomes import Outcome, new_decision
from ..principal import Credentials, Identity
from ..remedies import Recipient, declares_url_elicitation, recipient_of
from .clients import Call
from .errors import CredentialRefused
from .jsonrpc import AUTHORIZATION_DENIED, RpcError

log = logging.getLogger("mcp_preconditions.gateway")

CredentialsOf = Callable[[Call], Credentials]


class CallerCredentials:
    """The callers of one gateway as its servers with credentials see them."""

    def __init__(self, guard: Guard, credentials: CredentialsOf) -> None:
        self._guard = guard
        self._credentials = credentials

    async def _identity(self, ctx: Call) -> tuple[Identity, str | None]:
        credentials = self._credentials(ctx)
        return await self._guard.authenticate(credentials), credentials.token

    async def owner(self, ctx: Call) -> Hashable:
        """Whose `ctx` is: the key their sessions with servers go by (`owner_of`)."""
        identity, token = await self._identity(ctx)
        return owner_of(identity, token)

    async def sidecar(self, ctx: Call, requirement: str) -> Sidecar:
        """What a request of `ctx`'s caller to the server of `requirement` (`credential:KEY`)
        carries: their credential, as a decision would leave it (`Sidecar.held`), and their token
        (to renew it once, should the server refuse it). CredentialRefused when they have none
        (anonymous, no connected account, no entry, an authorization server down)."""
        identity, token = await self._identity(ctx)
        resolver = self._resolver(requirement)
        obtained = resolver.obtain_now(requirement, identity, token)
        if obtained is None:
            obtained = await resolver.obtain(requirement, identity, token)
        if obtained.credential is None:
            raise CredentialRefused(obtained.outcome)
        sidecar = Sidecar()
        sidecar.token = token
        sidecar.held[requirement] = HeldCredential(resolver, requirement, identity, token,
                                                   obtained)
        return sidecar

    async def refusal(self, ctx: Call, method: str, *unmet: Outcome) -> RpcError:
        """The refusal of a request for want of the caller's credentials (`unmet`, each a
        `credential:KEY` outcome): AUTHORIZATION_DENIED, `data` the unmet requirements and the
        envelope's `_meta`, as a denied call's (remedies asked as for a call: `recipient_of`).
        Several servers' are one refusal, in the order of their keys whatever order they came
        in: the message and `data.unmet` name every one, the envelope carries each remedy."""
        guard = self._guard
        snapshot = guard.snapshot
        credentials = self._credentials(ctx)
        identity = await guard.authenticate(credentials)
        unmet = tuple(sorted(unmet, key=lambda o: o.requirement))
        decision = new_decision(method, False, unmet, identity.subject, snapshot.revision, 0,
                                snapshot.confidential, None, None, new_context_id())
        recipient = recipient_of(decision, snapshot.registry,
                                 url_elicitation=declares_url_elicitation(ctx.capabilities),
                                 identity=lambda: guard.authenticate(credentials), arguments=None)
        if not isinstance(recipient, Recipient):
            recipient = await recipient
        named = list(decision.disclosed_unmet)
        log.info("request %s not sent: unmet %s", method, ", ".join(named))
        data: dict[str, Any] = {"error": "unmet_requirements", "method": method, "unmet": named,
                                "withheld": decision.withheld}
        meta = denial_meta(decision, recipient)
        if meta is not None:
            data["_meta"] = meta
        return RpcError(AUTHORIZATION_DENIED, f"Request {method} was not sent: unmet requirements: "
                        f"{', '.join(named)}", data)

    def _resolver(self, requirement: str) -> CredentialResolver:
        resolver = self._guard.snapshot.registry.for_requirement(requirement)
        if not isinstance(resolver, CredentialResolver):  # (the gateway's config made it one)
            raise RuntimeError(f"no credential resolver for {requirement}")
        return resolver
