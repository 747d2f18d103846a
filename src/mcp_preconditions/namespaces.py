"""The built-in namespaces, in one table (`BUILT_IN`): which they are, where each one's resolver
lives, and how a policy snapshot gets it (`build_registry`). The rest of the core names none of the
late ones: a late stage plugs in through late.py like a third-party one would.

The late namespaces are decided after every other requirement, each in its resolver's `order`:
`pdp:` (50, SPEC §16), `credential:` (100, §14), `approval:` (500, §15), `quota:` (900, §13: a unit
is taken last, by a call about to run).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from .arguments import ArgumentCondition, ClaimCondition
from .errors import RequirementError
from .policy.load import PolicySource
from .resolvers.auth import AuthResolver
from .resolvers.base import Registry, Resolver, load_entry_point_resolvers
from .resolvers.capability import CapabilityResolver, CompiledGrant, Evaluate
from .resolvers.env import EnvResolver, environment_labels
from .resolvers.feature import FeatureResolver, FlagSource
from .resolvers.quota import CompiledQuota, QuotaResolver
from .resolvers.quota_store import MemoryQuotaStore, QuotaStore, Rate
from .resolvers.state import StateCallable, StateResolver, StateSource

if TYPE_CHECKING:
    from .approvals.store import ApprovalStore, MemoryApprovalStore
    from .pdp.live import PdpLive


def _memory_approvals() -> MemoryApprovalStore:
    from .approvals.store import MemoryApprovalStore

    return MemoryApprovalStore()


def _pdp_live() -> PdpLive:
    from .pdp.live import PdpLive

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


# How a policy snapshot gets a namespace's resolver: (the policy, the live sources, the snapshot's
# evaluator of one requirement, for grants' conditions).
Build = Callable[[PolicySource, LiveSources, Evaluate], Resolver]


class BuiltIn(NamedTuple):
    """One built-in namespace. `resolver`: where its resolver lives (`module:name`). `build`: how a
    snapshot makes one from its policy; None: its owner builds it and hands it to the Guard
    (`resolvers=`). `authorization`: its `error` means an authorization server did not answer
    (SPEC §15: the denial says so)."""

    namespace: str
    resolver: str
    build: Build | None
    authorization: bool = False


def import_callable(spec: str, where: str) -> StateCallable:
    module, _, attr = spec.partition(":")
    try:
        obj = getattr(importlib.import_module(module), attr) if attr else None
    except Exception as exc:  # also ValueError/TypeError for ':fn' or '.relative:fn'
        raise RequirementError([f"{where}: cannot import {spec!r}: {exc}"]) from None
    if not callable(obj):
        raise RequirementError([f"{where}: {spec!r} is not a callable ('module:function')"])
    return obj  # type: ignore[no-any-return]


def _approval(source: PolicySource, live: LiveSources, evaluate: Evaluate) -> Resolver:
    from .approvals.lifecycle import told_to
    from .approvals.resolver import approval_resolver  # (rfc8785: when a snapshot is built)

    resolver = approval_resolver(source, live.approval_memory, live.approvals,
                                 pages_url=live.approvals_url, observe=told_to(live))
    resolver.taken_as_given = live.approvals_taken_as_given
    return resolver


def _auth(source: PolicySource, live: LiveSources, evaluate: Evaluate) -> Resolver:
    auth = source.policy.auth
    return AuthResolver(auth.claim_aliases, auth.scope_implications)


def _capability(source: PolicySource, live: LiveSources, evaluate: Evaluate) -> Resolver:
    policy = source.policy
    aliases = AuthResolver(policy.auth.claim_aliases).aliases
    grants = [CompiledGrant(i, frozenset(g.capabilities), tuple(g.when),
                            tuple(ArgumentCondition.of(p, v) for p, v in g.arguments.items()),
                            tuple(ClaimCondition.of(p, c, aliases.get(c))
                                  for p, c in g.argument_claims.items()))
              for i, g in enumerate(policy.capabilities.grants)]
    return CapabilityResolver(grants, policy.capabilities.claim, evaluate, policy.confidential)


def _env(source: PolicySource, live: LiveSources, evaluate: Evaluate) -> Resolver:
    policy = source.policy
    return EnvResolver(environment_labels(policy.environment, policy.environment_variable))


def _feature(source: PolicySource, live: LiveSources, evaluate: Evaluate) -> Resolver:
    flags = live.flags
    settings = source.policy.features
    if flags is None and settings.openfeature is not None:
        try:
            from .resolvers.feature_openfeature import OpenFeatureFlagSource
        except ImportError as exc:
            raise RequirementError([f"{source.source}: features.openfeature needs the 'openfeature' "
                                    f"extra, which is not installed: install mcp-preconditions with "
                                    f"[openfeature] ({exc})"]) from None
        flags = OpenFeatureFlagSource.from_policy(settings.openfeature, source)
    return FeatureResolver(settings.flags, flags)


def _pdp(source: PolicySource, live: LiveSources, evaluate: Evaluate) -> Resolver:
    from .pdp import pdp_resolver

    return pdp_resolver(source, live.pdp)


def _quota(source: PolicySource, live: LiveSources, evaluate: Evaluate) -> Resolver:
    policy = source.policy
    redis: QuotaStore | None = None
    if live.quotas is None and policy.state.redis is not None and any(
            q.store == "redis" for q in policy.quotas.values()):
        try:
            from .resolvers.quota_redis import RedisQuotaStore
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


def _state(source: PolicySource, live: LiveSources, evaluate: Evaluate) -> Resolver:
    policy = source.policy
    callables = {k: import_callable(v, f"{source.source}: state.callables.{k}")
                 for k, v in policy.state.callables.items()}
    callables.update(live.state_callables)
    state = live.state
    if state is None and policy.state.redis is not None:
        try:
            from .resolvers.state_redis import RedisStateSource
        except ImportError as exc:
            raise RequirementError([f"{source.source}: state.redis needs the 'redis' extra, which "
                                    f"is not installed: install mcp-preconditions with [redis] "
                                    f"({exc})"]) from None
        state = RedisStateSource.from_policy(policy.state.redis)
    return StateResolver(policy.state.values, callables, state,
                         ttl_seconds=policy.state.ttl_seconds,
                         call_timeout=policy.guard.lookup_timeout_seconds)


BUILT_IN: tuple[BuiltIn, ...] = (
    BuiltIn("approval", "mcp_preconditions.approvals.resolver:ApprovalResolver", _approval),
    BuiltIn("auth", "mcp_preconditions.resolvers.auth:AuthResolver", _auth, authorization=True),
    BuiltIn("capability", "mcp_preconditions.resolvers.capability:CapabilityResolver", _capability),
    # Built by the gateway from its servers' `[servers.KEY.credentials]` (credentials/build.py).
    BuiltIn("credential", "mcp_preconditions.credentials.resolver:CredentialResolver", None,
            authorization=True),
    BuiltIn("env", "mcp_preconditions.resolvers.env:EnvResolver", _env),
    BuiltIn("feature", "mcp_preconditions.resolvers.feature:FeatureResolver", _feature),
    BuiltIn("pdp", "mcp_preconditions.pdp.resolver:PdpResolver", _pdp),
    BuiltIn("quota", "mcp_preconditions.resolvers.quota:QuotaResolver", _quota),
    BuiltIn("state", "mcp_preconditions.resolvers.state:StateResolver", _state),
)
BUILTIN_NAMESPACES = tuple(b.namespace for b in BUILT_IN)
# The requirements whose `error` is an authorization server's (a token's verifier, an exchange, a
# refresh): what a denial tells the caller to retry.
AUTHORIZATION_SERVERS = tuple(f"{b.namespace}:" for b in BUILT_IN if b.authorization)


def build_registry(source: PolicySource, evaluate: Evaluate, *, custom: Iterable[Resolver] = (),
                   live: LiveSources | None = None, entry_points: bool = True) -> Registry:
    """The resolvers deciding one policy snapshot: the built-ins the policy configures (`BUILT_IN`),
    then `custom` ones and those published under the `mcp_preconditions.resolvers` entry-point
    group. Raises RegistryError for a namespace clash."""
    live = live or LiveSources()
    registry = Registry([b.build(source, live, evaluate) for b in BUILT_IN if b.build is not None])
    for resolver in custom:
        registry.register(resolver)
    if entry_points:
        for resolver in load_entry_point_resolvers():
            registry.register(resolver)
    return registry
