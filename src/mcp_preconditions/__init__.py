"""mcp-preconditions: enforce SEP-2487 `execution.requirements` on MCP tools.

The public surface is what this package exports (`__all__`, below), and three public subpackages,
each with its own `__all__`: `mcp_preconditions.integrations.*` (the MCP SDK and fastmcp server
adapters, the filtering client, the agent frameworks; one module per framework, none imported
here, so the SDKs stay optional extras), `mcp_preconditions.telemetry` (metrics and traces) and
`mcp_preconditions.gateway`. Every other module is an implementation module.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

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
from .decisions import DecisionRecorder, LoggingRecorder, decision_record, log_decisions
from .drivers.bundle import BundleReloader, load_policy_source, load_policy_url, policy_reloader
from .drivers.reload import PolicyChange, PolicyReloader
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
from .late import Held, LateCall, LateResolver, LateStage, Outbound, Sidecar
from .namespaces import LiveSources
from .outcomes import Decision, Outcome, Refusal, Refused, Status, Verdict
from .policy import Policy, PolicySource, load_policy, parse_policy, policy_schema
from .principal import ANONYMOUS, Credentials, Identity, Principal
from .replica import replica_labels
from .requirements import Finding, body_of, lint, merge, namespace_of
from .resolvers import FlagSource, Registry, Resolver, StateSource
from .resolvers.base import CallContext, Dependencies

try:
    __version__ = _version("mcp-preconditions")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "ANONYMOUS",
    "AuthBackendError",
    "Authenticator",
    "BackendError",
    "BundleReloader",
    "CallContext",
    "ClientResolver",
    "Credentials",
    "Decision",
    "DecisionRecorder",
    "Dependencies",
    "FilterMode",
    "FilterResult",
    "Finding",
    "FlagSource",
    "Guard",
    "Held",
    "Identity",
    "InputError",
    "Knowledge",
    "LateCall",
    "LateResolver",
    "LateStage",
    "LiveSources",
    "LoggingRecorder",
    "Outbound",
    "Outcome",
    "PassThroughAuthenticator",
    "Policy",
    "PolicyChange",
    "PolicyError",
    "PolicyReloader",
    "PolicySource",
    "PreconditionsError",
    "Principal",
    "Refusal",
    "Refused",
    "Registry",
    "RegistryError",
    "RequirementError",
    "Resolver",
    "Sidecar",
    "StateSource",
    "Status",
    "TokenError",
    "ToolVerdict",
    "ToolsFileError",
    "Verdict",
    "__version__",
    "body_of",
    "build_authenticator",
    "decision_record",
    "filter_tools",
    "lint",
    "load_policy",
    "load_policy_source",
    "load_policy_url",
    "log_decisions",
    "merge",
    "namespace_of",
    "parse_policy",
    "policy_reloader",
    "policy_schema",
    "replica_labels",
    "verdict_for",
]
