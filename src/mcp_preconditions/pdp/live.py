"""What an owner wires into the `pdp:` resolvers of every snapshot it builds (`LiveSources.pdp`):
the metric to count into, how a visible tool name maps to its server, and, for tests, the HTTP
transport and the clock. Read when used, so a gateway may set them once its guard is made.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class PdpLive:
    """`results`: told (table name, result) for every decision (`mcp_preconditions_pdp_total`);
    `server_of`: a visible tool's server key (the gateway's routes), None for a hosted tool;
    `transport`: an httpx2 transport for every endpoint (tests: an ASGI app); `clock`: the cache's."""

    results: Callable[[str, str], None] | None = None
    server_of: Callable[[str], str | None] | None = None
    transport: Any = None
    clock: Callable[[], float] = field(default=time.monotonic)
