"""Who recorded a decision: the replica id that goes into every decision record (label `replica`).

`hostname:pid` by default, unique per process on a host; `MCP_PRECONDITIONS_REPLICA_ID` overrides it
(a pod name, say), verbatim.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

REPLICA_ID_ENV = "MCP_PRECONDITIONS_REPLICA_ID"


def default_replica_id(environ: Mapping[str, str] | None = None) -> str:
    """`$MCP_PRECONDITIONS_REPLICA_ID` when set and not empty, else `hostname:pid`.

    An empty value falls back rather than failing: a deployment template whose variable expanded to
    nothing still gets an id that tells replicas apart."""
    env = os.environ if environ is None else environ
    chosen = env.get(REPLICA_ID_ENV, "")
    return chosen if chosen else f"{socket.gethostname()}:{os.getpid()}"


def replica_labels(upstream: str | None = None, replica: str | None = None) -> dict[str, str]:
    """The labels for `Guard(..., labels=...)`: `replica` always, `upstream` when given."""
    labels = {"replica": replica if replica is not None else default_replica_id()}
    if upstream is not None:
        labels["upstream"] = upstream
    return labels
