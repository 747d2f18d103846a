"""`feature:KEY` from OpenFeature: the flagd provider in file mode, evaluated per call.

The evaluation context is the subject (targeting key), the policy's `context_claims` and the tool
name. Missing or non-boolean flags return None / the value (unsatisfied); provider errors raise.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from openfeature import api
from openfeature.client import OpenFeatureClient
from openfeature.evaluation_context import EvaluationContext
from openfeature.exception import ErrorCode
from openfeature.flag_evaluation import FlagEvaluationDetails, Reason
from openfeature.provider import FeatureProvider, ProviderStatus
from openfeature.provider.no_op_provider import NoOpProvider

from ..errors import BackendError, PolicyError
from ..policy.load import PolicySource
from ..policy.model import OpenFeature as OpenFeatureSettings
from .base import CallContext

TOOL_ATTRIBUTE = "tool"  # set last: a token claim named `tool` cannot spoof the tool name
DOMAIN_PREFIX = "mcp-preconditions:"


class NonBoolean:
    """A flag value of some non-boolean type the provider would not return as is."""


class OpenFeatureFlagSource:
    """A FlagSource over one OpenFeature client bound to its own named domain.

    `api.set_provider` is global state: each source uses a domain of its own, so the application's
    default provider and other sources are never touched.
    """

    name = "openfeature"

    def __init__(self, client: OpenFeatureClient, context_claims: Sequence[str] = ()) -> None:
        self.client = client
        self.context_claims = tuple(context_claims)

    @classmethod
    def from_policy(cls, settings: OpenFeatureSettings, source: PolicySource) -> OpenFeatureFlagSource:
        """A source over the flagd file the policy names. The provider (and its file watcher) is
        shared by every snapshot reading that file, so reloads do not start a watcher each."""
        path = source.resolve_path(settings.path).resolve()
        if not path.is_file():
            raise PolicyError(source.source, [f"features.openfeature.path: flag file '{path}' "
                                              "does not exist"])
        poll_ms = max(1, round(settings.poll_interval_seconds * 1000))
        domain = f"{DOMAIN_PREFIX}flagd:{path}?poll_ms={poll_ms}"
        problem = _ensure_flagd(domain, path, poll_ms)
        if problem is not None:
            raise PolicyError(source.source, [f"features.openfeature.path: flag file '{path}' "
                                              f"is not usable: {problem}"])
        return cls(api.get_client(domain), settings.context_claims)

    def context_for(self, call: CallContext) -> EvaluationContext:
        """The evaluation context of one call: subject, selected claims, tool name."""
        attributes: dict[str, Any] = {}
        principal = call.identity.principal
        if principal is not None:
            for claim in self.context_claims:
                value = principal.claims.get(claim)
                if _attribute_ok(value):
                    attributes[claim] = value
        attributes[TOOL_ATTRIBUTE] = call.tool
        return EvaluationContext(targeting_key=call.subject, attributes=attributes)

    async def evaluate(self, key: str, context: CallContext) -> Any:
        """The flag's value, None when it is missing or disabled; raises BackendError on a provider
        error (not ready, broken flag file, bad targeting rule)."""
        if isinstance(self.client.provider, NoOpProvider):  # its domain was closed or never set
            raise BackendError("no flag provider is registered for this source")
        status = self.client.get_provider_status()
        if status is not ProviderStatus.READY:
            raise BackendError(f"flag provider is {status.value.lower()}")
        ctx = self.context_for(context)
        details = await self.client.get_boolean_details_async(key, False, ctx)
        if details.error_code is None:
            unresolved = details.variant is None and details.reason == Reason.DEFAULT
            if details.reason == Reason.DISABLED or unresolved:
                return None  # disabled, or no variant resolved: the flag does not apply
            return details.value
        if details.error_code == ErrorCode.FLAG_NOT_FOUND:
            return None
        if details.error_code == ErrorCode.TYPE_MISMATCH:
            return await self._non_boolean(key, ctx)
        raise BackendError(_describe(details))

    async def _non_boolean(self, key: str, ctx: EvaluationContext) -> Any:
        """The flag's actual value, so that the unsatisfied reason can name its type."""
        found: list[FlagEvaluationDetails[Any]] = [
            await self.client.get_string_details_async(key, "", ctx),
            await self.client.get_integer_details_async(key, 0, ctx),
            await self.client.get_float_details_async(key, 0.0, ctx),
        ]
        for details in found:
            if details.error_code is None and details.variant is not None:
                return details.value
        return NonBoolean()


def _attribute_ok(value: Any) -> bool:
    """Claim values the evaluation context accepts: JSON scalars, arrays and objects, not null."""
    if value is None:
        return False
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return isinstance(value, str | int | float | bool | Sequence | Mapping)


def _describe(details: FlagEvaluationDetails[Any]) -> str:
    code = details.error_code.value if details.error_code is not None else "ERROR"
    message = f": {details.error_message}" if details.error_message else ""
    return f"flag provider error {code}{message}"


# -- the flagd providers this library registered, one per (file, poll interval) ------------------
_PROVIDERS: dict[str, FeatureProvider] = {}
_PROVIDERS_LOCK = threading.Lock()


def _ensure_flagd(domain: str, path: Path, poll_ms: int) -> str | None:
    """Register a flagd file provider under `domain` once; None when it is ready, else why not."""
    from openfeature.contrib.provider.flagd import FlagdProvider
    from openfeature.contrib.provider.flagd.config import ResolverType

    with _PROVIDERS_LOCK:
        provider = _PROVIDERS.get(domain)
        if provider is None:
            # In file mode flagd polls the file every `deadline_ms`; edits are picked up by mtime.
            provider = FlagdProvider(resolver_type=ResolverType.FILE,
                                     offline_flag_source_path=str(path), deadline_ms=poll_ms)
            _PROVIDERS[domain] = provider
            try:
                api.set_provider_and_wait(provider, domain)
            except Exception as exc:  # its watcher keeps polling: a fixed file makes it ready
                return _init_failure(exc)
    status = api.get_client(domain).get_provider_status()
    return None if status is ProviderStatus.READY else f"flag provider is {status.value.lower()}"


def _init_failure(exc: BaseException) -> str:
    cause = exc.__cause__ or exc
    return f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__


def close_providers() -> None:
    """Shut down every provider this module registered (tests, clean shutdown): each domain is
    pointed at a no-op provider, which stops the old provider's file watcher."""
    with _PROVIDERS_LOCK:
        domains = list(_PROVIDERS)
        _PROVIDERS.clear()
    for domain in domains:
        api.set_provider(NoOpProvider(), domain)
