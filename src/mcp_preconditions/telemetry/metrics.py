"""The Prometheus series of SPEC §13 on a registry of their own, and the calls that move them.

One `Metrics` object per process (a gateway, a hosted server, a test): its registry is its own, so
two in one process never collide. Every label value is bounded (see labels.py). Every counter lives
in a `Tally` (one lock per call), so the registry exposes no `_created` series (prometheus_client's
Counter adds one, beyond SPEC §13's list); the gauges are prometheus_client's own.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterable, Mapping
from typing import Literal, Protocol

from prometheus_client import CollectorRegistry, Gauge

from ..outcomes import Decision, Status
from .labels import (
    QUOTA_PREFIX,
    RESULTS,
    UNLISTED,
    WITHHELD,
    Bounds,
    Tools,
    quota_label,
    requirement_label,
    result_of,
)
from .tally import Tally

PREFIX = "mcp_preconditions"
DECISIONS, UNMET, QUOTA = f"{PREFIX}_decisions", f"{PREFIX}_unmet", f"{PREFIX}_quota_exhausted"
RESTARTS, RELOADS = f"{PREFIX}_upstream_restarts", f"{PREFIX}_policy_reloads"
DROPPED = f"{PREFIX}_upstream_dropped"
REFUSED = f"{PREFIX}_http_refused"
CREDENTIALS = f"{PREFIX}_credentials"
APPROVALS = f"{PREFIX}_approvals"  # (`approvals.METRIC`: the Tally adds `_total`)
PDP = f"{PREFIX}_pdp"
DECISION_SECONDS, UPSTREAM_SECONDS = f"{PREFIX}_decision_seconds", f"{PREFIX}_upstream_seconds"
# A decision takes microseconds (a cached caller) to a resolver's timeout (seconds).
DECISION_BUCKETS = (0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
UPSTREAM_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                    30.0, 60.0, 120.0)
ReloadResult = Literal["success", "failure", "unusable"]
RELOAD_RESULTS: tuple[ReloadResult, ...] = ("success", "failure", "unusable")
# Why an HTTP request was refused before any decision: no token, a token not accepted, a session
# that does not exist (or is another caller's), a Host/Origin of DNS rebinding, a bound reached.
RefusalReason = Literal["token_missing", "token_invalid", "session", "host", "over_cap"]
REFUSAL_REASONS: tuple[RefusalReason, ...] = ("token_missing", "token_invalid", "session", "host",
                                              "over_cap")
# How one attempt at a caller's credential for a server ended (SPEC §14; credentials.Obtained).
CredentialResult = Literal["obtained", "cached", "refused", "error"]
CREDENTIAL_RESULTS: tuple[CredentialResult, ...] = ("obtained", "cached", "refused", "error")
# Why an answer a server sent was delivered to nobody (SPEC §14: a duplicate, a late answer to a
# request given up, one to an id no request here sent).
DropReason = Literal["duplicate", "late", "unmatched"]
DROP_REASONS: tuple[DropReason, ...] = ("duplicate", "late", "unmatched")
# What became of approval requests (SPEC §15; approvals.State).
APPROVAL_RESULTS = ("requested", "approved", "refused", "expired", "used")
# How a `pdp:` decision was made (SPEC §16): asked (allow, deny, error) or served from the cache.
PDP_RESULTS = ("allow", "deny", "error", "cached")


class CredentialAttempt(Protocol):
    """What a count of a credential attempt reads (`credentials.Obtained`)."""

    @property
    def kind(self) -> str: ...

    @property
    def result(self) -> CredentialResult: ...


_NOTHING = Bounds()
_NO_LABELS: tuple[str, ...] = ()


class Metrics:
    """The series of one process, and the calls an owner (gateway, hosted server) makes.

    Tell it each server's listed tools (`declare`) before counting its calls: a tool label is a
    name the server lists, anything else counts as `(unlisted)`.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._tally = Tally(
            {DECISIONS: ("Tool calls decided, by server, tool and result (allowed, denied, error, "
                         "unlisted).", ("server", "tool", "result")),
             UNMET: ("Unmet requirements of refused calls (confidential ones as (withheld)).",
                     ("requirement",)),
             QUOTA: ("Calls refused because a quota had no unit left, by quota.", ("quota",)),
             RESTARTS: ("Upstream server restarts (a new process or connection after a failure).",
                        ("server",)),
             DROPPED: ("Answers a server sent that went to nobody, by server and reason "
                       "(duplicate; late: to a request given up; unmatched: to an id no request "
                       "on that connection and session sent).", ("server", "reason")),
             RELOADS: ("Policy reloads, by result (success; failure: the old policy stays; "
                       "unusable: in force, but some server's calls are all refused).", ("result",)),
             REFUSED: ("HTTP requests refused before any decision, by reason (token_missing, "
                       "token_invalid, session, host, over_cap).", ("reason",)),
             CREDENTIALS: ("Callers' upstream credentials, by server, kind and result (obtained: "
                           "from an authorization server; cached; refused: none to be had; error: "
                           "an authorization server or store failed).", ("server", "kind", "result")),
             APPROVALS: ("Approval requests and what became of them, by approval and result "
                         "(requested, approved, refused, expired, used).", ("approval", "result")),
             PDP: ("Decisions of the policy's [pdp.NAME] decision points, by table and result "
                   "(allow, deny, error when asked; cached).", ("pdp", "result"))},
            {DECISION_SECONDS: ("Time to decide a call (authentication included).", (),
                                DECISION_BUCKETS),
             UPSTREAM_SECONDS: ("Time an allowed call spent upstream, by server.", ("server",),
                                UPSTREAM_BUCKETS)})
        self.registry.register(self._tally)
        r = self.registry
        self._upstream_up = Gauge(f"{PREFIX}_upstream_up", "1 while the upstream server is "
                                  "connected, else 0.", ("server",), registry=r)
        self._policy_info = Gauge(f"{PREFIX}_policy_info", "1 for the policy revision in force.",
                                  ("revision",), registry=r)
        self._lock = threading.Lock()  # declarations and the policy revision
        self._bounds: dict[str, Bounds] = {}
        self._declared: frozenset[str] = frozenset()  # every server's requirement labels
        self._revision: str | None = None
        tally = self._tally
        self._counts = tally.counts[DECISIONS]
        self._unmet = tally.counts[UNMET]
        self._quota = tally.counts[QUOTA]
        self._credentials = tally.counts[CREDENTIALS]
        with tally.lock:
            tally.start(RELOADS, [(r,) for r in RELOAD_RESULTS])
            tally.start(REFUSED, [(r,) for r in REFUSAL_REASONS])
        seconds = tally.histograms[DECISION_SECONDS]
        self._decision_buckets, self._decision_sums = seconds.series(_NO_LABELS), seconds.sums

    # -- what the owner declares -----------------------------------------------------------------
    def declare(self, server: str, tools: Tools, confidential: Iterable[str] = ()) -> None:
        """The tools `server` lists now (name -> effective requirements) and the policy's
        confidential requirements. Call it whenever the listing or the policy changes. Series
        start at 0 for every listed tool and declared requirement, so `rate()` sees the first
        denial. A tool the server no longer lists loses its series (the counts of the tools still
        listed are kept), and so does a requirement no server declares any more or one that became
        confidential: the series are always those of what is listed now."""
        tools = {name: list(reqs) for name, reqs in tools.items()}
        bounds = Bounds.of(tools, confidential)
        secret = frozenset(confidential)
        with self._lock, self._tally.lock:
            before, declared_before = self._bounds.get(server, _NOTHING), self._declared
            self._bounds[server] = bounds
            self._declared = frozenset().union(*(b.requirements for b in self._bounds.values()))
            tally = self._tally
            tally.forget(DECISIONS, [(server, t, r) for t in before.tools - bounds.tools
                                     for r in RESULTS])
            tally.start(DECISIONS, [(server, t, r) for t in bounds.tools for r in RESULTS[:3]])
            tally.start(DECISIONS, [(server, UNLISTED, "unlisted")])
            tally.start(UNMET, [(r,) for r in bounds.requirements])
            tally.start(QUOTA, [(r[len(QUOTA_PREFIX):],) for r in bounds.requirements
                                if r.startswith(QUOTA_PREFIX)])
            if any(r in secret for reqs in tools.values() for r in reqs):
                tally.start(UNMET, [(WITHHELD,)])
            gone = (secret | declared_before) - self._declared
            tally.forget(UNMET, [(r,) for r in gone])
            tally.forget(QUOTA, [(r[len(QUOTA_PREFIX):],) for r in gone if r.startswith(QUOTA_PREFIX)])

    # -- per call --------------------------------------------------------------------------------
    def observe_decision(self, server: str, decision: Decision, seconds: float | None = None) -> None:
        """Count one decided call (after the guard decided it, allowed or not). `seconds` defaults
        to the decision's own duration. (On every call's path: one lock and a few lookups, 0.65 µs;
        prometheus_client's own types took 2.7 µs: see tally.py.)"""
        tool = decision.tool
        listed = tool in self._bounds.get(server, _NOTHING).tools
        key = ((server, tool, "allowed") if listed and decision.allowed
               else (server, tool if listed else UNLISTED, result_of(decision, listed)))
        elapsed = decision.duration_ns / 1e9 if seconds is None else seconds
        bucket = bisect_left(DECISION_BUCKETS, elapsed)
        counts = self._counts
        with self._tally.lock:
            counts[key] = counts.get(key, 0) + 1
            self._decision_buckets[bucket] += 1
            self._decision_sums[_NO_LABELS] += elapsed
            if not decision.allowed:
                self._count_unmet(decision)

    def _count_unmet(self, decision: Decision) -> None:
        """(tally lock held: `_declared` and the series agree, even during a declaration)"""
        confidential, declared, unmet, quota = decision.confidential, self._declared, self._unmet, \
            self._quota
        for outcome in decision.outcomes:
            if outcome.status is Status.SATISFIED:
                continue
            requirement = outcome.requirement
            label = requirement_label(requirement, confidential, declared)
            unmet[(label,)] = unmet.get((label,), 0) + 1
            # Used up: a quota that had no unit left says when it has one (an undefined quota,
            # refused by form, says nothing; one that was not asked has no outcome).
            if outcome.retry_after_seconds is not None and requirement.startswith(QUOTA_PREFIX) \
                    and outcome.status is Status.UNSATISFIED:
                name = (quota_label(requirement, confidential, declared),)
                quota[name] = quota.get(name, 0) + 1

    def observe_unlisted(self, server: str, tool: str) -> None:
        """Count a call refused without a decision because `server` does not offer `tool` (the
        gateway's `unlisted_tool` refusal)."""
        key = (server, self._bounds.get(server, _NOTHING).tool(tool), "unlisted")
        with self._tally.lock:
            self._counts[key] = self._counts.get(key, 0) + 1

    def observe_upstream(self, server: str, seconds: float) -> None:
        """The time one allowed call spent upstream (request sent to result received)."""
        with self._tally.lock:
            self._tally.histograms[UPSTREAM_SECONDS].add((server,), seconds)

    # -- events ----------------------------------------------------------------------------------
    def upstream_up(self, server: str, up: bool) -> None:
        """The upstream server connected (True) or lost (False). Its restarts series starts at 0
        here, so `increase()` sees the first restart."""
        self._upstream_up.labels(server).set(1 if up else 0)
        with self._tally.lock:
            self._tally.start(RESTARTS, [(server,)])
            self._tally.start(DROPPED, [(server, r) for r in DROP_REASONS])

    def upstream_restarted(self, server: str) -> None:
        self._add(RESTARTS, (server,))

    def upstream_dropped(self, server: str, reason: DropReason) -> None:
        """One answer from `server` delivered to nobody (the gateway's peer.py and http.py)."""
        if reason not in DROP_REASONS:
            raise ValueError(f"upstream_dropped: reason must be one of {', '.join(DROP_REASONS)}, "
                             f"got {reason!r}")
        self._add(DROPPED, (server, reason))

    def policy_loaded(self, revision: str) -> None:
        """The policy revision now in force (at start and after each successful reload): only it
        has `policy_info` 1; the previous revision's series is removed."""
        with self._lock:
            if self._revision is not None and self._revision != revision:
                self._policy_info.remove(self._revision)
            self._policy_info.labels(revision).set(1)
            self._revision = revision

    def policy_reload(self, result: ReloadResult) -> None:
        """One reload attempt of a new policy: `success`, `failure` (the old policy stays), or
        `unusable` (swapped in, but it leaves some server's policy unusable: a near miss)."""
        if result not in RELOAD_RESULTS:
            raise ValueError(f"policy_reload: result must be one of {', '.join(RELOAD_RESULTS)}, "
                             f"got {result!r}")
        self._add(RELOADS, (result,))

    def http_refused(self, reason: RefusalReason) -> None:
        """One HTTP request refused before any decision (a 401, a 404 for a session, a 421/403
        for Host/Origin, a 503/429 at a bound), by reason."""
        if reason not in REFUSAL_REASONS:
            raise ValueError(f"http_refused: reason must be one of {', '.join(REFUSAL_REASONS)}, "
                             f"got {reason!r}")
        self._add(REFUSED, (reason,))

    def credentials_declared(self, kinds: Mapping[str, str]) -> None:
        """The servers with per-caller credentials (key -> kind): their series start at 0."""
        with self._tally.lock:
            self._tally.start(CREDENTIALS, [(server, kind, result) for server, kind in kinds.items()
                                            for result in CREDENTIAL_RESULTS])

    def observe_credential(self, server: str, attempt: CredentialAttempt) -> None:
        """One attempt at a caller's credential for `server` (`credentials.Obtained`: a decision's,
        a cached one on every call with a credential, or a renewal after the server refused one).
        The labels are the config's server keys and fixed words: no caller, token or subject."""
        key = (server, attempt.kind, attempt.result)
        counts = self._credentials
        with self._tally.lock:
            counts[key] = counts.get(key, 0) + 1

    def approvals_declared(self, names: Iterable[str]) -> None:
        """The policy's approvals (`[approvals.NAME]`): their series start at 0."""
        with self._tally.lock:
            self._tally.start(APPROVALS, [(n, r) for n in names for r in APPROVAL_RESULTS])

    def observe_approval(self, approval: str, result: str) -> None:
        """One approval result (SPEC §15). The labels are the policy's approval name and a fixed
        word: never a caller or an argument."""
        if result not in APPROVAL_RESULTS:
            raise ValueError(f"observe_approval: result must be one of "
                             f"{', '.join(APPROVAL_RESULTS)}, got {result!r}")
        self._add(APPROVALS, (approval, result))

    def pdps_declared(self, names: Iterable[str]) -> None:
        """The policy's decision points (`[pdp.NAME]`): their series start at 0."""
        with self._tally.lock:
            self._tally.start(PDP, [(n, r) for n in names for r in PDP_RESULTS])

    def observe_pdp(self, pdp: str, result: str) -> None:
        """One `pdp:` decision (SPEC §16). The labels are the policy's table name and a fixed
        word: never a caller, a tool's arguments or the PDP's reason."""
        if result not in PDP_RESULTS:
            raise ValueError(f"observe_pdp: result must be one of {', '.join(PDP_RESULTS)}, got "
                             f"{result!r}")
        self._add(PDP, (pdp, result))

    def _add(self, counter: str, key: tuple[str, ...]) -> None:
        counts = self._tally.counts[counter]
        with self._tally.lock:
            counts[key] = counts.get(key, 0) + 1

