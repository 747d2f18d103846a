"""Resolvers: the protocol and registry (base.py) and one module per built-in namespace.

`build_registry` assembles the built-ins for one policy snapshot plus the custom resolvers given in
code or published through the `mcp_preconditions.resolvers` entry-point group.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..arguments import ArgumentCondition, ClaimCondition
from ..errors import RequirementError
from ..policy.load import PolicySource
from .auth import AuthResolver
from .base import CallContext, Registry, Resolver, load_entry_point_resolvers
from .capability import CapabilityResolver, CompiledGrant, Evaluate
from .env import EnvResolver, environment_labels
from .feature import FeatureResolver, FlagSource
from .quota import CompiledQuota, QuotaResolver
from .quota_store import FixedQuotaStore, MemoryQuotaStore, QuotaStore, Rate, fresh_quota_store
from .state import StateCallable, StateResolver, StateSource

if TYPE_CHECKING:
    from ..approvals import ApprovalResolver, ApprovalStore, MemoryApprovalStore
    from ..pdp.live import PdpLive
    from ..pdp.resolver import PdpResolver

BUILTIN_NAMESPACES = ("approval", "auth", "capability", "env", "feature", "pdp", "quota", "state")


def _memory_approvals() -> MemoryApprovalStore:
    from ..approvals import MemoryApprovalStore

    return MemoryApprovalStore()


def _pdp_live() -> PdpLive:
    from ..pdp.live import PdpLive

    return PdpLive()


@dataclass
class LiveSources:
    """Live fact sources given in code (they take precedence over the policy's configuration)."""

    state_callables: Mapping[str, StateCallable] = field(default_factory=dict)
    state: StateSource | None = None
    flags: FlagSource | None = None
    # The buckets of `store = "memory"` quotas: kept by the Guard across reloads, so a new policy
    # revision refills nobody. Guards given one LiveSources share them.
    quota_memory: MemoryQuotaStore = field(default_factory=MemoryQuotaStore)
    # One store for every quota, whatever its `store` says (`check`, policy tests, tests).
    quotas: QuotaStore | None = None
    # The requests of `store = "memory"` approvals, kept across reloads like memory quotas (a
    # new revision binds new calls; a request of the old one stays on its page, expiring).
    approval_memory: MemoryApprovalStore = field(default_factory=_memory_approvals)
    # One store for every approval, whatever its `store` says (tests).
    approvals: ApprovalStore | None = None
    # The base URL of the approval pages (the gateway's public URL): a denial's `url` remedy.
    approvals_url: str | None = None
    # `policy test` only, never a server: every approval is taken as given (a person decides each
    # call), so a case decides the call on the rest of its requirements.
    approvals_taken_as_given: bool = False
    # Told each (approval name, result) an approval operation made: the approvals_total metric
    # (read when counted: an owner may set it once the guard is made, `Guard.live`).
    approval_results: Callable[[str, str], None] | None = None
    # The `pdp:` resolvers' wiring: the pdp_total metric, a tool's server, tests' transport/clock.
    pdp: PdpLive = field(default_factory=_pdp_live)


def import_callable(spec: str, where: str) -> StateCallable:
    module, _, attr = spec.partition(":")
    try:
        obj = getattr(importlib.import_module(module), attr) if attr else None
    except Exception as exc:  # also ValueError/TypeError for ':fn' or '.relative:fn'
        raise RequirementError([f"{where}: cannot import {spec!r}: {exc}"]) from None
    if not callable(obj):
        raise RequirementError([f"{where}: {spec!r} is not a callable ('module:function')"])
    return obj  # type: ignore[no-any-return]


def _state_source(source: PolicySource, live: LiveSources) -> StateSource | None:
    if live.state is not None or source.policy.state.redis is None:
        return live.state
    try:
        from .state_redis import RedisStateSource
    except ImportError as exc:
        raise RequirementError([f"{source.source}: state.redis needs the 'redis' extra, which is "
                                f"not installed: install mcp-preconditions with [redis] ({exc})"]) from None
    return RedisStateSource.from_policy(source.policy.state.redis)


def _flag_source(source: PolicySource, live: LiveSources) -> FlagSource | None:
    if live.flags is not None or source.policy.features.openfeature is None:
        return live.flags
    try:
        from .feature_openfeature import OpenFeatureFlagSource
    except ImportError as exc:
        raise RequirementError([f"{source.source}: features.openfeature needs the 'openfeature' "
                                f"extra, which is not installed: install mcp-preconditions with "
                                f"[openfeature] ({exc})"]) from None
    return OpenFeatureFlagSource.from_policy(source.policy.features.openfeature, source)


def _quota_resolver(source: PolicySource, live: LiveSources) -> QuotaResolver:
    policy = source.policy
    redis: QuotaStore | None = None
    if live.quotas is None and policy.state.redis is not None and any(
            q.store == "redis" for q in policy.quotas.values()):
        try:
            from .quota_redis import RedisQuotaStore
        except ImportError as exc:
            raise RequirementError([f"{source.source}: quotas with store = \"redis\" need the "
                                    f"'redis' extra, which is not installed: install "
                                    f"mcp-preconditions with [redis] ({exc})"]) from None
        redis = RedisQuotaStore.from_policy(policy.state.redis)  # one for all: one script per call
    compiled = {}
    for name, quota in policy.quotas.items():
        store = live.quotas or (redis if quota.store == "redis" else live.quota_memory)
        if store is None:  # the policy model refuses this already; a constructed one may not
            raise RequirementError([f'{source.source}: quotas.{name}.store: store = "redis" needs '
                                    "a [state.redis] connection"])
        compiled[name] = CompiledQuota(name, Rate.of(quota.calls, quota.per_seconds), quota.by,
                                       store, quota.per_seconds)
    return QuotaResolver(compiled)


def _approval_resolver(source: PolicySource, live: LiveSources) -> ApprovalResolver:
    from ..approvals import approval_resolver

    def observe(name: str, result: str) -> None:  # read when counted: set after the guard is made
        told = live.approval_results
        if told is not None:
            told(name, result)

    resolver = approval_resolver(source, live.approval_memory, live.approvals,
                                 pages_url=live.approvals_url, observe=observe)
    resolver.taken_as_given = live.approvals_taken_as_given
    return resolver


def _pdp_resolver(source: PolicySource, live: LiveSources) -> PdpResolver:
    from ..pdp import pdp_resolver

    return pdp_resolver(source, live.pdp)


def build_registry(source: PolicySource, evaluate: Evaluate, *, custom: Iterable[Resolver] = (),
                   live: LiveSources | None = None, entry_points: bool = True) -> Registry:
    """The resolvers deciding one policy snapshot. Raises RegistryError for a namespace clash."""
    policy = source.policy
    live = live or LiveSources()
    callables = {k: import_callable(v, f"{source.source}: state.callables.{k}")
                 for k, v in policy.state.callables.items()}
    callables.update(live.state_callables)
    auth = AuthResolver(policy.auth.claim_aliases, policy.auth.scope_implications)
    grants = [CompiledGrant(i, frozenset(g.capabilities), tuple(g.when),
                            tuple(ArgumentCondition.of(p, v) for p, v in g.arguments.items()),
                            tuple(ClaimCondition.of(p, c, auth.aliases.get(c))
                                  for p, c in g.argument_claims.items()))
              for i, g in enumerate(policy.capabilities.grants)]
    registry = Registry([
        _approval_resolver(source, live),
        auth,
        CapabilityResolver(grants, policy.capabilities.claim, evaluate, policy.confidential),
        EnvResolver(environment_labels(policy.environment, policy.environment_variable)),
        FeatureResolver(policy.features.flags, _flag_source(source, live)),
        _pdp_resolver(source, live),
        _quota_resolver(source, live),
        StateResolver(policy.state.values, callables, _state_source(source, live),
                      ttl_seconds=policy.state.ttl_seconds,
                      call_timeout=policy.guard.lookup_timeout_seconds),
    ])
    for resolver in custom:
        registry.register(resolver)
    if entry_points:
        for resolver in load_entry_point_resolvers():
            registry.register(resolver)
    return registry


__all__ = [
    "BUILTIN_NAMESPACES", "AuthResolver", "CallContext", "CapabilityResolver", "EnvResolver",
    "FeatureResolver", "FixedQuotaStore", "FlagSource", "LiveSources", "MemoryQuotaStore",
    "QuotaResolver", "QuotaStore", "Registry", "Resolver", "StateResolver", "StateSource",
    "build_registry", "fresh_quota_store",
]
