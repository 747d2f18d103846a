"""Obtaining a caller's credential for a server (SPEC §14): one gateway's servers with credentials,
each with its source (`exchange.py`, `accounts.py`, `per_subject.py`), and what obtaining answers:
an `Obtained`, outcome beside credential, never an exception. A credential at hand (a cache hit) is
taken at once (`at_hand`, no await); else `obtain` is awaited with the source's own timeout; `renew`
after a server refused one. Every attempt is told to `observe` (the gateway counts them: server,
kind, result), and every one that gives no credential is logged at WARNING with its reason (SPEC
§15: the operator sees why an exchange, a refresh, a connection or a per-subject secret was
refused; never a secret). The `credential:KEY` resolver (resolver.py) and its late stage (stage.py)
stand on this.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from ..envelope import Remediation, RemediationHint
from ..errors import CredentialBackendError, NoCredentialError
from ..offers import Offer, OfferCall
from ..outcomes import Outcome, Status
from ..principal import Identity, Principal
from ..requirements import body_of
from .caller import caller_of
from .credential import Credential, Obtained
from .settings import DEFAULT_TIMEOUT_SECONDS

if TYPE_CHECKING:
    from .connect import ConnectFlow  # (httpx2, cryptography: loaded by a gateway that connects)

log = logging.getLogger("mcp_preconditions.credentials")

NAMESPACE = "credential"
CREDENTIAL_ORDER = 100  # a late stage: after every other requirement, before approvals and quotas
# What a credential is where nothing obtains one: a plain resolver's look, a call with no sidecar.
NOT_OBTAINED = ("obtained only when the call is forwarded, after every other requirement (this "
                "guard has no credential step)")


class CredentialSource(Protocol):
    """One server's way to a caller's credential (`exchange.py`, `accounts.py`,
    `per_subject.py`): (credential, cached) or NoCredentialError / CredentialBackendError."""

    kind: str
    server: str

    async def obtain(self, principal: Principal | None, token: str | None
                     ) -> tuple[Credential, bool]: ...

    async def renew(self, principal: Principal | None, token: str | None, stale: Credential,
                    challenge: str | None = None) -> tuple[Credential, bool]:
        """After the server refused `stale` (401/403 with `challenge`, its WWW-Authenticate)."""
        ...

    def cached(self, identity: Identity, token: str | None) -> Credential | None:
        """The caller's credential when it is at hand without awaiting (a cache hit), else None:
        `obtain` is awaited, and says why there is none. `token`: the call's own (the one
        `identity` was verified from)."""
        ...


def requirement_for(server: str) -> str:
    """The requirement every tool of a server with credentials carries."""
    return f"{NAMESPACE}:{server}"


class CredentialSources:
    """The servers of one gateway that have credentials, and what obtaining each one answers.
    `connect`: the connect flow of `oauth` servers (their remedy is a connect link)."""

    def __init__(self, sources: Mapping[str, CredentialSource],
                 connect: ConnectFlow | None = None) -> None:
        self.sources = dict(sources)
        self.connect = connect
        # Told every attempt (server key, its answer): the gateway's credentials_total metric.
        self.observe: Callable[[str, Obtained], None] | None = None
        self._hits: dict[str, Outcome] = {}  # by requirement: a credential at hand's outcome

    def timeout_of(self, requirement: str) -> float:
        """How long obtaining may take: the source's `timeout_seconds` (an exchange, a refresh)."""
        settings = getattr(self.sources[body_of(requirement)], "settings", None)
        timeout = getattr(settings, "timeout_seconds", None)
        return float(timeout) if isinstance(timeout, int | float) else DEFAULT_TIMEOUT_SECONDS

    def kind_of(self, requirement: str) -> str:
        return self.sources[body_of(requirement)].kind

    async def obtain(self, requirement: str, identity: Identity, token: str | None) -> Obtained:
        """This caller's credential for the requirement's server. Never raises: every failure is
        an outcome (`unsatisfied` for none to be had, `error` for a failing backend)."""
        source = self.sources[body_of(requirement)]
        return await self._settle(requirement, source, source.obtain(identity.principal, token),
                                  identity)

    def obtain_now(self, requirement: str, identity: Identity, token: str | None
                   ) -> Obtained | None:
        """`obtain`, answered at once when the source holds this caller's credential (a cache
        hit): the Obtained `obtain` would give, counted alike, its outcome one shared object
        (`hit`). None when it must be awaited, and when the source's look fails (`obtain`, awaited,
        then says why: never an allow)."""
        return self.at_hand(requirement, self.sources[body_of(requirement)], identity, token)

    def at_hand(self, requirement: str, source: CredentialSource, identity: Identity,
                token: str | None) -> Obtained | None:
        """`obtain_now` with the requirement's source already found (a stage finds it once)."""
        try:
            credential = source.cached(identity, token)
        except Exception:
            return None
        if credential is None:
            return None
        obtained = self.held_at_hand(requirement, source, credential)
        self.counted(source, obtained)
        return obtained

    def held_at_hand(self, requirement: str, source: CredentialSource, credential: Credential
                     ) -> Obtained:
        """What obtaining `credential`, which the source held, answers: built once per credential
        (and requirement), the same object for every call after. Not counted (`counted`)."""
        obtained = credential.at_hand
        if obtained is None or obtained.outcome is not self._hits.get(requirement):
            obtained = credential.at_hand = Obtained(self.hit(requirement), source.kind, True,
                                                     credential)
        return obtained

    def counted(self, source: CredentialSource, obtained: Obtained) -> None:
        """Tell `observe` of a credential at hand (`_observed` without its log line)."""
        observe = self.observe
        if observe is not None:
            try:
                observe(source.server, obtained)
            except Exception:  # counting must not change the answer
                log.exception("credential for server %s: counting the attempt failed", source.server)

    def hit(self, requirement: str) -> Outcome:
        """The outcome of a credential that was at hand (no authorization server asked): one
        object per requirement, so a call decided from it is decided like the last (staged.py)."""
        found = self._hits.get(requirement)
        if found is None:
            source = self.sources[body_of(requirement)]
            found = self._hits[requirement] = _outcome(
                requirement, Status.SATISFIED,
                f"a {source.kind} credential for server '{source.server}' (cached)")
        return found

    async def renew(self, requirement: str, identity: Identity, token: str | None,
                    stale: Credential, challenge: str | None = None) -> Obtained:
        """Once, after the server answered 401 or 403 with `challenge` (its `WWW-Authenticate`)
        to `stale`: drop it and obtain again (exchange again, refresh, read the secrets again; a
        connected account's server asking for more scope is stepped up, SPEC §17)."""
        source = self.sources[body_of(requirement)]
        return await self._settle(requirement, source,
                                  source.renew(identity.principal, token, stale, challenge),
                                  identity)

    async def offer(self, requirement: str, call: OfferCall) -> Offer | None:
        """The remedy of this unmet `credential:KEY` in a denial's envelope (remedies.Remedial,
        SPEC §14, §15): for an `oauth` server, `available` with a `url` hint to a connect link made
        for the denied caller, only for a client that declared URL elicitation (a link stores a
        ticket: none is made for a client that cannot open it; its remedy is `undisclosed`); every
        client is told in words to connect at the connections page, which signs the person in.
        Other kinds, or nobody known to connect for: None, the table's `unavailable`."""
        server = body_of(requirement)
        if self.connect is None or server not in self.connect.accounts:
            return None
        said = f"connect your account for {server} at {self.connect.base_url}/connections"
        if not call.url_elicitation:
            return Offer(Remediation.UNDISCLOSED, (), said)
        url = await self.connect_url(requirement, call.identity)
        if url is None:
            return None
        return Offer(Remediation.AVAILABLE, (RemediationHint("url", url=url),), said)

    async def connect_url(self, requirement: str, identity: Identity) -> str | None:
        """The remedy of an unmet `credential:KEY` of an `oauth` server (SPEC §15): a connect link
        made for this caller; None for other kinds, or a caller who is not known."""
        server = body_of(requirement)
        caller = caller_of(identity.principal)
        if self.connect is None or caller is None or server not in self.connect.accounts:
            return None
        return await self.connect.link(caller, server)

    async def _settle(self, requirement: str, source: CredentialSource,
                      pending: Awaitable[tuple[Credential, bool]], identity: Identity) -> Obtained:
        obtained = await self._attempt(requirement, source, pending)
        self._observed(source, obtained)
        if obtained.credential is None:  # refused or failed: the operator sees why
            log.warning("credential for server %s (%s) %s for %s: %s", source.server, source.kind,
                        "refused" if obtained.result == "refused" else "failed", _who(identity),
                        obtained.outcome.reason)
        return obtained

    def _observed(self, source: CredentialSource, obtained: Obtained) -> None:
        observe = self.observe
        if observe is not None:
            try:
                observe(source.server, obtained)
            except Exception:  # counting must not change the answer
                log.exception("credential for server %s: counting the attempt failed", source.server)

    async def _attempt(self, requirement: str, source: CredentialSource,
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
        if cached:
            return Obtained(self.hit(requirement), kind, True, credential)
        reason = f"a {kind} credential for server '{source.server}'"
        return Obtained(_outcome(requirement, Status.SATISFIED, reason), kind, False, credential)


def _who(identity: Identity) -> str:
    """The caller, for a log line: their subject (escaped, bounded), never a token."""
    caller = caller_of(identity.principal)
    if caller is not None:
        return f"caller {caller.subject[:64]!r}"
    return "a token that names no subject" if identity.principal is not None else \
        "an unverified caller"


def _outcome(requirement: str, status: Status, reason: str) -> Outcome:
    return Outcome(requirement, status, reason, transient=True)
