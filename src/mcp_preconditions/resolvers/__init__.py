"""Resolvers: the protocol and registry (base.py) and one module per namespace that decides from
the policy and the call alone (auth, capability, env, feature, quota, state). Which namespaces are
built in, and how a policy snapshot gets their resolvers, is namespaces.py's table.
"""

from __future__ import annotations

from .auth import AuthResolver
from .base import CallContext, Registry, Resolver
from .capability import CapabilityResolver
from .env import EnvResolver
from .feature import FeatureResolver, FlagSource
from .quota import QuotaResolver
from .quota_store import FixedQuotaStore, MemoryQuotaStore, QuotaStore, fresh_quota_store
from .state import StateResolver, StateSource

__all__ = [
    "AuthResolver", "CallContext", "CapabilityResolver", "EnvResolver", "FeatureResolver",
    "FixedQuotaStore", "FlagSource", "MemoryQuotaStore", "QuotaResolver", "QuotaStore", "Registry",
    "Resolver", "StateResolver", "StateSource", "fresh_quota_store",
]
