"""`credential:KEY` as a late stage (late.py): obtained for a call only once every other requirement
held (a call refused for another reason costs no exchange), before a quota unit is taken, under
the source's own timeout. The credential goes to the call's sidecar as a `HeldCredential` (a
`late.Held`), beside the decision, never inside it: the request to the server goes as its
`outbound` (`SentAs`: the caller, with their credential), renewed once when the server refuses it,
and a denial's remedy is the caller's connect link.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Hashable, Mapping, Sequence

from ..late import Answer, LateCall, Sidecar
from ..offers import Offer, OfferCall
from ..outcomes import Outcome, Status
from ..principal import Identity
from ..requirements import body_of
from .caller import caller_of
from .credential import Credential, Obtained
from .obtaining import NAMESPACE, NOT_OBTAINED, CredentialSources, requirement_for

log = logging.getLogger("mcp_preconditions.credentials")


def owner_of(identity: Identity, token: str | None) -> Hashable:
    """Whose requests a caller's are, for a server's sessions and what comes back on them: the
    caller (issuer and subject), never the token's bytes (a renewed token keeps its caller's
    session); a caller without a subject by the sha256 of their token."""
    caller = caller_of(identity.principal)
    return caller if caller is not None else (
        "token", hashlib.sha256((token or "").encode()).hexdigest())


class HeldCredential:
    """A call's credential for one server (or the attempt that found none): its `late.Held`. One
    held at hand serves every call of its principal object while the credential is at hand (a
    cached credential's call builds none: `CredentialStage.decide`), so it never changes, and keeps
    no token: a renewal is given the call's own, and is the answer of `renew`. Its repr names no
    secret; it is not pickled or copied."""

    __slots__ = ("_identity", "_resolver", "credential", "obtained", "outbound", "owner",
                 "principal", "requirement", "requirements")

    question = None  # nothing to ask the caller

    def __init__(self, resolver: CredentialSources, requirement: str, identity: Identity,
                 token: str | None, obtained: Obtained) -> None:
        self._resolver = resolver
        self.requirement = requirement
        self.requirements = (requirement,)
        self._identity = identity
        self.obtained = obtained
        self.credential: Credential | None = obtained.credential  # (`obtained`'s, kept with it)
        # The verified principal the credential is held for (what a memo on it is bound to).
        self.principal: object = identity.principal
        self.owner: Hashable = owner_of(identity, token)  # whose requests (their sessions)
        # Whom the request goes as (built once, like this held credential); None: no credential.
        self.outbound: SentAs | None = SentAs(self, self.credential) \
            if self.credential is not None else None

    @property
    def server(self) -> str:
        return body_of(self.requirement)

    @property
    def outcomes(self) -> tuple[Outcome, ...]:
        return (self.obtained.outcome,)

    async def answer(self, answer: Answer | None) -> bool:
        return False  # (it asks nothing)

    def finished(self, allowed: bool, ran: bool) -> None:
        """(Nothing to do: a credential stays cached for the caller's next call.)"""

    def offer(self, requirement: str, call: OfferCall) -> Awaitable[Offer | None]:
        """The connect link of an unmet `credential:KEY` (`CredentialSources.offer`)."""
        return self._resolver.offer(requirement, call)

    async def renew(self, token: str | None, challenge: str | None = None) -> Obtained:
        """Once, after the server answered 401/403 with `challenge` (its `WWW-Authenticate`): the
        credential dropped and obtained again with the call's own `token` (the answer says whether
        that worked, and holds the renewed one; this held one is left as it was: other calls may
        hold it; never raises)."""
        stale = self.credential
        if stale is None:
            return await self._resolver.obtain(self.requirement, self._identity, token)
        log.warning("credential for server %s (%s): the server refused it; obtaining it once more",
                    self.server, self.obtained.kind)
        return await self._resolver.renew(self.requirement, self._identity, token, stale,
                                          challenge)

    async def connect_url(self) -> str | None:
        """The caller's connect link for an `oauth` server (None for other kinds): single use,
        600 s, made for this caller. Making one stores a ticket: ask only for a client that can
        open it."""
        return await self._resolver.connect_url(self.requirement, self._identity)

    def __repr__(self) -> str:
        return f"HeldCredential({self.requirement}, {self.obtained.result})"

    def __reduce__(self) -> str | tuple[object, ...]:
        raise TypeError("a HeldCredential holds a caller's credential: it is not pickled or copied")


class SentAs:
    """A request to a server made as its caller (`late.Outbound`): whose it is (`owner`, their
    session) and their credential's header, in place of the server's static headers. Refused with
    a challenge, it renews the credential once (`challenged`); the renewed one answers a second
    challenge with the unmet outcome."""

    __slots__ = ("_held", "credential", "owner", "renewed")

    def __init__(self, held: HeldCredential, credential: Credential, renewed: bool = False) -> None:
        self._held = held
        self.owner = held.owner
        self.credential = credential
        self.renewed = renewed

    def headers(self) -> Mapping[str, str]:
        return self.credential.headers()

    async def challenged(self, token: str | None, challenge: str | None) -> SentAs | Outcome:
        """The server answered 401/403 with `challenge` (its `WWW-Authenticate`) to this
        credential, running nothing: the credential obtained once more (`HeldCredential.renew`;
        the challenge's scope for a step-up, SPEC §17), or the unmet outcome (SPEC §14: never a
        generic upstream error)."""
        held = self._held
        if self.renewed:
            return Outcome(held.requirement, Status.UNSATISFIED, f"server '{held.server}' refused "
                           "this caller's credential, renewed once", transient=True)
        renewed = await held.renew(token, challenge)
        if renewed.credential is None:
            return renewed.outcome
        return SentAs(held, renewed.credential, renewed=True)

    def __repr__(self) -> str:
        return f"SentAs({self._held.requirement}, renewed={self.renewed})"

    def __reduce__(self) -> str | tuple[object, ...]:
        raise TypeError("a SentAs holds a caller's credential: it is not pickled or copied")


class CredentialStage:
    """A tool's `credential:` requirements (one per server; usually one), obtained in order."""

    namespace = NAMESPACE

    def __init__(self, resolver: CredentialSources, requirements: Sequence[str]) -> None:
        self.resolver = resolver
        self.requirements = tuple(requirements)
        # A backstop: each request to an authorization server has the source's own timeout, which
        # says which server did not answer; this bounds the whole (discovery and token request).
        self.timeout: float | None = max(resolver.timeout_of(r) for r in self.requirements) + 1.0
        self._hits = tuple(resolver.hit(r) for r in self.requirements)  # every credential at hand
        self._sources = tuple(zip(self.requirements, (resolver.sources[body_of(r)]
                                                      for r in self.requirements), strict=True))
        # A tool's one credential decided at once when it is at hand (`_quick`; late.py `Quick`).
        self.quick = self._quick if len(self.requirements) == 1 else None

    def _quick(self, identity: Identity, sidecar: Sidecar | None) -> tuple[Outcome, ...] | None:
        """`decide` for the one credential of a tool when it is at hand and what a call holds of it
        was built for this very principal object (`_at_hand`, every call of a caller after their
        first), without building a call; None when anything is otherwise: `decide` decides."""
        if sidecar is None or not self._at_hand(0, identity, sidecar, build=False):
            return None
        return self._hits

    def decide(self, call: LateCall) -> tuple[Outcome, ...] | Awaitable[tuple[Outcome, ...]]:
        """At once when every credential is at hand (a cache hit: the hot path of every call after
        a caller's first, no await and the same outcomes object each time); else awaited from the
        first that is not (an exchange, a store), each source under its own single flight."""
        sidecar = call.sidecar
        if sidecar is None:  # nowhere to carry a credential: the call cannot reach its server
            return tuple(Outcome(r, Status.UNSATISFIED, NOT_OBTAINED, transient=True)
                         for r in self.requirements)
        identity = call.identity
        for i in range(len(self._sources)):
            if not self._at_hand(i, identity, sidecar, build=True):
                return self._obtained(call, sidecar, i)
        return self._hits

    def _at_hand(self, i: int, identity: Identity, sidecar: Sidecar, *, build: bool) -> bool:
        """The tool's `i`th credential put in the call's sidecar and counted, when its source holds
        it (a cache hit; `CredentialSources.at_hand`, the same answer and count); False when it
        must be obtained (awaited), and when the source's look fails (`obtain` then says why).
        What the call holds of it is built once per credential at hand and principal object (an
        exchanged credential is kept by its token's key: the two name the token) and read as it
        is by every call after, never through `CredentialSources` (`build=False`: False when it
        was not built yet)."""
        requirement, source = self._sources[i]
        principal, token = identity.principal, sidecar.token
        try:
            credential = source.cached(identity, token)
        except Exception:
            return False
        if credential is None:
            return False
        held = credential.held
        if held is None or held.principal is not principal \
                or held.obtained.outcome is not self._hits[i]:
            if not build:
                return False
            obtained = self.resolver.held_at_hand(requirement, source, credential)
            held = HeldCredential(self.resolver, requirement, identity, token, obtained)
            if principal is not None:
                credential.held = held
        obtained = held.obtained
        observe = self.resolver.observe  # `CredentialSources.counted`, inline
        if observe is not None:
            try:
                observe(source.server, obtained)
            except Exception:  # counting must not change the answer
                log.exception("credential for server %s: counting the attempt failed",
                              source.server)
        sidecar.held[requirement] = held
        sidecar.notes["credential"] = obtained.note
        return True

    async def _obtained(self, call: LateCall, sidecar: Sidecar, start: int) -> tuple[Outcome, ...]:
        """The outcomes, those before `start` at hand (`decide`), the rest awaited in order."""
        resolver, identity, token = self.resolver, call.identity, sidecar.token
        outcomes = list(self._hits[:start])
        for requirement in self.requirements[start:]:
            obtained = await resolver.obtain(requirement, identity, token)
            self._hold(sidecar, requirement, identity, obtained)
            outcomes.append(obtained.outcome)
        return tuple(outcomes)

    def _hold(self, sidecar: Sidecar, requirement: str, identity: Identity,
              obtained: Obtained) -> None:
        sidecar.held[requirement] = HeldCredential(self.resolver, requirement, identity,
                                                   sidecar.token, obtained)
        sidecar.notes["credential"] = obtained.note

    def release(self, call: LateCall) -> None:
        """A later stage (a quota) refused the call: its credential stays cached for the next
        call, and is dropped from this one, which goes nowhere."""
        if call.sidecar is not None:
            for requirement in self.requirements:
                call.sidecar.held.pop(requirement, None)


def held_for(sidecar: Sidecar | None, server: str) -> HeldCredential | None:
    """The credential a call's sidecar holds for `server`, if a stage obtained (or tried) one."""
    if sidecar is None:
        return None
    requirement = _REQUIREMENTS.get(server)
    if requirement is None:  # one string per server key, not one per call
        requirement = _REQUIREMENTS[server] = requirement_for(server)
    held = sidecar.held.get(requirement)
    return held if isinstance(held, HeldCredential) else None


_REQUIREMENTS: dict[str, str] = {}  # server key -> its `credential:KEY` (config keys: few)
