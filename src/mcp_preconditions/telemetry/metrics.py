"""The Prometheus series of SPEC §13 on a registry of their own, and the calls that move them.

One `Metrics` object per process (a gateway, a hosted server, a test): its registry is its own, so
two in one process never collide. Every label value is bounded (see labels.py); the per-call
methods cost a dictionary lookup and a locked add or two.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any, Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ..outcomes import Decision, Status
from .labels import (
    OTHER,
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

PREFIX = "mcp_preconditions"
# A decision takes microseconds (a cached caller) to a resolver's timeout (seconds).
DECISION_BUCKETS = (0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
UPSTREAM_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                    30.0, 60.0, 120.0)
ReloadResult = Literal["success", "failure"]
_NOTHING = Bounds()


class Metrics:
    """The series of one process, and the calls an owner (gateway, hosted server) makes.

    Tell it each server's listed tools (`declare`) before counting its calls: a tool label is a
    name the server lists, anything else counts as `(unlisted)`.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self._decisions = Counter(f"{PREFIX}_decisions", "Tool calls decided, by server, tool and "
                                  "result (allowed, denied, error, unlisted).",
                                  ("server", "tool", "result"), registry=r)
        self._unmet = Counter(f"{PREFIX}_unmet", "Unmet requirements of denied calls "
                              "(confidential ones as (withheld)).", ("requirement",), registry=r)
        self._decision_seconds = Histogram(f"{PREFIX}_decision_seconds", "Time to decide a call "
                                           "(authentication included).", buckets=DECISION_BUCKETS,
                                           registry=r)
        self._upstream_seconds = Histogram(f"{PREFIX}_upstream_seconds", "Time an allowed call "
                                           "spent upstream, by server.", ("server",),
                                           buckets=UPSTREAM_BUCKETS, registry=r)
        self._upstream_up = Gauge(f"{PREFIX}_upstream_up", "1 while the upstream server is "
                                  "connected, else 0.", ("server",), registry=r)
        self._restarts = Counter(f"{PREFIX}_upstream_restarts", "Upstream server restarts "
                                 "(a new process or connection after a failure).", ("server",),
                                 registry=r)
        self._policy_info = Gauge(f"{PREFIX}_policy_info", "1 for the policy revision in force.",
                                  ("revision",), registry=r)
        self._reloads = Counter(f"{PREFIX}_policy_reloads", "Policy reloads, by result (success, "
                                "failure: the old policy stays).", ("result",), registry=r)
        self._quota = Counter(f"{PREFIX}_quota_exhausted", "Calls denied because a quota had no "
                              "unit left, by quota.", ("quota",), registry=r)
        for result in ("success", "failure"):
            self._reloads.labels(result)
        self._lock = threading.RLock()  # declarations, and a requirement label's first use
        self._bounds: dict[str, Bounds] = {}
        self._declared: frozenset[str] = frozenset()  # every server's requirement labels
        self._revision: str | None = None
        self._counters: dict[tuple[str, str, str], Any] = {}  # (server, tool, result) -> child
        self._unmet_children: dict[str, Any] = {}
        self._quota_children: dict[str, Any] = {}

    # -- what the owner declares -----------------------------------------------------------------
    def declare(self, server: str, tools: Tools, confidential: Iterable[str] = ()) -> None:
        """The tools `server` lists now (name -> effective requirements) and the policy's
        confidential requirements. Call it whenever the listing or the policy changes. Series
        start at 0 for every listed tool and declared requirement, so `rate()` sees the first
        denial; a requirement that became confidential loses its series."""
        bounds = Bounds.of(tools, confidential)
        secret = frozenset(confidential)
        with self._lock:
            self._bounds[server] = bounds
            self._declared = frozenset().union(*(b.requirements for b in self._bounds.values()))
            for tool in bounds.tools:
                for result in RESULTS[:3]:
                    self._counter(server, tool, result)
            self._counter(server, UNLISTED, "unlisted")
            for requirement in bounds.requirements:
                self._unmet_child(requirement)
                if requirement.startswith(QUOTA_PREFIX):
                    self._quota_child(requirement[len(QUOTA_PREFIX):])
            if any(r in secret for reqs in tools.values() for r in reqs):
                self._unmet_child(WITHHELD)
            self._forget(secret - self._declared)

    def _forget(self, secret: frozenset[str]) -> None:
        """Drop the series of requirements that are confidential now (lock held)."""
        for requirement in secret & self._unmet_children.keys():
            self._unmet.remove(requirement)
            del self._unmet_children[requirement]
            quota = requirement[len(QUOTA_PREFIX):]
            if requirement.startswith(QUOTA_PREFIX) and quota in self._quota_children:
                self._quota.remove(quota)
                del self._quota_children[quota]

    # -- per call --------------------------------------------------------------------------------
    def observe_decision(self, server: str, decision: Decision, seconds: float | None = None) -> None:
        """Count one decided call (after the guard decided it, allowed or not). `seconds` defaults
        to the decision's own duration."""
        bounds = self._bounds.get(server, _NOTHING)
        listed = decision.tool in bounds.tools
        key = (server, decision.tool if listed else UNLISTED, result_of(decision, listed))
        counter = self._counters.get(key)
        (counter if counter is not None else self._counter(*key)).inc()
        self._decision_seconds.observe(decision.duration_ns / 1e9 if seconds is None else seconds)
        if not decision.allowed:
            self._count_unmet(decision)

    def observe_unlisted(self, server: str, tool: str) -> None:
        """Count a call refused without a decision because `server` does not offer `tool` (the
        gateway's `unlisted_tool` refusal)."""
        key = (server, self._bounds.get(server, _NOTHING).tool(tool), "unlisted")
        counter = self._counters.get(key)
        (counter if counter is not None else self._counter(*key)).inc()

    def _count_unmet(self, decision: Decision) -> None:
        confidential, declared = decision.confidential, self._declared
        for outcome in decision.outcomes:
            if outcome.status is Status.SATISFIED:
                continue
            requirement = outcome.requirement
            label = requirement_label(requirement, confidential, declared)
            child = self._unmet_children.get(label)
            (child if child is not None else self._unmet_child(label)).inc()
            if outcome.status is Status.UNSATISFIED and requirement.startswith(QUOTA_PREFIX):
                quota = quota_label(requirement, confidential, declared)
                child = self._quota_children.get(quota)
                (child if child is not None else self._quota_child(quota)).inc()

    def observe_upstream(self, server: str, seconds: float) -> None:
        """The time one allowed call spent upstream (request sent to result received)."""
        self._upstream_seconds.labels(server).observe(seconds)

    # -- events ----------------------------------------------------------------------------------
    def upstream_up(self, server: str, up: bool) -> None:
        """The upstream server connected (True) or lost (False)."""
        self._upstream_up.labels(server).set(1 if up else 0)

    def upstream_restarted(self, server: str) -> None:
        self._restarts.labels(server).inc()

    def policy_loaded(self, revision: str) -> None:
        """The policy revision now in force (at start and after each successful reload): only it
        has `policy_info` 1; the previous revision's series is removed."""
        with self._lock:
            if self._revision is not None and self._revision != revision:
                self._policy_info.remove(self._revision)
            self._policy_info.labels(revision).set(1)
            self._revision = revision

    def policy_reload(self, result: ReloadResult) -> None:
        """One reload attempt of a new policy: `success`, or `failure` (the old policy stays)."""
        if result not in ("success", "failure"):
            raise ValueError(f"policy_reload: result must be 'success' or 'failure', got {result!r}")
        self._reloads.labels(result).inc()

    # -- label children: created on first use, then read without a lock --------------------------
    def _counter(self, server: str, tool: str, result: str) -> Any:
        # `labels()` returns the one child of a label set, so racing first uses agree.
        return self._counters.setdefault((server, tool, result),
                                         self._decisions.labels(server, tool, result))

    def _unmet_child(self, label: str) -> Any:
        with self._lock:  # re-checked here: a declaration may just have made it confidential
            if label not in self._declared and label not in (WITHHELD, OTHER):
                label = OTHER
            return self._unmet_children.setdefault(label, self._unmet.labels(label))

    def _quota_child(self, label: str) -> Any:
        with self._lock:
            if QUOTA_PREFIX + label not in self._declared and label not in (WITHHELD, OTHER):
                label = OTHER
            return self._quota_children.setdefault(label, self._quota.labels(label))
