"""`pdp:NAME`: an AuthZEN Access Evaluation API 1.0 decision point decides a requirement (SPEC §16,
docs/authzen.md): the policy's `[pdp.NAME]` tables (`build.py`), COAZ-MCP's request (`request.py`),
the HTTP side (`client.py`), the decisions kept (`cache.py`), the lookups (`points.py`), the resolver
(`resolver.py`), a call's late stage (`stage.py`) and a caller's listing (`listing.py`).
The decision point side of AuthZEN (`mcp-preconditions pdp`) is the `authzen` package.
"""

from __future__ import annotations

from .build import pdp_resolver
from .points import NAMESPACE, Table, Verdict
from .resolver import PDP_ORDER, PdpResolver

__all__ = ["NAMESPACE", "PDP_ORDER", "PdpResolver", "Table", "Verdict", "pdp_resolver"]
