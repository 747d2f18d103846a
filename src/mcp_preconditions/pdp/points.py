"""The decision points of one policy snapshot's `[pdp.NAME]` tables (SPEC §16), and the lookups every
path shares: each requirement's request (request.py), its cached decision (cache.py), and the ones
not cached asked in one batch per endpoint (client.py), each batch under a single flight, so
identical requests in flight share one. The resolver (resolver.py), a call's late stage (stage.py)
and a caller's listing (listing.py) decide with them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from ..credentials.flight import Flights
from ..errors import DecisionPointError
from ..outcomes import Outcome, Status
from ..principal import Principal
from .cache import DecisionCache
from .request import Caller, Digests, cache_key, caller_of, evaluation, plain
from .wire import MAX_EVALUATIONS

if TYPE_CHECKING:
    from .client import Endpoint  # (httpx2: loaded by a policy with [pdp.*] tables)

log = logging.getLogger("mcp_preconditions.pdp")

NAMESPACE = "pdp"
MAX_BATCH = MAX_EVALUATIONS  # items per request (what our own decision point takes, 1,024)
MAX_CALLERS = 10_000  # principals whose request subject is remembered; cleared when full
MAX_REASON_CHARS = 2048  # a `reason_admin` longer than this (as JSON) is not kept in the record


@dataclass(frozen=True, slots=True)
class Table:
    """One `[pdp.NAME]`: its requirement, endpoint, cache lifetime and subject claims."""

    name: str
    endpoint: Endpoint
    cache_seconds: float
    claims: tuple[str, ...]

    @property
    def requirement(self) -> str:
        return f"{NAMESPACE}:{self.name}"


class Verdict(NamedTuple):
    """One table's decision on one request: `decision` True, False or None (no decision: `error`,
    `why` says which); `cached`: served from the cache; `reason_admin`: the PDP's, for the record."""

    name: str
    decision: bool | None
    cached: bool
    reason_admin: Any = None
    why: str = ""

    def note(self) -> dict[str, Any]:
        """The decision record's entry (SPEC §16)."""
        return {"name": self.name, "decision": "error" if self.decision is None else self.decision,
                "cached": self.cached, "reason_admin": self.reason_admin}


class Ask(NamedTuple):
    """One request to make (or to find cached): its table, its cache key, and how to build the
    request itself (only when it is sent: a cached decision builds none)."""

    table: Table
    key: Hashable
    caller: Caller
    method: str
    tool: str
    server: str | None
    arguments: Mapping[str, Any] | None

    @property
    def request(self) -> dict[str, Any]:
        return evaluation(self.caller, self.method, self.tool, self.server, self.arguments,
                          self.table.requirement)

class DecisionPoints:
    """The `[pdp.NAME]` tables of one snapshot, their decisions kept, and the lookups."""

    def __init__(self, tables: Mapping[str, Table], cache: DecisionCache[Verdict] | None = None,
                 observe: Callable[[str, str], None] | None = None,
                 server_of: Callable[[str], str | None] | None = None) -> None:
        self.tables = dict(tables)
        self.cache: DecisionCache[Verdict] = cache if cache is not None else DecisionCache()
        self.observe = observe  # (table name, result): the pdp_total metric
        self.server_of = server_of  # a visible tool's server key (the gateway's), else None
        self._digests = Digests()
        self._callers: dict[tuple[int, tuple[str, ...]], tuple[Principal, tuple[Caller, str]]] = {}
        self._flights: Flights[tuple[Any, ...]] = Flights()
    # -- the lookups -----------------------------------------------------------------------------
    def asks(self, principal: Principal | None, method: str, tool: str,
             arguments: Mapping[str, Any] | None, tables: Sequence[Table]) -> list[Ask] | None:
        """The request of each table about one tool, or None for an anonymous caller or a token
        with no subject (no request is made for them). ValueError for arguments with no
        canonical JSON form."""
        server = self.server_of(tool) if self.server_of is not None else None
        shown = plain(arguments) if arguments else ""
        found = []
        for table in tables:
            known = self._caller(principal, table.claims)
            if known is None:
                return None
            caller, claims = known
            requirement = table.requirement
            ask = Ask(table, None, caller, method, tool, server, arguments)
            digest = self._digests.of((caller.issuer, caller.subject, claims, method, tool,
                                       server if server is not None else "\x00", shown,
                                       requirement), lambda ask=ask: ask.request)  # type: ignore[misc]
            found.append(ask._replace(key=cache_key(caller, requirement, digest)))
        return found

    def _caller(self, principal: Principal | None, claims: tuple[str, ...]
                ) -> tuple[Caller, str] | None:
        """The caller as a table sends them, and their claims as plain JSON: made once per
        principal object (a verified token's, reused by its every call)."""
        if principal is None:
            return None
        key = (id(principal), claims)
        known = self._callers.get(key)
        if known is not None and known[0] is principal:
            return known[1]
        caller = caller_of(principal, claims)
        if caller is None:
            return None
        made = (caller, plain(caller.claims) if caller.claims else "")
        if len(self._callers) >= MAX_CALLERS:
            self._callers.clear()
        self._callers[key] = (principal, made)  # (holds the principal: its id is not reused)
        return made

    def cached(self, ask: Ask) -> Verdict | None:
        """The cached decision of `ask`, counted `cached`; None: it must be asked."""
        kept = self.cache.get(ask.key)
        if kept is not None:
            self._count(ask.table.name, "cached")
        return kept

    async def ask(self, asks: Sequence[Ask]) -> list[Verdict]:
        """Each ask's decision, asked: one batch per endpoint (concurrently), identical batches in
        flight shared, decisions kept, each counted once."""
        groups: dict[tuple[int, int], list[int]] = {}
        seen: dict[tuple[int, str, str], int] = {}
        for i, ask in enumerate(asks):
            # Items about the same resource go in batches of their own: Cerbos 0.51 answers every
            # item of a batch that names one resource with the first one's decision (a deny could
            # read as an allow; tests/integration/test_cerbos_pdp.py).
            endpoint, resource = id(ask.table.endpoint), ask.request["resource"]
            same = (endpoint, resource["id"], ask.request["action"]["name"])
            n = seen[same] = seen.get(same, -1) + 1
            groups.setdefault((endpoint, n), []).append(i)
        found: list[Verdict | None] = [None] * len(asks)
        chunks = [group[i:i + MAX_BATCH] for group in groups.values()  # (a listing of many tools)
                  for i in range(0, len(group), MAX_BATCH)]
        batches = [self._batch([asks[i] for i in group]) for group in chunks]
        for group, verdicts in zip(chunks, await asyncio.gather(*batches), strict=True):
            for i, verdict in zip(group, verdicts, strict=True):
                found[i] = verdict
        return [v for v in found if v is not None]

    async def _batch(self, asks: Sequence[Ask]) -> tuple[Verdict, ...]:
        endpoint = asks[0].table.endpoint
        flight = (id(endpoint), tuple(a.key for a in asks))
        try:
            answers, _ = await self._flights.once(
                flight, lambda: endpoint.decide([a.request for a in asks]))
        except DecisionPointError as exc:
            log.warning("pdp: %s", exc)
            verdicts = tuple(Verdict(a.table.name, None, False, None, str(exc)) for a in asks)
        except Exception as exc:  # a bug must not allow a call
            log.error("pdp: asking %s failed: %s", endpoint.url, type(exc).__name__)
            verdicts = tuple(Verdict(a.table.name, None, False, None, type(exc).__name__)
                             for a in asks)
        else:
            verdicts = tuple(Verdict(a.table.name, d.decision, False, _reason_admin(d.context))
                             for a, d in zip(asks, answers, strict=True))
            for ask, verdict in zip(asks, verdicts, strict=True):
                self.cache.put(ask.key, verdict._replace(cached=True), ask.table.cache_seconds)
        for verdict in verdicts:
            self._count(verdict.name, "error" if verdict.decision is None else
                        "allow" if verdict.decision else "deny")
        return verdicts

    def _count(self, name: str, result: str) -> None:
        observe = self.observe
        if observe is not None:
            try:
                observe(name, result)
            except Exception:  # counting must not change the answer
                log.exception("pdp %s: counting the decision failed", name)


def outcome_of(requirement: str, verdict: Verdict) -> Outcome:
    """A verdict as the caller sees it: never the PDP's reason, nor its address."""
    name = verdict.name
    if verdict.decision is None:
        return Outcome(requirement, Status.ERROR, f"the decision point '{name}' gave no decision",
                       transient=True)
    if verdict.decision:
        return Outcome(requirement, Status.SATISFIED, f"allowed by the decision point '{name}'",
                       transient=True)
    return Outcome(requirement, Status.UNSATISFIED, f"denied by the decision point '{name}'",
                   transient=True)


def anonymous(requirement: str) -> Outcome:
    return Outcome(requirement, Status.UNSATISFIED, "the caller is not verified: a decision point "
                   "is asked for a known caller only", transient=True)


def _reason_admin(context: Mapping[str, Any] | None) -> Any:
    """The PDP's `context.reason_admin`, bounded, for the decision record only."""
    if context is None or "reason_admin" not in context:
        return None
    reason = context["reason_admin"]
    try:
        import json

        shown = json.dumps(reason)
    except (TypeError, ValueError):
        return None
    return reason if len(shown) <= MAX_REASON_CHARS else f"(omitted: {len(shown)} characters)"


Pending = Awaitable[list[Verdict]]
