"""mcp-preconditions: enforce SEP-2487 `execution.requirements` on MCP tools.

The whole public surface is re-exported here; everything else is an implementation module.
"""

from .auth import Authenticator, PassThroughAuthenticator, build_authenticator
from .client import (
    ClientResolver,
    FilterMode,
    FilterResult,
    Knowledge,
    ToolVerdict,
    filter_tools,
    verdict_for,
)
from .decisions import DecisionRecorder, LoggingRecorder, decision_record
from .errors import (
    AuthBackendError,
    BackendError,
    InputError,
    PolicyError,
    PreconditionsError,
    RegistryError,
    RequirementError,
    TokenError,
    ToolsFileError,
)
from .guard import Guard
from .outcomes import Decision, Outcome, Status, Verdict
from .policy import Policy, PolicySource, load_policy, parse_policy, policy_schema
from .principal import ANONYMOUS, Credentials, Identity, Principal
from .requirements import Finding, body_of, lint, merge, namespace_of
from .resolvers import FlagSource, LiveSources, Registry, Resolver, StateSource
from .resolvers.base import CallContext

__version__ = "0.1.0"

__all__ = [
    "ANONYMOUS",
    "AuthBackendError",
    "Authenticator",
    "BackendError",
    "CallContext",
    "ClientResolver",
    "Credentials",
    "Decision",
    "DecisionRecorder",
    "FilterMode",
    "FilterResult",
    "Finding",
    "FlagSource",
    "Guard",
    "Identity",
    "InputError",
    "Knowledge",
    "LiveSources",
    "LoggingRecorder",
    "Outcome",
    "PassThroughAuthenticator",
    "Policy",
    "PolicyError",
    "PolicySource",
    "PreconditionsError",
    "Principal",
    "Registry",
    "RegistryError",
    "RequirementError",
    "Resolver",
    "StateSource",
    "Status",
    "TokenError",
    "ToolVerdict",
    "ToolsFileError",
    "Verdict",
    "body_of",
    "build_authenticator",
    "decision_record",
    "filter_tools",
    "lint",
    "load_policy",
    "merge",
    "namespace_of",
    "parse_policy",
    "policy_schema",
    "verdict_for",
]
