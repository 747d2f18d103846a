"""The policy's `[pdp.NAME]` tables as one `PdpResolver` (SPEC §16): each table's `env:` token read
(a variable that is not set is one line naming the key path), and tables with the same `url` and
token sharing one endpoint, so a call's requirements of both go in one batch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..errors import RequirementError
from ..policy.load import PolicySource
from .cache import DecisionCache
from .live import PdpLive
from .points import Table, Verdict
from .resolver import PdpResolver


def pdp_resolver(source: PolicySource, live: PdpLive,
                 environ: Mapping[str, str] | None = None) -> PdpResolver:
    """The resolver of one snapshot's `[pdp.*]` tables."""
    env = os.environ if environ is None else environ
    if source.policy.pdp:
        from .client import Endpoint  # (httpx2: only for a policy that asks a decision point)
    endpoints: dict[tuple[str, str | None], Endpoint] = {}
    tables = {}
    problems = []
    for name, pdp in source.policy.pdp.items():
        token = None
        if pdp.token is not None:
            variable = pdp.token.removeprefix("env:")
            token = env.get(variable)
            if not token:
                problems.append(f"{source.source}: pdp.{name}.token: environment variable "
                                f"{variable} is not set")
        endpoint = endpoints.get((pdp.url, token))
        if endpoint is None:
            endpoint = endpoints[(pdp.url, token)] = Endpoint(pdp.url, token, pdp.timeout_seconds,
                                                              live.transport)
        endpoint.timeout = min(endpoint.timeout, pdp.timeout_seconds)  # a shared batch: the least
        tables[name] = Table(name, endpoint, pdp.cache_seconds, tuple(pdp.subject_claims))
    if problems:
        raise RequirementError(problems)

    def observe(table: str, result: str) -> None:  # read when counted (set once a guard is made)
        told = live.results
        if told is not None:
            told(table, result)

    def server_of(tool: str) -> str | None:
        routes = live.server_of
        return routes(tool) if routes is not None else None

    return PdpResolver(tables, DecisionCache[Verdict](clock=live.clock), observe, server_of)
