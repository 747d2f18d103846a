"""`credential:KEY` (SPEC §14): satisfied when the gateway holds or obtains a credential for this
caller and server KEY. No credential is `unsatisfied`; an authorization server or store that fails
is `error`. Outcomes are transient (an account may be connected, a token renewed), and their
reasons never hold a secret: the credential itself travels beside the outcome, in `Obtained`.

The guard decides it after every other requirement of a call (a call refused for another reason
costs no exchange), through `obtain`, which the evaluator awaits with the source's own timeout;
`resolve`, the plain resolver protocol, only looks and never allows (see docs/credentials.md).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Mapping
from typing import Protocol

from ..errors import CredentialBackendError, NoCredentialError
from ..outcomes import Outcome, Status
from ..principal import Identity, Principal
from ..requirements import body_of
from .caller import caller_of
from .connect import ConnectFlow
from .credential import Credential, Obtained

log = logging.getLogger("mcp_preconditions.credentials")

NAMESPACE = "credential"
NOT_OBTAINED = ("obtained only when the call is forwarded, after every other requirement (this "
                "guard has no credential step)")


class CredentialSource(Protocol):
    """One server's way to a caller's credential (`exchange.py`, `accounts.py`,
    `per_subject.py`): (credential, cached) or NoCredentialError / CredentialBackendError."""

    kind: str
    server: str

    async def obtain(self, principal: Principal | None, token: str | None
                     ) -> tuple[Credential, bool]: ...

    async def renew(self, principal: Principal | None, token: str | None, stale: Credential
                    ) -> tuple[Credential, bool]: ...


def requirement_for(server: str) -> str:
    """The requirement every tool of a server with credentials carries."""
    return f"{NAMESPACE}:{server}"


class CredentialResolver:
    """The `credential` namespace for the servers of one gateway that have credentials."""

    namespace = NAMESPACE
    forms = ("credential:KEY, where the gateway's config has [servers.KEY.credentials]",)

    def __init__(self, sources: Mapping[str, CredentialSource],
                 connect: ConnectFlow | None = None) -> None:
        self.sources = dict(sources)
        self.connect = connect

    def validate(self, requirement: str) -> str | None:
        server = body_of(requirement)
        if server in self.sources:
            return None
        known = ", ".join(repr(k) for k in self.sources) or "none"
        return f"no server {server!r} has credentials (servers with credentials: {known})"

    def resolve(self, requirement: str, context: object) -> Outcome:
        """The plain protocol looks only, and never allows: a credential is obtained by `obtain`,
        which the guard runs last. Transient, so list filtering counts the tool as callable."""
        return Outcome(requirement, Status.UNSATISFIED, NOT_OBTAINED, transient=True)

    def kind_of(self, requirement: str) -> str:
        return self.sources[body_of(requirement)].kind

    async def obtain(self, requirement: str, identity: Identity, token: str | None) -> Obtained:
        """This caller's credential for the requirement's server. Never raises: every failure is
        an outcome (`unsatisfied` for none to be had, `error` for a failing backend)."""
        source = self.sources[body_of(requirement)]
        return await self._settle(requirement, source, source.obtain(identity.principal, token))

    async def renew(self, requirement: str, identity: Identity, token: str | None,
                    stale: Credential) -> Obtained:
        """Once, after the server answered 401 or 403 with `WWW-Authenticate` to `stale`: drop it
        and obtain again (exchange again, refresh, read the secrets again)."""
        source = self.sources[body_of(requirement)]
        return await self._settle(requirement, source,
                                  source.renew(identity.principal, token, stale))

    async def connect_url(self, requirement: str, identity: Identity) -> str | None:
        """The remedy of an unmet `credential:KEY` of an `oauth` server (SPEC §15): a connect link
        made for this caller; None for other kinds, or a caller who is not known."""
        server = body_of(requirement)
        caller = caller_of(identity.principal)
        if self.connect is None or caller is None or server not in self.connect.accounts:
            return None
        return await self.connect.link(caller, server)

    async def _settle(self, requirement: str, source: CredentialSource,
                      pending: Awaitable[tuple[Credential, bool]]) -> Obtained:
        kind = source.kind
        try:
            credential, cached = await pending
        except NoCredentialError as exc:
            return Obtained(_outcome(requirement, Status.UNSATISFIED, str(exc)), kind, False)
        except CredentialBackendError as exc:
            return Obtained(_outcome(requirement, Status.ERROR, str(exc)), kind, False)
        except Exception as exc:  # a bug must not allow a call, nor leak a message that may hold data
            log.error("credential for server %s: %s failed: %s", source.server, kind, type(exc).__name__)
            return Obtained(_outcome(requirement, Status.ERROR, f"credential source failed "
                                     f"({type(exc).__name__})"), kind, False)
        reason = f"a {kind} credential for server '{source.server}'" + (" (cached)" if cached else "")
        return Obtained(_outcome(requirement, Status.SATISFIED, reason), kind, cached, credential)


def _outcome(requirement: str, status: Status, reason: str) -> Outcome:
    return Outcome(requirement, status, reason, transient=True)
